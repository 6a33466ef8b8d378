"""ONNX Loop and Scan over time (frontend.loops): as one recurrent node, unrolled, or refused.

The scripted-torch fixtures were exported on the GPU box (tests/fixtures/loops/make_loop_fixtures.py,
torch 2.11, TorchScript exporter): each holds its inputs and torch's outputs. The Scan and
non-cell Loop models are written here with onnx.helper. Every compiled answer is checked against
ONNX Runtime (and torch where it exported), fp32 within 1e-4 of the output scale.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

import persist_rnn
from persist_rnn.errors import PersistRNNError
from persist_rnn.frontend.front_door import prepare
from persist_rnn.bench.layer_models import max_rel_error, ort_run

FIXTURES = "tests/fixtures/loops/"
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
RNG = np.random.default_rng(0)


def _fixture(name):
    data = np.load(f"{FIXTURES}{name}.npz")
    model = onnx.load(f"{FIXTURES}{name}.onnx")
    feeds = {i.name: data[i.name] for i in model.graph.input if i.name in data}
    return model, feeds, [data[k] for k in sorted(k for k in data if k.startswith("out"))]


def _check(model, feeds, want=None, **pins):
    compiled = persist_rnn.compile(model, "llvm", **pins)
    got = compiled.run(feeds)
    assert max_rel_error(got, ort_run(model, feeds)) <= 1e-4
    if want is not None:
        assert max_rel_error(got, want) <= 1e-4
    return compiled


def test_scripted_lstmcell_loop_becomes_one_lstm_node():
    """torch's scripted LSTMCell loop: a Loop over x.size(0) with an LSTM node in its body and a
    list of h's. It becomes one LSTM over the sequence: T and B stay symbolic, one layer reported,
    and for CUDA it is a persistent kernel."""
    model, feeds, want = _fixture("torch_scripted_lstmcell")
    compiled = _check(model, feeds, want)
    assert any("made one LSTM node" in n for n in compiled.notes), compiled.notes
    [layer] = compiled.report()
    assert (layer.cell, layer.hidden_size) == ("lstm", 12)
    longer = {"x": RNG.standard_normal((9, 5, 10)).astype("float32"), "h0": feeds["h0"][:1].repeat(5, 0),
              "c0": feeds["c0"][:1].repeat(5, 0)}
    assert max_rel_error(compiled.run(longer), ort_run(model, longer)) <= 1e-4  # symbolic T and B
    built = persist_rnn.compile(model, CUDA, measure=False)
    assert [r.lowering for r in built.report()] == ["persistent"]


def test_scripted_hand_written_cell_needs_a_pinned_length_then_is_matched():
    """A cell written out in primitive ops inside a Loop with a run-time trip count is refused,
    naming the node and the pin; with the sequence length pinned it is unrolled, and MatchCells
    finds the LSTM (persistent for CUDA)."""
    model, feeds, want = _fixture("torch_scripted_hand_lstm")
    with pytest.raises(PersistRNNError, match=r"node '/Loop' \(Loop\).*pin the sequence length"):
        persist_rnn.compile(model, "llvm")
    compiled = _check(model, feeds, want, shapes={"x": (6, 3, 10)})
    assert any("unrolled, 6 steps" in n for n in compiled.notes)
    assert [r.cell for r in compiled.report()] == ["lstm"]
    built = persist_rnn.compile(model, CUDA, shapes={"x": (6, 3, 10)}, measure=False)
    assert [r.lowering for r in built.report()] == ["persistent"]


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def _scan_gru_model(hidden=8, inputs=5):
    """Scan over X (T, B, I) whose body runs one GRU step: Unsqueeze, GRU, Squeeze."""
    W = numpy_helper.from_array(RNG.standard_normal((1, 3 * hidden, inputs)).astype("float32") * 0.4, "W")
    R = numpy_helper.from_array(RNG.standard_normal((1, 3 * hidden, hidden)).astype("float32") * 0.4, "R")
    B = numpy_helper.from_array(RNG.standard_normal((1, 6 * hidden)).astype("float32") * 0.1, "B")
    body = helper.make_graph(
        [_const("zero", np.array([0], "int64")),
         helper.make_node("Unsqueeze", ["x_t", "zero"], ["x_seq"]),
         helper.make_node("Unsqueeze", ["h_in", "zero"], ["h_seq"]),
         helper.make_node("GRU", ["x_seq", "W", "R", "B", "", "h_seq"], ["y", "y_h"], hidden_size=hidden,
                          linear_before_reset=1, name="step_gru"),
         helper.make_node("Squeeze", ["y_h", "zero"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["y_t"])],
        "body",
        [helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["B", hidden]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, ["B", inputs])],
        [helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["B", hidden]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, ["B", hidden])])
    scan = helper.make_node("Scan", ["h0", "X"], ["h_last", "Y"], name="scan", body=body, num_scan_inputs=1)
    graph = helper.make_graph([scan], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "B", inputs]),
                                            helper.make_tensor_value_info("h0", TensorProto.FLOAT, ["B", hidden])],
                              [helper.make_tensor_value_info("h_last", TensorProto.FLOAT, ["B", hidden]),
                               helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["T", "B", hidden])],
                              initializer=[W, R, B])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_scan_with_a_gru_step_becomes_one_gru_node():
    model = _scan_gru_model()
    feeds = {"X": RNG.standard_normal((7, 3, 5)).astype("float32"), "h0": RNG.standard_normal((3, 8)).astype("float32")}
    compiled = _check(model, feeds)
    assert [r.cell for r in compiled.report()] == ["gru"] and "made one GRU node" in compiled.notes[-1]


def _scan_rnn_cell_model(steps, hidden=8, inputs=5, reverse=False):
    """Scan whose body is an RNN cell in primitive ops: tanh(x_t @ Wx + h @ Wh + b)."""
    inits = [numpy_helper.from_array(RNG.standard_normal((inputs, hidden)).astype("float32") * 0.5, "Wx"),
             numpy_helper.from_array(RNG.standard_normal((hidden, hidden)).astype("float32") * 0.5, "Wh"),
             numpy_helper.from_array(RNG.standard_normal((hidden,)).astype("float32") * 0.1, "b")]
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "Wx"], ["xw"]), helper.make_node("MatMul", ["h_in", "Wh"], ["hw"]),
         helper.make_node("Add", ["xw", "hw"], ["s"]), helper.make_node("Add", ["s", "b"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_out"]), helper.make_node("Identity", ["h_out"], ["y_t"])],
        "body",
        [helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["B", hidden]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, ["B", inputs])],
        [helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["B", hidden]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, ["B", hidden])])
    scan = helper.make_node("Scan", ["h0", "X"], ["h_last", "Y"], name="rnn_scan", body=body, num_scan_inputs=1,
                            scan_input_directions=[int(reverse)])
    t = steps if steps is not None else "T"
    graph = helper.make_graph([scan], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [t, "B", inputs]),
                                            helper.make_tensor_value_info("h0", TensorProto.FLOAT, ["B", hidden])],
                              [helper.make_tensor_value_info("h_last", TensorProto.FLOAT, ["B", hidden]),
                               helper.make_tensor_value_info("Y", TensorProto.FLOAT, [t, "B", hidden])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reversed-input"])
def test_scan_with_a_primitive_rnn_cell_is_unrolled_and_matched(reverse):
    model = _scan_rnn_cell_model(6, reverse=reverse)
    feeds = {"X": RNG.standard_normal((6, 2, 5)).astype("float32"), "h0": RNG.standard_normal((2, 8)).astype("float32")}
    compiled = _check(model, feeds)
    assert [r.cell for r in compiled.report()] == ["rnn"]
    built = persist_rnn.compile(model, CUDA, measure=False)
    assert [r.lowering for r in built.report()] == ["persistent"]


def test_scan_with_a_run_time_length_and_a_primitive_cell_is_refused():
    with pytest.raises(PersistRNNError, match=r"node 'rnn_scan' \(Scan\).*pin the sequence length"):
        persist_rnn.compile(_scan_rnn_cell_model(None), "llvm")
    model = _scan_rnn_cell_model(None)
    feeds = {"X": RNG.standard_normal((4, 2, 5)).astype("float32"), "h0": RNG.standard_normal((2, 8)).astype("float32")}
    _check(model, feeds, shapes={"X": (4, 2, 5)})


def _loop_model(steps_value, cond_body="true"):
    """Loop with a trip count and a running decayed sum (not a cell): acc = 0.5 * acc + x[t], the
    acc of every step as a scan output. cond_body "data" makes the body's condition depend on acc."""
    body_nodes = [helper.make_node("Gather", ["x", "t"], ["x_t"], axis=0),
                  _const("half", np.array(0.5, "float32")),
                  helper.make_node("Mul", ["acc_in", "half"], ["decayed"]),
                  helper.make_node("Add", ["decayed", "x_t"], ["acc_out"]),
                  helper.make_node("Identity", ["acc_out"], ["acc_t"])]
    if cond_body == "data":
        body_nodes += [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
                       _const("limit", np.array(100.0, "float32")),
                       helper.make_node("Less", ["total", "limit"], ["cond_out"])]
    else:
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("t", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("acc_t", TensorProto.FLOAT, [3])])
    nodes = [_const("M", np.array(steps_value, "int64")), _const("go", np.array(True)),
             _const("acc0", np.zeros(3, "float32")),
             helper.make_node("Loop", ["M", "go", "acc0"], ["acc_last", "accs"], name="sum_loop", body=body)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 3])],
                              [helper.make_tensor_value_info("acc_last", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("accs", TensorProto.FLOAT, [steps_value, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_loop_that_is_not_a_cell_runs_unrolled():
    feeds = {"x": RNG.standard_normal((5, 3)).astype("float32")}
    compiled = _check(_loop_model(4), feeds)
    assert compiled.report() == [] and "unrolled, 4 steps" in compiled.notes[-1]


def test_a_loop_that_may_stop_early_is_refused():
    with pytest.raises(PersistRNNError, match=r"node 'sum_loop' \(Loop\).*condition output.*stop early"):
        prepare(_loop_model(4, cond_body="data"))


def test_a_loop_in_a_model_without_loops_changes_nothing():
    model = onnx.load("tests/fixtures/torch_lstmcell_loop.onnx")
    work, notes = prepare(model, simplify=False)
    assert not any("Loop" in n for n in notes) and len(work.graph.node) == len(model.graph.node)


def _gpu_cases():
    lstmcell, lstm_feeds, lstm_want = _fixture("torch_scripted_lstmcell")
    hand, hand_feeds, hand_want = _fixture("torch_scripted_hand_lstm")
    scan_feeds = {"X": RNG.standard_normal((7, 3, 5)).astype("float32"),
                  "h0": RNG.standard_normal((3, 8)).astype("float32")}
    rnn_feeds = {"X": RNG.standard_normal((6, 2, 5)).astype("float32"),
                 "h0": RNG.standard_normal((2, 8)).astype("float32")}
    return {
        "scripted-lstmcell": (lstmcell, lstm_feeds, lstm_want, {}),
        "scripted-hand-lstm": (hand, hand_feeds, hand_want, {"shapes": {"x": (6, 3, 10)}}),
        "scan-gru": (_scan_gru_model(), scan_feeds, None, {}),
        "scan-rnn-cell": (_scan_rnn_cell_model(6, reverse=True), rnn_feeds, None, {}),
    }


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["scripted-lstmcell", "scripted-hand-lstm", "scan-gru", "scan-rnn-cell"])
def test_loops_are_persistent_and_match_on_gpu(case):
    model, feeds, want, pins = _gpu_cases()[case]
    compiled = persist_rnn.compile(model, "cuda", **pins)
    assert [r.lowering for r in compiled.report()] == ["persistent"]
    got = compiled.run(feeds)
    assert max_rel_error(got, ort_run(model, feeds)) <= 1e-4
    if want is not None:
        assert max_rel_error(got, want) <= 1e-4


def test_a_branch_reading_an_outer_value_keeps_it_after_a_loop_is_rewritten():
    """Rewriting a Loop prunes dead nodes; a value that only an If's branch reads is not dead."""
    model = _loop_model(4)
    graph = model.graph
    graph.node.append(helper.make_node("Mul", ["x", "x"], ["x_sq"]))
    graph.input.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    then = helper.make_graph([helper.make_node("Identity", ["x_sq"], ["a"])], "then", [],
                             [helper.make_tensor_value_info("a", TensorProto.FLOAT, [5, 3])])
    other = helper.make_graph([helper.make_node("Neg", ["x_sq"], ["b"])], "else", [],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [5, 3])])
    graph.node.append(helper.make_node("If", ["c"], ["branch"], then_branch=then, else_branch=other))
    graph.output.append(helper.make_tensor_value_info("branch", TensorProto.FLOAT, [5, 3]))
    for cond in (True, False):
        feeds = {"x": RNG.standard_normal((5, 3)).astype("float32"), "c": np.array(cond)}
        _check(model, feeds)
