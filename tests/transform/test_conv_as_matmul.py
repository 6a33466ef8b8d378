"""ConvAsMatmul: a convolution with a long reduction becomes im2col and a matmul on CUDA (where
dlight would give each output element one thread), with the same values as ONNX Runtime, its rows
written a thread block each; grouped convolutions and short reductions keep TVM's own lowering."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from persist_rnn.bench.layer_models import max_rel_error, ort_run
from persist_rnn.frontend import from_onnx
from persist_rnn.transform import ConvAsMatmul
from persist_rnn.transform.conv_as_matmul import conv_as_matmul

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def _conv(channels, out, kernel, group=1, **attrs):
    """x (B, channels, [H,] T) -> Conv with bias, symbolic batch and extents."""
    rng = np.random.default_rng(len(kernel) * 10 + channels)
    w = (rng.standard_normal((out, channels // group, *kernel)) / np.sqrt(channels * np.prod(kernel))).astype("float32")
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(rng.standard_normal(out).astype("float32"), "b")]
    spatial = ["H", "T"][-len(kernel):]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=list(kernel), group=group, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", channels, *spatial])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


CASES = {
    "conv1d strided, dilated, padded unevenly": (_conv(8, 16, (5,), strides=[2], pads=[2, 1], dilations=[2]), (2, 8, 37)),
    "conv2d 3x3 padded": (_conv(4, 6, (3, 3), pads=[1, 1, 1, 1]), (3, 4, 9, 20)),
    "conv2d strided along width, padded unevenly": (_conv(4, 6, (3, 3), strides=[1, 2], pads=[1, 0, 1, 2]), (1, 4, 6, 17)),
    "conv1d one channel, an STFT's kernel": (_conv(1, 10, (64,), strides=[16]), (2, 1, 300)),
}


def _calls(mod, name: str) -> int:
    return str(mod["main"]).count(name)


@pytest.mark.parametrize("case", CASES)
def test_the_rewrite_matches_onnx_runtime(case):
    model, shape = CASES[case]
    mod = conv_as_matmul(from_onnx(model, None, target_kind="llvm"), blocks=False)
    assert _calls(mod, "persist_rnn_im2col") == 1 and _calls(mod, "R.nn.conv") == 0
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    assert max_rel_error([got], ort_run(model, {"x": x})) <= 1e-5


@pytest.mark.parametrize("model", [_conv(4, 8, (3, 3), group=2, pads=[1, 1, 1, 1]), _conv(1, 32, (3, 3))],
                         ids=["grouped", "a short reduction (one channel, 3 x 3)"])
def test_grouped_and_short_convolutions_are_left(model):
    mod = conv_as_matmul(from_onnx(model, None, target_kind="llvm"))
    assert _calls(mod, "persist_rnn_im2col") == 0 and _calls(mod, "R.nn.conv2d") == 1


@pytest.mark.parametrize("blocks", [True, False])
def test_rows_are_written_a_thread_block_each_on_cuda(blocks):
    """A row of 36 (4 channels x 3 x 3) a thread block, its threads along the row; unscheduled
    where the target is not CUDA (`blocks` False), for its own default schedule."""
    mod = conv_as_matmul(from_onnx(CASES["conv2d 3x3 padded"][0], None, target_kind="cuda"), blocks=blocks)
    [im2col] = [f for gv, f in mod.functions.items() if gv.name_hint.startswith("persist_rnn_im2col")]
    assert bool(im2col.attrs.get("tirx.is_scheduled", False)) is blocks
    assert ('"blockIdx.x"' in str(im2col)) is blocks


def test_the_pass_rewrites_for_cuda_only():
    model = CASES["conv2d 3x3 padded"][0]
    assert _calls(ConvAsMatmul(CUDA)(from_onnx(model, None, target_kind="cuda")), "persist_rnn_im2col") == 1
    assert _calls(ConvAsMatmul("llvm")(from_onnx(model, None, target_kind="llvm")), "persist_rnn_im2col") == 0
