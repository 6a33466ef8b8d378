"""The pipeline shared by `persist_rnn.compile` and the CLI: import, PersistentRNN, build."""
from __future__ import annotations

import json

import tvm

from .errors import PersistRNNError
from .frontend import from_onnx, load_model
from .report import layer_report
from .runtime import CompiledModel, graph_inputs, lengths_checks
from .transform import PersistentRNN


def as_target(target) -> tvm.target.Target:
    """A Target from a name ("llvm", "cuda" = sm_90), a JSON dict or string, or a Target."""
    if isinstance(target, tvm.target.Target):
        return target
    try:
        if isinstance(target, dict):
            return tvm.target.Target(target)
        if isinstance(target, str):
            if target.strip().startswith("{"):
                return tvm.target.Target(json.loads(target))
            if target == "cuda":
                return tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
            return tvm.target.Target({"kind": target})
    except (ValueError, json.JSONDecodeError) as err:
        raise PersistRNNError(f"target {target!r}: {str(err).splitlines()[0]}; expected \"llvm\", \"cuda\" or a "
                              'JSON target such as {"kind": "cuda", "arch": "sm_80"}') from None
    raise PersistRNNError(f"target must be a name, a JSON dict or a tvm.target.Target, not {type(target).__name__}")


def compile(model_or_path, target="llvm", *, tuning_log=None, shape_dict=None, unroll=False, config=None,
            top_k=5, measure=None, persistent=True, unverified=False) -> CompiledModel:
    """Compile an ONNX model. For CUDA targets each recurrent layer becomes a persistent kernel
    (unless `persistent=False`, or it cannot, in which case report() says why). `unverified`
    also allows kernel variants not yet run on a GPU (see tir_templates.persistent)."""
    target = as_target(target)
    model = load_model(model_or_path)
    mod = from_onnx(model, shape_dict, unroll=unroll, target_kind=target.kind.name)
    if persistent:
        mod = PersistentRNN(target, tuning_log=tuning_log, config=config, top_k=top_k, measure=measure,
                            unverified=unverified)(mod)
    order = [n.name for n in model.graph.node]
    report = sorted(layer_report(mod), key=lambda r: order.index(r.node) if r.node in order else len(order))
    with tvm.transform.PassContext(opt_level=3):
        ex = tvm.compile(mod, target=target)
    outputs = [o.name for o in model.graph.output]
    return CompiledModel(ex, target, report, graph_inputs(model), outputs, lengths_checks(model))
