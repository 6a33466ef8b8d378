"""FlashRNN (Pöppel et al. 2024, arXiv 2412.07752; `flashrnn` on PyPI) as a benchmark anchor: torch's
nn.LSTM / nn.GRU layer run by FlashRNN's kernels, input projection included, so that it times the
same whole layer as ours.

FlashRNN takes the input projection precomputed (Wx, [B, T, G, N, D]) and a recurrent matrix per
gate and head (R, [G, N, D, P]: output unit, then the previous step's unit, as torch's W_hh); one head here (N = 1, D = H). Its LSTM gates are torch's
order (i, f, g, o), bias b_ih + b_hh. Its GRU (FlashRNN's vanilla/gru.py) takes Wx for (r, z, n),
R for (n, r, z) and four biases (b_hn, b_r, b_z, b_in): torch's GRU, reset applied after R_hn h
(ONNX's linear_before_reset=1). `check_against_torch` runs its pure-torch `vanilla` backend, which
the CUDA backends must agree with, against torch's layer.
"""
from __future__ import annotations

#: FlashRNN's backends, fastest first by its paper; `vanilla` is its pure-torch reference. Its GRU
#: has no fused kernel: FlashRNN runs `cuda` when asked for `cuda_fused` (the row says so)
BACKENDS = ("cuda_fused", "cuda", "triton_fused")


def has_backend(function: str, backend: str) -> bool:
    """Whether FlashRNN has `backend` for `function` ("lstm", "gru"): no fused GRU kernel."""
    return not (function.lower() == "gru" and backend == "cuda_fused")


def device_facts(device_id: int) -> dict:
    """The four device facts FlashRNN's fused kernel sizes its tiles by, from torch. FlashRNN reads
    them through a C++ extension of its own (gpu_info.cc) that no longer compiles against CUDA 13's
    cudaDeviceProp (clockRate and six other fields were removed), so the anchor answers for it."""
    import torch

    props = torch.cuda.get_device_properties(device_id)
    return {"maxThreadsPerBlock": 1024,  # every GPU since Fermi
            "regsPerMultiprocessor": getattr(props, "regs_per_multiprocessor", 65536),
            "multiProcessorCount": props.multi_processor_count,
            "sharedMemPerBlockOptin": getattr(props, "shared_memory_per_block_optin", 232448)}


def _answer_device_facts():
    """FlashRNN asks `get_gpu_info` (imported into its flashrnn module) once per kernel config."""
    import importlib

    module = importlib.import_module("flashrnn.flashrnn.flashrnn")
    module.get_gpu_info = device_facts


def flashrnn_operands(layer):
    """(project, R, b, function): `project(x)` maps torch's (T, B, I) input to FlashRNN's Wx, and R,
    b its weights, from torch's single-layer unidirectional `layer`, in the layer's dtype."""
    import torch

    H = layer.hidden_size
    w_ih, w_hh = layer.weight_ih_l0, layer.weight_hh_l0
    b_ih, b_hh = layer.bias_ih_l0, layer.bias_hh_l0
    if isinstance(layer, torch.nn.LSTM):
        function, G = "lstm", 4
        R = w_hh.view(G, H, H)  # [G, D_out, D_in], as torch holds it
        b = (b_ih + b_hh).view(G, H)
    elif isinstance(layer, torch.nn.GRU):
        function, G = "gru", 3
        r, z, n = w_hh.view(G, H, H)
        R = torch.stack((n, r, z))
        bi, bh = b_ih.view(G, H), b_hh.view(G, H)
        b = torch.stack((bh[2], bi[0] + bh[0], bi[1] + bh[1], bi[2]))
    else:
        raise TypeError(f"FlashRNN anchor: nn.LSTM or nn.GRU, got {type(layer).__name__}")

    def project(x):  # the biases are all in b
        T, B, _ = x.shape
        return torch.nn.functional.linear(x, w_ih).view(T, B, G, 1, H).transpose(0, 1)

    return project, R[:, None].contiguous(), b[:, None].contiguous(), function


def flashrnn_call(layer, x, backend: str):
    """A no-argument forward of `layer` on x (T, B, I) through FlashRNN's `backend`, input
    projection included; returns (call, y) with y (T, B, H) filled by each call. Raises whatever
    FlashRNN raises for a shape or dtype it refuses (the bench records it)."""
    import torch
    from flashrnn import flashrnn

    _answer_device_facts()
    project, R, b, function = flashrnn_operands(layer)
    if not has_backend(function, backend):  # FlashRNN would quietly run `cuda` instead
        raise ValueError("FlashRNN has no fused GRU kernel (it runs the cuda backend)")
    dtype = str(x.dtype).replace("torch.", "")  # float16, bfloat16 or float32, as FlashRNN names them
    y = torch.empty(x.shape[0], x.shape[1], layer.hidden_size, device=x.device, dtype=x.dtype)

    def call():
        states, _ = flashrnn(project(x), R, b, function=function, backend=backend, dtype=dtype)
        y.copy_(states[0, :, :, 0].transpose(0, 1))  # [S, B, T, N, D]: h of every step

    call()
    return call, y


def check_against_torch(layer, x) -> float:
    """max |FlashRNN's vanilla backend - torch's layer| on x: the operands' conversion is right when
    it is at rounding level."""
    import torch

    call, y = flashrnn_call(layer, x, "vanilla")
    with torch.no_grad():
        want = layer(x)[0]
    return float((y - want).abs().max())
