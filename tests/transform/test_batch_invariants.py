"""BroadcastBatchInvariants (inside PersistentRNN): a symbolic batch's default lengths and constant
initial states reach the recurrence once, as constants of batch extent 1, so that no kernel
fills them on every call; what the graph gives per batch row stays per row."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import persist_rnn
from persist_rnn.frontend import from_onnx, load_model
from persist_rnn.bench.layer_models import LayerCase, make_model, max_rel_error, ort_run
from persist_rnn.transform import PersistentRNN
from persist_rnn.transform.batch_invariants import invariant_value
from persist_rnn.transform.call_sites import call_args, call_tir_sites
from tir_templates.spec import ATTR_KEY, CellSpec

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
FILLS = ("relax.full", "relax.zeros", "relax.broadcast_to", "relax.strided_slice")


def _layers(mod):
    """(spec, call_tir arguments) of each recurrence's call site."""
    specs = {gv.name_hint: CellSpec.from_json(str(f.attrs[ATTR_KEY])) for gv, f in mod.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and ATTR_KEY in f.attrs}
    return [(specs[call.args[0].name_hint], call_args(call)) for _, call in call_tir_sites(mod, set(specs))]


def _ops(mod) -> set:
    names = set()
    relax.analysis.post_order_visit(mod["main"], lambda e: names.add(e.op.name) if isinstance(e, relax.Call)
                                    and isinstance(e.op, tvm.ir.Op) else None)
    return names


def test_torch_exported_states_and_lengths_become_constants():
    """The text classifier as exported: torch's Expand(zeros) + Slice per layer for h0 and c0, and
    no sequence_lens. Every layer gets all three once, and the fill kernels are gone."""
    mod = PersistentRNN(CUDA, measure=False)(from_onnx(load_model("examples/text_classifier.onnx")))
    layers = _layers(mod)
    assert len(layers) == 2
    for spec, args in layers:
        assert spec.batch_broadcast == ("lens", "h0", "c0")
        assert all(isinstance(a, tvm.ir.expr.Constant) for a in args[3:6])
        assert [tuple(a.value.shape) for a in args[3:6]] == [(1,), (1, 1, 256), (1, 1, 256)]
        assert not args[4].value.numpy().any()
    assert not _ops(mod) & set(FILLS), _ops(mod) & set(FILLS)


@pytest.mark.parametrize("example,key,batches", [("speech_gru", "frames", (1, 3)), ("text_classifier", "tokens", (2,))])
def test_examples_with_operands_given_once_match_onnxruntime(example, key, batches):
    path = f"examples/{example}.onnx"
    compiled = persist_rnn.compile(path, "llvm")
    assert all(r.lowering == "reference" for r in compiled.report())
    x = np.load(f"examples/{example}_inputs.npz")[key]
    axis = 0 if example == "speech_gru" else 1
    model = load_model(path)
    for b in batches:
        feed = {key: np.ascontiguousarray(np.take(x, np.arange(b) % x.shape[axis], axis=axis))}
        assert max_rel_error(compiled.run(feed), ort_run(model, feed)) < 1e-4


def test_operands_the_graph_gives_per_row_stay_per_row():
    """initial_h and sequence_lens as graph inputs are per batch row: only the absent c0 is given once."""
    case = LayerCase(op="LSTM", dynamic=True, initial_h=True, seq_lens=[3, 1, 2])
    model, feeds = make_model(case)
    mod = PersistentRNN(CUDA, measure=False)(from_onnx(model))
    [(spec, args)] = _layers(mod)
    assert spec.batch_broadcast == ("c0",)
    assert not isinstance(args[3], tvm.ir.expr.Constant) and not isinstance(args[4], tvm.ir.expr.Constant)
    compiled = persist_rnn.compile(model, "llvm")
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) < 1e-4


def test_a_static_batch_keeps_full_operands():
    """With a static batch FoldConstant has made them constants already; the signature is unchanged."""
    model, _ = make_model(LayerCase(op="GRU", batch=3))
    [(spec, args)] = _layers(PersistentRNN(CUDA, measure=False)(from_onnx(model)))
    assert spec.batch_broadcast == ()
    assert tuple(args[4].value.shape) == (1, 3, 6)


def test_invariant_value_reads_through_fills_and_static_slices():
    b = tvm.tirx.Var("b", "int64")
    per_row = relax.Var("per_row", relax.TensorType((2, b, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("f", [per_row]):
        with bb.dataflow():
            wide = bb.emit(relax.op.broadcast_to(relax.const(np.arange(6, dtype="float32").reshape(2, 1, 3)),
                                                 relax.ShapeExpr([2, b, 3])))
            sliced = bb.emit(relax.op.strided_slice(wide, [0], [1], [2]))
            by_rows = bb.emit(relax.op.strided_slice(per_row, [1], [0], [1]))  # the batch axis: not invariant
            filled = bb.emit(relax.op.full(relax.ShapeExpr([b]), relax.const(7, "int32"), "int32"))
            out = bb.emit_output(relax.Tuple([sliced, by_rows, filled]))
        bb.emit_func_output(out)
    var2val = relax.analysis.get_var2val(bb.get()["f"])
    np.testing.assert_array_equal(invariant_value(sliced, var2val), [[[3, 4, 5]]])
    np.testing.assert_array_equal(invariant_value(filled, var2val), [7])
    assert invariant_value(per_row, var2val) is None
    assert invariant_value(by_rows, var2val) is None
