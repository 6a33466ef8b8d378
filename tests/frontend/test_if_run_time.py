"""`If` with a condition known only at run time (TVM's importer makes it a Relax `If`), with a
recurrent layer inside one branch: both branches match ONNX Runtime on llvm, and for CUDA the
layer inside the branch is still a persistent kernel (run on the GPU box: the gpu test)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, make_model, max_rel_error, ort_run

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def _branching_model():
    """y = LSTM(x)'s Y_h if c else -x[-1]: the layer lives in the then-branch."""
    layer, _ = make_model(LayerCase(op="LSTM", hidden_size=8, input_size=8, batch=2, seq_len=5, outputs=("Y_h",)))
    node = layer.graph.node[0]
    then = helper.make_graph([node], "then", [], [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, 2, 8])])
    last = [helper.make_node("Constant", [], ["last"], value=helper.make_tensor("last", TensorProto.INT64, [1], [4])),
            helper.make_node("Gather", ["X", "last"], ["x_last"], axis=0),
            helper.make_node("Neg", ["x_last"], ["neg"])]
    other = helper.make_graph(last, "else", [], [helper.make_tensor_value_info("neg", TensorProto.FLOAT, [1, 2, 8])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch")],
                              "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, 2, 8]),
                                    helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8])],
                              initializer=list(layer.graph.initializer))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _check(target):
    model = _branching_model()
    compiled = persist_rnn.compile(model, target, measure=False)
    x = np.random.default_rng(0).standard_normal((5, 2, 8)).astype("float32")
    for cond in (True, False):
        feeds = {"X": x, "c": np.array(cond)}
        assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4, cond
    return compiled


def test_if_on_a_run_time_condition_runs_either_branch():
    _check("llvm")
    built = persist_rnn.compile(_branching_model(), CUDA, measure=False)
    assert [r.lowering for r in built.report()] == ["persistent"]


@pytest.mark.gpu
def test_if_on_a_run_time_condition_on_gpu():
    assert [r.lowering for r in _check("cuda").report()] == ["persistent"]
