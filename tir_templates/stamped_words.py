"""A value and its step's stamp in one 8-byte word: what lets a reader take h(t) from L2 without
a barrier between it and the writer. An aligned 8-byte store is seen whole or not at all, so a
reader that sees the stamp it expects has the value too; one that sees another stamp loads the
word again. The CUDA helpers here serve the layer wavefront (`wavefront/stamped.py`) and the
stamped exchange of one layer's CTAs (`persistent/stamped_exchange.py`).
"""
from __future__ import annotations

STORE = r"""
__device__ __forceinline__ void prnn_stamped_store(float* at, float value, unsigned int stamp) {
  // value and stamp in one 8-byte store: a reader sees both or neither
  unsigned long long word = ((unsigned long long)stamp << 32) | (unsigned long long)__float_as_uint(value);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" :: "l"(at), "l"(word) : "memory");
}
"""
ISSUE = r"""
__device__ __forceinline__ unsigned long long prnn_stamped_issue(float* at) {
  // the word as L2 holds it now (its use, in settle, waits for it; other loads go out meanwhile)
  unsigned long long word;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(word) : "l"(at) : "memory");
  return word;
}
"""
SETTLE = r"""
__device__ __forceinline__ float prnn_stamped_settle(unsigned long long word, float* at, unsigned int stamp) {
  // the value of `word`, reloaded until it carries `stamp`; ~30 s without it traps, never hangs
  long long start = clock64();
  while ((unsigned int)(word >> 32) != stamp) {
    if (clock64() - start > (1LL << 36)) __trap();
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(word) : "l"(at) : "memory");
  }
  return __uint_as_float((unsigned int)(word & 0xffffffffull));
}
"""
