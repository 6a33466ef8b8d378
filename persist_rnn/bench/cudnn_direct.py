"""cuDNN's RNN algorithms called directly, the strongest anchor at batch 1.

torch's `nn.LSTM`/`nn.GRU` run cuDNN's STANDARD algorithm; cuDNN also ships persistent ones
(`PERSIST_STATIC`, `PERSIST_DYNAMIC`, `PERSIST_STATIC_SMALL_H`) that torch never calls. This calls
`cudnnRNNForward` (cuDNN 9 API, inference mode) through ctypes on the libcudnn that torch ships,
with a torch layer's own weights copied into cuDNN's weight space, so that every algorithm can be
checked against torch's output before it is timed. Enum values are those of cuDNN 9's headers,
checked against the installed headers when they are present (`check_enums`).

Needs torch with CUDA (the GPU box); nothing here runs on a machine without one.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import re

ALGOS = {"STANDARD": 0, "PERSIST_STATIC": 1, "PERSIST_DYNAMIC": 2, "PERSIST_STATIC_SMALL_H": 3}
MODES = {"RNN_TANH": 1, "LSTM": 2, "GRU": 3}
DATA = {"float32": 0, "float16": 2, "bfloat16": 9}
#: FMA: strict fp32 (what torch's fp32 layers compute with TF32 off); DEFAULT lets cuDNN use TF32
MATH = {"DEFAULT": 0, "TENSOR_OP": 1, "FMA": 3}
DOUBLE_BIAS, UNIDIRECTIONAL, LINEAR_INPUT, FWD_INFERENCE, SEQ_MAJOR_UNPACKED, PADDED_IO_DISABLED = 2, 0, 0, 0, 0, 0
#: the header names of the values above, for `check_enums`
HEADER_NAMES = {"CUDNN_RNN_ALGO_STANDARD": 0, "CUDNN_RNN_ALGO_PERSIST_STATIC": 1, "CUDNN_RNN_ALGO_PERSIST_DYNAMIC": 2,
                "CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H": 3, "CUDNN_RNN_TANH": 1, "CUDNN_LSTM": 2, "CUDNN_GRU": 3,
                "CUDNN_RNN_DOUBLE_BIAS": 2, "CUDNN_FMA_MATH": 3, "CUDNN_DEFAULT_MATH": 0, "CUDNN_TENSOR_OP_MATH": 1,
                "CUDNN_DATA_FLOAT": 0, "CUDNN_DATA_HALF": 2, "CUDNN_DATA_BFLOAT16": 9, "CUDNN_FWD_MODE_INFERENCE": 0,
                "CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED": 0, "CUDNN_UNIDIRECTIONAL": 0, "CUDNN_LINEAR_INPUT": 0}


class Refused(RuntimeError):
    """cuDNN refused the algorithm for this layer (the persistent ones refuse some shapes)."""


def _library():
    """libcudnn beside torch (its CUDA wheels), and the cudnn headers found there."""
    import torch

    roots = [os.path.dirname(torch.__file__)]
    try:
        import nvidia

        roots = [os.path.dirname(p) for p in getattr(nvidia, "__path__", [])] + roots
    except ImportError:
        pass
    for root in roots:
        libs = sorted(glob.glob(os.path.join(root, "**", "libcudnn.so*"), recursive=True))
        if libs:
            return libs[0], sorted(glob.glob(os.path.join(root, "**", "include", "cudnn*.h"), recursive=True))
    raise RuntimeError("libcudnn not found beside torch")


def check_enums(headers) -> dict:
    """The enum values this module uses against the installed headers: {"checked": n, "bad": {...}}."""
    text = "".join(open(h, errors="ignore").read() for h in headers)
    seen = {name: int(m.group(1)) for name in HEADER_NAMES
            if (m := re.search(r"\b%s\s*=\s*(\d+)" % name, text))}
    return {"checked": len(seen), "of": len(HEADER_NAMES),
            "bad": {k: v for k, v in seen.items() if v != HEADER_NAMES[k]}}


class CudnnRNN:
    """One cuDNN handle on torch's current stream; `layer_call` builds a callable forward pass."""

    def __init__(self):
        import torch

        torch.zeros(1, device="cuda")
        path, self.headers = _library()
        enums = check_enums(self.headers) if self.headers else {"checked": 0, "bad": {}}
        if enums["bad"]:
            raise RuntimeError(f"cuDNN enum values differ from the headers: {enums['bad']}")
        self.enum_check = enums
        self.lib = ctypes.CDLL(path)
        self.lib.cudnnGetErrorString.restype = ctypes.c_char_p
        self.handle = ctypes.c_void_p()
        self._ok(self.lib.cudnnCreate(ctypes.byref(self.handle)), "cudnnCreate")
        self._ok(self.lib.cudnnSetStream(self.handle, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
                 "cudnnSetStream")
        self.dropout = ctypes.c_void_p()
        self._ok(self.lib.cudnnCreateDropoutDescriptor(ctypes.byref(self.dropout)), "dropout descriptor")
        self._ok(self.lib.cudnnSetDropoutDescriptor(self.dropout, self.handle, ctypes.c_float(0.0), ctypes.c_void_p(),
                                                    ctypes.c_size_t(0), ctypes.c_ulonglong(0)), "dropout descriptor")

    def _ok(self, status, what, refusal=False):
        if status != 0:
            msg = f"{what}: {self.lib.cudnnGetErrorString(status).decode()}"
            raise Refused(msg) if refusal else RuntimeError(msg)

    def layer_call(self, layer, x, algo: str, math: str = "FMA"):
        """A no-argument forward of torch's single-layer unidirectional `layer` (nn.LSTM, nn.GRU or
        nn.RNN with tanh) on x (T, B, I) with algorithm `algo`; returns (call, y) where y is filled
        by each call. Raises Refused when cuDNN refuses the algorithm for this shape."""
        import torch

        vp, sz, lib = ctypes.c_void_p, ctypes.c_size_t, self.lib
        mode = {"LSTM": "LSTM", "GRU": "GRU", "RNN": "RNN_TANH"}[type(layer).__name__]
        gates = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1}[mode]
        T, B, I = x.shape
        H = layer.hidden_size
        dtype = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[x.dtype]
        rnn = vp()
        self._ok(lib.cudnnCreateRNNDescriptor(ctypes.byref(rnn)), "RNN descriptor")
        self._ok(lib.cudnnSetRNNDescriptor_v8(rnn, ALGOS[algo], MODES[mode], DOUBLE_BIAS, UNIDIRECTIONAL, LINEAR_INPUT,
                                              DATA[dtype], DATA["float32"], MATH[math], I, H, H, 1, self.dropout,
                                              PADDED_IO_DISABLED), f"SetRNNDescriptor_v8 {algo}", refusal=True)
        if algo == "PERSIST_DYNAMIC":
            self._ok(lib.cudnnBuildRNNDynamic(self.handle, rnn, B), "BuildRNNDynamic", refusal=True)
        lengths = (ctypes.c_int * B)(*([T] * B))
        xd, yd, hd = vp(), vp(), vp()
        for d, width in ((xd, I), (yd, H)):
            self._ok(lib.cudnnCreateRNNDataDescriptor(ctypes.byref(d)), "data descriptor")
            self._ok(lib.cudnnSetRNNDataDescriptor(d, DATA[dtype], SEQ_MAJOR_UNPACKED, T, B, width, lengths, vp()),
                     "SetRNNDataDescriptor")
        self._ok(lib.cudnnCreateTensorDescriptor(ctypes.byref(hd)), "tensor descriptor")
        self._ok(lib.cudnnSetTensorNdDescriptor(hd, DATA[dtype], 3, (ctypes.c_int * 3)(1, B, H),
                                                (ctypes.c_int * 3)(B * H, H, 1)), "SetTensorNdDescriptor")
        wsize, work, reserve = sz(), sz(), sz()
        self._ok(lib.cudnnGetRNNWeightSpaceSize(self.handle, rnn, ctypes.byref(wsize)), "WeightSpaceSize", refusal=True)
        self._ok(lib.cudnnGetRNNTempSpaceSizes(self.handle, rnn, FWD_INFERENCE, xd, ctypes.byref(work),
                                               ctypes.byref(reserve)), f"TempSpaceSizes {algo}", refusal=True)
        weights = torch.zeros(wsize.value // x.element_size(), dtype=x.dtype, device="cuda")
        self._copy_weights(rnn, layer, weights, wsize, gates, H, x.dtype)
        y = torch.empty(T, B, H, device="cuda", dtype=x.dtype)
        h0 = torch.zeros(1, B, H, device="cuda", dtype=x.dtype)
        hy, cy = torch.empty_like(h0), torch.empty_like(h0)
        ws = torch.empty(max(work.value, 1), dtype=torch.uint8, device="cuda")
        rs = torch.empty(max(reserve.value, 1), dtype=torch.uint8, device="cuda")
        dev_lengths = torch.full((B,), T, dtype=torch.int32, device="cuda")
        x = x.contiguous()
        ptr = lambda t: vp(t.data_ptr())  # noqa: E731
        lstm = mode == "LSTM"
        keep = (rnn, xd, yd, hd, weights, y, h0, hy, cy, ws, rs, dev_lengths, x)  # alive as long as the call

        def call():
            self._ok(lib.cudnnRNNForward(self.handle, keep[0], FWD_INFERENCE, ptr(dev_lengths), xd, ptr(x), yd, ptr(y),
                                         hd, ptr(h0), ptr(hy), hd if lstm else vp(), ptr(h0) if lstm else vp(),
                                         ptr(cy) if lstm else vp(), wsize, ptr(weights), work, ptr(ws), reserve,
                                         ptr(rs)), f"RNNForward {algo}", refusal=True)

        call()
        torch.cuda.synchronize()
        return call, y

    def _copy_weights(self, rnn, layer, weights, wsize, gates, H, dtype):
        """torch's W_ih, W_hh, b_ih, b_hh into cuDNN's weight space. cuDNN's linear layers 0..G-1
        multiply the input and G..2G-1 the hidden state, gates in torch's order (LSTM i, f, g, o;
        GRU r, z, n), each with its own bias (double bias)."""
        import torch

        vp = ctypes.c_void_p
        m_desc, b_desc = vp(), vp()
        self._ok(self.lib.cudnnCreateTensorDescriptor(ctypes.byref(m_desc)), "tensor descriptor")
        self._ok(self.lib.cudnnCreateTensorDescriptor(ctypes.byref(b_desc)), "tensor descriptor")
        base, size = weights.data_ptr(), weights.element_size()
        with torch.no_grad():
            for lin in range(2 * gates):
                w = (layer.weight_ih_l0 if lin < gates else layer.weight_hh_l0)[(lin % gates) * H:(lin % gates + 1) * H]
                b = (layer.bias_ih_l0 if lin < gates else layer.bias_hh_l0)[(lin % gates) * H:(lin % gates + 1) * H]
                m_addr, b_addr = vp(), vp()
                self._ok(self.lib.cudnnGetRNNWeightParams(self.handle, rnn, 0, wsize, vp(base), lin, m_desc,
                                                          ctypes.byref(m_addr), b_desc, ctypes.byref(b_addr)),
                         "GetRNNWeightParams")
                for addr, src in ((m_addr, w), (b_addr, b)):
                    start = (addr.value - base) // size
                    weights[start:start + src.numel()].copy_(src.detach().reshape(-1).to(dtype))
        self.lib.cudnnDestroyTensorDescriptor(m_desc)
        self.lib.cudnnDestroyTensorDescriptor(b_desc)


@functools.lru_cache(maxsize=1)
def _cudnn() -> CudnnRNN:
    return CudnnRNN()


def algorithm_rows(layer, x, want, ms, math: str = "FMA") -> dict:
    """Every algorithm on `layer` and x: {algo: {"ms": ..., "max_diff": ...} or {"refused": ...}};
    `want` is torch's output at the same precision, `ms(call)` times a callable."""
    cudnn = _cudnn()
    rows = {}
    for algo in ALGOS:
        try:
            call, y = cudnn.layer_call(layer, x, algo, math)
        except Refused as err:
            rows[algo] = {"refused": str(err)}
            continue
        rows[algo] = {"max_diff": float((y.float() - want.float()).abs().max()), "ms": ms(call)}
    return rows
