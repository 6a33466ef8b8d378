"""`persist-rnn bench --parts stacks`: stacked layers, the layer wavefront against the same stack
built one kernel a layer and against torch's multi-layer nn.LSTM / nn.GRU (cuDNN, strict fp32, in
a CUDA graph), all three timed in turn in the same run (gpu_timing.interleaved_ms); beside them
what the default (`wavefront="auto"`) chose, and, with a tuning log, the measured choice recorded
in it (`schedule/stack_log.py`)."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tir_templates.spec import CellSpec

from ..compile import compile_onnx as compile_model
from ..schedule import stack_log
from ..schedule.planner import target_arch
from ..targets import as_target
from .gpu_timing import graph_replay, interleaved_ms, vm_call
from .layer_models import torch_to_onnx_weights

#: (cell, hidden, layers, batch) measured by the `stacks` part: issue 21's floors and the shipped
#: examples' stacks
STACKS = (("LSTM", 256, 3, 1), ("LSTM", 256, 3, 10), ("LSTM", 128, 3, 1), ("GRU", 256, 2, 1),
          ("GRU", 256, 2, 8), ("LSTM", 256, 2, 1))


def onnx_stack_from_torch(op: str, module, seq_len: int, batch: int):
    """torch's multi-layer module as ONNX: one node a layer, layer l's Y squeezed into layer l+1."""
    H, nodes, inits, x = module.hidden_size, [], [], "X"
    for layer in range(module.num_layers):
        w, r, b = torch_to_onnx_weights(op, *(getattr(module, f"{name}_l{layer}").detach().cpu().numpy()
                                              for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")))
        inits += [numpy_helper.from_array(w[None], f"W{layer}"), numpy_helper.from_array(r[None], f"R{layer}"),
                  numpy_helper.from_array(b[None], f"B{layer}")]
        extra = {"linear_before_reset": 1} if op == "GRU" else {}
        nodes.append(helper.make_node(op, [x, f"W{layer}", f"R{layer}", f"B{layer}"], [f"Y{layer}"], name=f"layer{layer}",
                                      hidden_size=H, **extra))
        nodes.append(helper.make_node("Squeeze", [f"Y{layer}", "one"], [f"X{layer + 1}"]))
        x = f"X{layer + 1}"
    inits.append(numpy_helper.from_array(np.array([1], "int64"), "one"))
    graph = helper.make_graph(nodes, "stack", [helper.make_tensor_value_info("X", 1, [seq_len, batch, H])],
                              [helper.make_tensor_value_info(x, 1, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def stack_row(op: str, hidden: int, layers: int, batch: int, seq_len: int, options: dict) -> dict:
    """One stack: the wavefront build (`ours_ms`), the per-layer build (the default) and torch's module."""
    import torch

    torch.manual_seed(hidden + layers + batch)
    module = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU}[op](hidden, hidden, num_layers=layers).cuda().eval()
    x = torch.randn(seq_len, batch, hidden, device="cuda")
    model = onnx_stack_from_torch(op, module, seq_len, batch)
    feeds = {"X": x.cpu().numpy()}
    fused = compile_model(model, "cuda", wavefront=True, **options)
    per_layer = compile_model(model, "cuda", wavefront=False, **options)
    auto = compile_model(model, "cuda", **options)  # the default's choice (not timed: it is one of the two)
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        want = module(x)[0].cpu().numpy()
        torch_graph = graph_replay(lambda: module(x))
        ms = interleaved_ms({"ours_ms": vm_call(fused, feeds), "per_layer_ms": vm_call(per_layer, feeds),
                             "torch_graph_ms": torch_graph})
    torch.backends.cudnn.allow_tf32 = True
    scale = max(1.0, float(np.abs(want).max()))
    errors = {name: float(np.abs(c.run(feeds)[0] - want).max() / scale) for name, c in (("ours", fused), ("per_layer", per_layer))}
    row = {"part": "stack", "cell": op, "hidden": hidden, "layers": layers, "batch": batch, "seq_len": seq_len, **ms,
           "ours_err": errors["ours"], "per_layer_err": errors["per_layer"],
           "lowerings": [r.lowering for r in fused.report()], "config": fused.report()[0].config,
           "auto": {"lowering": auto.report()[0].lowering, "why": auto.report()[0].stack_reason}}
    row["per_layer_over_ours"] = row["per_layer_ms"] / row["ours_ms"]
    row["torch_graph_over_ours"] = row["torch_graph_ms"] / row["ours_ms"]
    if options.get("tuning_log"):  # later compiles of this stack take the faster lowering as measured
        spec = CellSpec(op.lower(), hidden, hidden, linear_before_reset=op == "GRU")
        stack_log.append(options["tuning_log"], stack_log.StackRecord(
            stack_log.stack_workload([spec] * layers, batch, target_arch(as_target("cuda")), options.get("precision", "fp32")),
            "wavefront" if row["ours_ms"] < row["per_layer_ms"] else "per_layer", 1e3 * row["ours_ms"],
            1e3 * row["per_layer_ms"], "measured", config=row["config"]))
    return row
