"""Per-step time of one persistent kernel on the GPU box, which has nvcc and a driver but no TVM.

    python benchmarks/step_harness.py lstm 64 '{"tile_units": 64, "group_size": 2, "rows_per_group": 4,
        "batch_chunk": 1, "batch_tile": 1}' --batch 1 -o build/lstm64     # here: CUDA from TVM, nvcc
    build/lstm64                                                           # there: T=1, 100, 1000 and per step

TVM emits the kernel's CUDA here; it is wrapped in a host program (random inputs, CUDA-event
timing of 5 back-to-back launches, median of 15) and built with nvcc into a binary that needs only
the driver. The per-step time is the slope between T=100 and T=1000. Edit the `.cu` written beside
the binary for ablations (a step without its activations, shuffles, input loads, ...):
docs/design.md lists the ones that shaped template version 4. Configs whose direction is one CTA or a
grid of CTAs (each launch of a grid kernel first runs the kernel that zeroes its barrier counters, as
the layer does); not clusters. A kernel in dynamic shared memory is launched with all a CTA may
opt into (DYNAMIC_SHARED_BYTES less its static arrays; one CTA an SM, as every persistent kernel
runs), since TVM's own size is computed by its host code: an A/B of two such kernels shares that, a time against a
kernel in static shared memory does not quite (the L1 cache the rest leaves differs).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

HOST = r"""
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define BUF (64u << 20)
#define DYNAMIC_SHARED_BYTES %(dynamic)d
__global__ void fill_random(float* p, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  unsigned x = (unsigned)i * 2654435761u + 1234u; x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
  if (i < n) p[i] = ((x & 0xffff) / 65536.0f - 0.5f) * 0.3f;
}
__global__ void fill_int(int* p, size_t n, int v) { size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) p[i] = v; }
float* random_buffer() { float* p; cudaMalloc(&p, BUF); fill_random<<<BUF / 4 / 256, 256>>>(p, BUF / 4); return p; }
int* lengths(long long n_t) { int* p; cudaMalloc(&p, 4 * 4096); fill_int<<<16, 256>>>(p, 4096, (int)n_t); return p; }
float launch_us(long long n_t, long long n_b) {
  %(decls)s
  if (DYNAMIC_SHARED_BYTES) cudaFuncSetAttribute(%(main)s, cudaFuncAttributeMaxDynamicSharedMemorySize, DYNAMIC_SHARED_BYTES);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<float> times;
  for (int rep = 0; rep < 15; ++rep) {
    cudaEventRecord(a);
    for (int i = 0; i < 5; ++i) {
      %(zero)s
      %(main)s<<<%(grid)d, %(threads)d, DYNAMIC_SHARED_BYTES>>>(%(args)s);
    }
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); times.push_back(ms * 1000.f / 5);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) { printf("error: %%s\n", cudaGetErrorString(err)); exit(1); }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}
int main() {
  float t1 = launch_us(1, %(batch)d), t100 = launch_us(100, %(batch)d), t1000 = launch_us(1000, %(batch)d);
  printf("%%-28s T=1 %%7.2f us  T=100 %%7.2f us  T=1000 %%7.2f us  per step %%.4f us\n", "%(name)s", t1, t100, t1000,
         (t1000 - t100) / 900);
}
"""


#: the shared memory a kernel with dynamic shared memory is launched with, its static arrays
#: included: the most a CTA of an H100 or H200 may opt into (227 KiB)
DYNAMIC_SHARED_BYTES = 232448


def kernel_source(cell: str, hidden: int, cfg, batch: int, dtype: str = "float32") -> tuple[str, int, int]:
    """The kernel's CUDA source, its grid and its block size."""
    import tvm

    from persist_rnn.schedule.measure import build_kernel
    from tir_templates.persistent import persistent_kernel
    from tir_templates.spec import CellSpec

    spec = CellSpec(cell, hidden, hidden, linear_before_reset=(cell == "gru"), dtype=dtype)
    if cfg.barrier(spec) not in ("cta", "grid"):
        raise SystemExit(f"{cfg.as_dict()}: the harness times configs whose direction is one CTA or a grid")
    lib = build_kernel(persistent_kernel(spec, cfg), tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    if cfg.barrier(spec) == "grid":
        from tir_templates.persistent.layout import Layout
        grid = int(Layout(spec, cfg).grid_size(batch))
    else:
        grid = spec.num_directions * (-(-batch // cfg.batch_tile) if cfg.batch_tile else 1)
    return lib.mod.imports[0].inspect_source(), grid, cfg.threads(spec)


def static_shared_bytes(source: str) -> int:
    """Bytes of the kernels' static `__shared__` arrays (each rounded up to its 64-byte alignment)."""
    sizes = {"float": 4, "uint": 4, "int": 4, "half": 2, "uint64_t": 8, "ulong": 8, "uchar": 1}
    arrays = re.findall(r"__shared__ alignas\(\d+\) (\w+) \w+\[(\d+)\];", source)
    return sum(-(-sizes[dtype] * int(n) // 64) * 64 for dtype, n in arrays)


def host_program(source: str, grid: int, threads: int, batch: int, name: str) -> str:
    """`source` plus a main() that times its kernel: every pointer argument a random 64 MiB buffer
    (the lengths all T), n_t and n_b as given."""
    kernels = re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\) (main_kernel\w*)\(([^)]*)\);', source)
    zero = ""
    if len(kernels) == 2:  # a grid kernel: the first zeroes the barrier counters (its one argument, ws)
        zero = f"{kernels[0][0]}<<<1, 32>>>((uint*)ws_ptr);"
    main_name, params = kernels[-1]
    decls, args = [], []
    for param in (p.strip() for p in params.split(",")):
        name_ = param.rsplit(" ", 1)[1]
        if name_ in ("n_t", "n_b"):
            args.append(name_)
        elif name_.startswith("lens"):
            decls.append(f"int* {name_} = lengths(n_t);")
            args.append(name_)
        else:
            decls.append(f"float* {name_} = random_buffer();")
            args.append(f"({param.split()[0]}){name_}")
    dynamic = DYNAMIC_SHARED_BYTES - static_shared_bytes(source) if "extern __shared__" in source else 0
    return source + HOST % {"decls": "\n  ".join(decls), "args": ", ".join(args), "grid": grid, "threads": threads,
                            "batch": batch, "name": name, "zero": zero, "main": main_name, "dynamic": dynamic}


def main():
    from tir_templates.config import Config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cell", choices=["lstm", "gru", "rnn"])
    ap.add_argument("hidden", type=int)
    ap.add_argument("config", help="the Config as JSON")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="the layer's dtype")
    ap.add_argument("-o", "--out", required=True, help="the binary (its source goes beside it, OUT.cu)")
    args = ap.parse_args()
    source, grid, threads = kernel_source(args.cell, args.hidden, Config.from_dict(json.loads(args.config)),
                                          args.batch, args.dtype)
    with open(args.out + ".cu", "w") as f:
        f.write(host_program(source, grid, threads, args.batch, os.path.basename(args.out)))
    subprocess.run(["nvcc", "-arch=sm_90", "-O3", "-w", "-o", args.out, args.out + ".cu"], check=True)
    print(f"wrote {args.out} ({grid} CTAs of {threads} threads); run it on the GPU box")


if __name__ == "__main__":
    main()
