"""`torch.compile(model, backend="persist_rnn")`: the graph's recurrent ops on persistent kernels,
everything else as torch runs it.

dynamo does not trace nn.LSTM / nn.GRU / nn.RNN unless `torch._dynamo.config.allow_rnn` is set
(otherwise the call is a graph break and runs eagerly), so looking this backend up sets it, for
the process: torch.compile hands a backend nothing that runs before dynamo traces, so it cannot
be set for this backend's traces alone. Set it back (`torch._dynamo.config.allow_rnn = False`)
before compiling other models with inductor in the same process: inductor, traced into an LSTM,
unrolls it into kernels a step (14 ms a call for the char-RNN on the H100, where cuDNN takes 0.6).

In each FX graph dynamo hands over, every recurrent op that persist_rnn takes is replaced by a
`RecurrentLayer` (recurrent_layer.py); the graph then runs through inductor (`options`'s "rest":
"inductor", each layer an opaque custom op for it) or as torch's eager code ("eager"). The default,
"auto", is inductor for a graph on the GPU, where it fuses the ops around the layers into fewer
kernels (an STFT front end's seven elementwise kernels: the backend went from 0.92x to 0.98-1.00x
of `persist_rnn.compile(module)` on the H200, `docs/data/torch-models-h200.jsonl` run I), unless a
matrix product is left in the graph after the layers took their heads: inductor's GEMM over a
dynamic batch ran a 50 us cuBLAS kernel for a seq2seq encoder's 16 x 256 x 128 bridge Linear (run
L's trace), the whole call with eager taking 50 us (the backend at 0.56x of compile(module)
through inductor, run J; 1.1x eager, run K). On
the CPU it is eager, where inductor's C++ build costs seconds a graph and the layers are most of
the time. Where inductor raises, the graph runs eagerly instead (a warning says so).

What the backend does not take (packed sequences: a graph break in dynamo; LSTM projections) runs
as torch's own op, so every model torch runs, runs. `reports()` lists each layer's outcome.

    torch.compile(model, backend="persist_rnn", options={"target": "cuda", "precision": "fp32"})
"""
from __future__ import annotations

import operator
import re
import warnings

import torch

from ..errors import PersistRNNError
from .recurrent_layer import RECURRENT_OPS, LayerOutcome, RecurrentLayer, refusal

#: every layer the backend has met, in the order met
_OUTCOMES: list[LayerOutcome] = []


def reports() -> list[LayerOutcome]:
    """What became of each recurrent op of the graphs the backend compiled (latest last)."""
    return list(_OUTCOMES)


def _module_path(node) -> str:
    """The op's module ("encoder.lstm") from dynamo's nn_module_stack ("L['self'].encoder.lstm")."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return node.name
    path = list(stack.values())[-1][0]
    return re.sub(r"^L\['[^']*'\]\.?", "", path) or node.name


def persist_rnn_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None):
    """The backend: `options` are persist_rnn.compile's (target, precision, tuning_log, wavefront,
    ...) plus "rest" for the graph's other ops: "auto" (default: inductor on the GPU unless a
    matrix product is among them, else eager; module doc), "inductor" or "eager"."""
    options = dict(options or {})
    rest = options.pop("rest", "auto")
    if rest not in ("auto", "eager", "inductor"):
        raise PersistRNNError(f"options['rest'] = {rest!r}: expected 'auto', 'eager' or 'inductor'")
    placeholders = dict(zip([n for n in gm.graph.nodes if n.op == "placeholder"], example_inputs))
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in RECURRENT_OPS:
            continue
        outcome = LayerOutcome(_module_path(node), RECURRENT_OPS[node.target][0])
        _OUTCOMES.append(outcome)
        why = refusal(node.args)
        if why:
            outcome.runs_in, outcome.why = "torch", why
            continue
        reads_states = _reads_final_states(node)
        hidden_index = _take_one_hidden_state(node) if reads_states else None
        layer = RecurrentLayer(node.target, outcome.module, options, outcome,
                               final_states=reads_states and hidden_index is None, hidden_index=hidden_index)
        _take_zero_states(node)
        _take_embedding(node, gm)
        if not layer.final_states:
            _take_head(node, gm)
        _build_now(layer, node, gm, placeholders)
        node.target = layer
    gm.graph.eliminate_dead_code()  # the zero states and lookups the layers took
    if rest == "auto":
        on_gpu = _on_gpu(options.get("target", "auto"), example_inputs)
        rest = "inductor" if on_gpu and not _matrix_products(gm) else "eager"
    if rest == "inductor":
        for node in gm.graph.nodes:
            if isinstance(node.target, RecurrentLayer):
                node.target = _as_custom_op(node.target)
    gm.graph.lint()
    gm.recompile()
    if rest == "inductor":
        from torch._inductor.compile_fx import compile_fx

        try:
            return compile_fx(gm, example_inputs)
        except Exception as err:  # inductor's own failure: the graph still runs, its layers persist_rnn's
            warnings.warn(f"persist_rnn: inductor could not compile the graph's other ops ({type(err).__name__}: "
                          f"{str(err).splitlines()[0] if str(err) else ''}); they run eagerly", stacklevel=2)
    return gm.forward


#: the FX targets of a matrix product (what `rest` "auto" leaves to eager torch; module doc)
_MATRIX_PRODUCTS = (torch._C._nn.linear, torch.nn.functional.linear, torch.matmul, torch.mm, torch.bmm, torch.addmm,
                    torch.Tensor.matmul, operator.matmul)


def _matrix_products(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph computes a matrix product outside its recurrent layers."""
    return any(n.op in ("call_function", "call_method") and (n.target in _MATRIX_PRODUCTS or n.target == "matmul")
               for n in gm.graph.nodes)


def _on_gpu(target, example_inputs) -> bool:
    """Whether the layers build for CUDA: `target` says so, or ("auto") an example input is on a GPU."""
    if target == "auto":
        return any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs)
    from ..targets import as_target

    return as_target(target).kind.name == "cuda"


def _only_for(value, node) -> bool:
    """Whether the graph value `value` is read by `node` alone."""
    return isinstance(value, torch.fx.Node) and list(value.users) == [node]


def _reads_final_states(node) -> bool:
    """Whether the graph reads more of the op's result than its output sequence (item 0)."""
    return any(user.op != "call_function" or user.target is not operator.getitem or user.args[1] != 0
               for user in node.users)


def _take_one_hidden_state(node) -> int | None:
    """Where the graph reads one final hidden state of the op alone (`h_n[-1]`, what a classifier
    reads) and nothing else of its result: the index of that state, its readers made to read the
    op's item 0, as they will find it there (RecurrentLayer's `hidden_index`); else None."""
    def getitem_of(value, user) -> bool:
        return user.op == "call_function" and user.target is operator.getitem and user.args[0] is value

    items = [u for u in node.users if u.users or not getitem_of(node, u)]  # dead getitems read nothing
    if len(items) != 1 or not getitem_of(node, items[0]) or items[0].args[1] != 1:
        return None
    hidden = items[0]
    readers = list(hidden.users)
    if not readers or not all(getitem_of(hidden, r) and isinstance(r.args[1], int) for r in readers):
        return None  # (a slice h_n[1:] reads more than one state)
    indices = {r.args[1] for r in readers}
    count = node.args[4] * (2 if node.args[7] else 1)  # num_layers x directions states
    if len(indices) != 1:
        return None
    index = indices.pop()
    if not -count <= index < count:
        return None
    graph = node.graph
    with graph.inserting_after(node):
        item = graph.call_function(operator.getitem, (node, 0))
    for reader in readers:
        reader.replace_all_uses_with(item)
        graph.erase_node(reader)
    for user in list(node.users):
        if user is not item:
            graph.erase_node(user)
    return index % count


def _take_zero_states(node) -> None:
    """Initial states that the graph makes as zeros for this op alone (what nn.LSTM does when
    called without them) become None: the build starts from zero without them."""
    hx = node.args[1]
    states = list(hx) if isinstance(hx, (tuple, list)) else [hx]
    if all(_only_for(h, node) and h.op == "call_function" and h.target is torch.zeros for h in states):
        node.args = (node.args[0], None, *node.args[2:])


def _take_embedding(node, gm) -> None:
    """An embedding lookup (nn.Embedding's `F.embedding`, no max_norm) that feeds this op alone:
    the op takes the token ids and the table (kwarg `table`), so that its build folds the input
    projection into the table."""
    x = node.args[0]
    if not (_only_for(x, node) and x.op == "call_function" and x.target is torch.nn.functional.embedding):
        return
    ids, table = x.args[0], x.kwargs.get("weight", x.args[1] if len(x.args) > 1 else None)
    max_norm = x.kwargs.get("max_norm", x.args[3] if len(x.args) > 3 else None)
    if max_norm is not None or not isinstance(table, torch.fx.Node) or table.op not in ("placeholder", "get_attr"):
        return
    node.args = (ids, *node.args[1:])
    node.kwargs = {**node.kwargs, "table": table}


#: the FX targets of a Linear (nn.Linear's call, F.linear)
_LINEAR = (torch._C._nn.linear, torch.nn.functional.linear)


def _is_weight(value) -> bool:
    """Whether a graph value is a parameter (a placeholder dynamo made for it, or an attribute)."""
    return isinstance(value, torch.fx.Node) and value.op in ("placeholder", "get_attr")


def _take_head(node, gm) -> None:
    """A Linear that alone reads the op's output sequence, or its one final hidden state read
    (item 0, the only item read): the op takes its weight and bias (kwarg `head`) and its readers
    read the op's item 0, so that the layer's build runs it with its own dense kernel, as an ONNX
    build of the model does, where torch would run a GEMM of its own after the layer."""
    items = list(node.users)  # getitem(op, 0) each (`_reads_final_states`)
    if len(items) != 1:
        return
    readers = list(items[0].users)
    if len(readers) != 1 or readers[0].op != "call_function" or readers[0].target not in _LINEAR:
        return
    item = items[0]
    linear = readers[0]
    args = dict(zip(("input", "weight", "bias"), linear.args), **linear.kwargs)
    weight, bias = args.get("weight"), args.get("bias")
    if args.get("input") is not item or not _is_weight(weight) or not (bias is None or _is_weight(bias)):
        return
    node.kwargs = {**node.kwargs, "head": (weight, bias)}
    linear.replace_all_uses_with(item)
    gm.graph.erase_node(linear)


def _example_value(arg, gm, placeholders: dict):
    """A graph value's example: its example input (a parameter's real tensor), else what dynamo
    recorded (a fake tensor)."""
    if arg in placeholders:
        return placeholders[arg]
    if arg.op == "get_attr":
        return getattr(gm, arg.target)
    return arg.meta.get("example_value")


def _build_now(layer: RecurrentLayer, node, gm, placeholders: dict) -> None:
    """Build the layer while the backend runs, from the example inputs (`placeholders`: each
    placeholder's; its weights are among them): not inside the graph's first run, where
    inductor's runtime allows no tracing."""
    x, hx, params, has_biases, num_layers, _, _, bidirectional, batch_first = node.args
    x = _example_value(x, gm, placeholders)
    weights = [_example_value(p, gm, placeholders) for p in params]
    table = node.kwargs.get("table")
    table = None if table is None else _example_value(table, gm, placeholders)
    head = node.kwargs.get("head")
    head = None if head is None else tuple(None if t is None else _example_value(t, gm, placeholders) for t in head)
    taken = ([table] if "table" in node.kwargs else []) + [t for t in head or () if t is not None]
    if isinstance(x, torch.Tensor) and all(isinstance(w, torch.Tensor) and not _is_fake(w) for w in weights + taken):
        layer.ready(x, weights, has_biases, num_layers, bidirectional, batch_first, table, states=hx is not None,
                    head=head)


def _is_fake(tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor)


torch._dynamo.config.allow_rnn = True  # nn.LSTM / GRU / RNN traced into dynamo's graph, not a graph break


def _register_where_not_installed() -> None:
    """An installed persist_rnn names the backend through its `torch_dynamo_backends` entry point
    (pyproject.toml); from a source tree on PYTHONPATH, importing this module names it."""
    if "persist_rnn" not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(persist_rnn_backend, name="persist_rnn")


def _as_custom_op(layer: RecurrentLayer):
    """`layer` behind torch.ops.persist_rnn.recurrent, which inductor leaves opaque (custom_op.py)."""
    from .custom_op import as_custom_op

    return as_custom_op(layer)


_register_where_not_installed()
