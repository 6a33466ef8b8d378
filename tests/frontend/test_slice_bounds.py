"""Slice with INT64_MAX-style bounds on a symbolic extent (torch writes them for `x.flip` and
`x[..., 1:]`): they used to overflow int64 in TVM's shape arithmetic at build time, and, clamped
to a large constant, made the memory planner reserve that many elements (bad_alloc at B=3 for
openwakeword's bundled VAD). They are written as the extent now (op_fixes.Slice)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import persist_rnn
from persist_rnn.frontend import from_onnx
from persist_rnn.bench.layer_models import max_rel_error, ort_run

BIG = 2**63 - 1


def _model(starts, ends, steps):
    """x (B, 3, T) -> Slice on axis 2 with the given bounds, then x * 2 so that the slice is inside."""
    init = [helper.make_tensor(n, TensorProto.INT64, [len(v)], v)
            for n, v in (("starts", starts), ("ends", ends), ("axes", [2] * len(starts)), ("steps", steps))]
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"], name="the_slice"),
             helper.make_node("Mul", ["s", "two"], ["y"])]
    init.append(helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 3, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES = {"reverse": ([-1], [-BIG], [-1]), "tail": ([1], [BIG], [1]), "reverse_by_2": ([-2], [-BIG], [-2]),
         "from_before_start": ([-BIG], [BIG], [1]), "empty": ([BIG], [BIG], [1]),
         "negative_step_from_before_the_start": ([-5], [-BIG], [-1]),  # T=1..3: ONNX starts at 0
         "negative_step_small_bounds": ([-2], [-4], [-1])}


@pytest.mark.parametrize("case", list(CASES))
def test_huge_bounds_on_a_symbolic_extent_match_onnx_runtime(case):
    model = _model(*CASES[case])
    compiled = persist_rnn.compile(model, "llvm", simplify=False)
    for b, t in ((1, 7), (3, 1), (5, 12)):
        x = np.random.default_rng(b).standard_normal((b, 3, t)).astype("float32")
        got, want = compiled.run({"x": x}), ort_run(model, {"x": x})
        assert got[0].shape == want[0].shape
        assert max_rel_error(got, want) <= 1e-6


def test_slice_shapes_hold_no_huge_constant():
    """A constant bound in the shape is what the memory planner would have reserved."""
    mod = from_onnx(_model(*CASES["reverse"]))
    shape = mod["main"].ret_ty.shape if hasattr(mod["main"].ret_ty, "shape") else None
    assert shape is not None and "2147483646" not in str(shape) and "922337" not in str(shape), shape
