"""torch's recurrent layers as the benchmarks' peers: the layer itself, the same layer as an ONNX
model for persist_rnn, and the layer at each precision cuDNN runs it in (with that precision's
bound). Both the suite and FlashRNN's helpers build on these, so neither imports the other."""
from __future__ import annotations

from onnx import helper, numpy_helper

from .gpu_timing import cuda_ms, graph_replay
from .layer_models import NP_TO_ONNX, torch_to_onnx_weights


def torch_layer(op, hidden, seed):
    import torch

    torch.manual_seed(seed)
    cls = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU}[op]
    return cls(hidden, hidden).cuda().eval()


def onnx_from_torch(op, layer, seq_len, batch, dtype="float32"):
    """The torch layer as one ONNX node of `dtype` (float32, float16 or bfloat16), input X (seq_len, batch, H)."""
    w, r, b = (a.astype(dtype) for a in torch_to_onnx_weights(op, *(p.detach().float().cpu().numpy() for p in (
        layer.weight_ih_l0, layer.weight_hh_l0, layer.bias_ih_l0, layer.bias_hh_l0))))
    H = layer.hidden_size
    inits = [numpy_helper.from_array(w[None], "W"), numpy_helper.from_array(r[None], "R"),
             numpy_helper.from_array(b[None], "B")]
    attrs = {"hidden_size": H}
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ["X", "W", "R", "B"], outs, name="layer", **attrs)
    elem = NP_TO_ONNX[dtype]
    shapes = [[seq_len, 1, batch, H], [1, batch, H], [1, batch, H]]  # Y, Y_h, Y_c: the checker wants each typed whole
    g = helper.make_graph([node], "bench", [helper.make_tensor_value_info("X", elem, [seq_len, batch, H])],
                          [helper.make_tensor_value_info(o, elem, shape) for o, shape in zip(outs, shapes)], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8  # loadable by older ONNX Runtime builds too
    return model


def strict_fp32_case(op, hidden, batch, seq_len, dtype="float32"):
    """(layer, x, y, model, feeds) of one benchmark layer: torch's layer (input = hidden) on the GPU
    with TF32 off, its input x and strict fp32 output y (T, B, H), the layer as an ONNX model of
    `dtype` and that model's feeds."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    layer = torch_layer(op, hidden, seed=hidden + batch)
    x = torch.randn(seq_len, batch, hidden, device="cuda")
    with torch.no_grad():
        y = layer(x)[0]
    return layer, x, y, onnx_from_torch(op, layer, seq_len, batch, dtype), {"X": x.cpu().numpy().astype(dtype)}


def cudnn_ms(layer, x):
    """(eager ms, CUDA-graph ms) of a torch RNN module on x."""
    import torch

    with torch.no_grad():
        eager = cuda_ms(lambda: layer(x))
        return eager, cuda_ms(graph_replay(lambda: layer(x)))


#: cuDNN's math type for its algorithms called directly (FMA: strict fp32; DEFAULT: TF32 allowed on
#: fp32 data; TENSOR_OP: 16-bit data on the tensor cores, fp32 accumulation)
PRECISIONS = {"fp32": ("fp32", "float32", "FMA"), "tf32": ("tf32", "float32", "DEFAULT"),
              "fp16": ("fp32", "float16", "TENSOR_OP"), "bf16": ("fp32", "bfloat16", "TENSOR_OP")}
#: each precision's bound, of the output scale: the build precisions' (schedule/precision.py), fp16's
#: four of its unit roundoffs (2^-11), bf16's four of its own (2^-9)
BOUNDS = {"fp16": 2e-3, "bf16": 8e-3}


def at_precision(layer, x, precision: str):
    """(layer, x, output, bound) as cuDNN runs torch's layer at `precision`: 16-bit copies of the
    layer and x at "fp16" and "bf16", themselves otherwise (TF32 is torch's switch, set by the
    caller); the bound is the precision's (`BOUNDS`) over that output's scale."""
    import copy

    import torch

    from ..schedule.precision import TOLERANCE

    half = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(PRECISIONS[precision][1])
    theirs, tx = (copy.deepcopy(layer).to(half), x.to(half)) if half else (layer, x)
    with torch.no_grad():
        want = theirs(tx)[0]
    return theirs, tx, want, {**TOLERANCE, **BOUNDS}[precision] * max(1.0, float(want.float().abs().max()))


def refusal(err) -> str:
    """A refused baseline's row entry: the exception's type and first line."""
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
