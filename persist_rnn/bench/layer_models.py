"""Builders of small ONNX recurrent models and their ONNX Runtime references (tests, benchmarks)."""
from __future__ import annotations

import dataclasses
import json

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
NP_TO_ONNX = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
              "int32": TensorProto.INT32}
assert ml_dtypes.bfloat16 == np.dtype("bfloat16")  # the name numpy knows once ml_dtypes is imported


@dataclasses.dataclass
class LayerCase:
    """One ONNX recurrent node and the inputs it is fed; every ONNX option is a field."""

    op: str = "LSTM"
    seq_len: int = 5
    batch: int = 3
    input_size: int = 4
    hidden_size: int = 6
    direction: str = "forward"
    layout: int = 0
    with_bias: bool = True
    seq_lens: list | None = None  # per-batch lengths, fed as a graph input
    initial_h: bool = False
    initial_c: bool = False
    peepholes: bool = False
    clip: float | None = None
    input_forget: int | None = None
    linear_before_reset: int | None = None
    activations: list | None = None
    activation_alpha: list | None = None
    activation_beta: list | None = None
    dynamic: bool = False  # symbolic T and B in the graph input
    dtype: str = "float32"
    opset: int = 14
    outputs: tuple = ("Y", "Y_h", "Y_c")
    weight_scale: float = 0.4

    @property
    def num_directions(self):
        return 2 if self.direction == "bidirectional" else 1


def _tensor(name, dtype, shape):
    return helper.make_tensor_value_info(name, NP_TO_ONNX[dtype], shape)


def make_model(case: LayerCase, seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """(model, inputs): weights as initializers; X, sequence_lens and initial states as inputs."""
    rng = np.random.default_rng(seed)
    D, G, H, I = case.num_directions, GATES[case.op], case.hidden_size, case.input_size
    T_, B = case.seq_len, case.batch
    dt = case.dtype
    rnd = lambda *s: (rng.standard_normal(s) * case.weight_scale).astype(dt)
    inits = [numpy_helper.from_array(rnd(D, G * H, I), "W"), numpy_helper.from_array(rnd(D, G * H, H), "R")]
    names = ["X", "W", "R"]
    if case.with_bias:
        inits.append(numpy_helper.from_array(rnd(D, 2 * G * H), "B"))
    names.append("B" if case.with_bias else "")
    peep = rnd(D, 3 * H)  # drawn with the weights, so every (T, B) of a case shares them
    x_shape = [T_, B, I] if case.layout == 0 else [B, T_, I]
    feeds = {"X": rng.standard_normal(x_shape).astype(dt)}
    if case.dynamic:
        x_decl = ["T", "N", I] if case.layout == 0 else ["N", "T", I]
    else:
        x_decl = x_shape
    graph_inputs = [_tensor("X", dt, x_decl)]
    if case.seq_lens is not None:
        names.append("sequence_lens")
        feeds["sequence_lens"] = np.array(case.seq_lens, "int32")
        graph_inputs.append(_tensor("sequence_lens", "int32", ["N"] if case.dynamic else [B]))
    else:
        names.append("")
    state = [D, B, H] if case.layout == 0 else [B, D, H]
    state_decl = [D, "N", H] if case.layout == 0 else ["N", D, H]
    for flag, name in ((case.initial_h, "initial_h"), (case.initial_c, "initial_c")):
        if name == "initial_c" and case.op != "LSTM":
            continue
        if flag:
            names.append(name)
            feeds[name] = rng.standard_normal(state).astype(dt)
            graph_inputs.append(_tensor(name, dt, state_decl if case.dynamic else state))
        else:
            names.append("")
    if case.op == "LSTM" and case.peepholes:
        inits.append(numpy_helper.from_array(peep, "P"))
        names.append("P")
    while names and names[-1] == "":
        names.pop()
    attrs = {"hidden_size": H, "direction": case.direction}
    if case.opset >= 14:
        attrs["layout"] = case.layout
    for key in ("clip", "input_forget", "linear_before_reset", "activations", "activation_alpha", "activation_beta"):
        if getattr(case, key) is not None:
            attrs[key] = getattr(case, key)
    outs = [o for o in case.outputs if o != "Y_c" or case.op == "LSTM"]
    node_outs = [o if o in outs else "" for o in ("Y", "Y_h", "Y_c")[: 3 if case.op == "LSTM" else 2]]
    while node_outs and node_outs[-1] == "":
        node_outs.pop()
    node = helper.make_node(case.op, names, node_outs, name="rnn", **attrs)
    y_shape = [T_, D, B, H] if case.layout == 0 else [B, T_, D, H]
    if case.dynamic:
        y_shape = ["T", D, "N", H] if case.layout == 0 else ["N", "T", D, H]
    shapes = {"Y": y_shape, "Y_h": state_decl if case.dynamic else state, "Y_c": state_decl if case.dynamic else state}
    graph = helper.make_graph([node], "layer", graph_inputs, [_tensor(o, dt, shapes[o]) for o in outs], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8
    return model, feeds


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def layout1_feeds_to_0(feeds: dict) -> dict:
    out = dict(feeds)
    out["X"] = np.ascontiguousarray(feeds["X"].transpose(1, 0, 2))
    for k in ("initial_h", "initial_c"):
        if k in feeds:
            out[k] = np.ascontiguousarray(feeds[k].transpose(1, 0, 2))
    return out


def layout0_outputs_to_1(outs: list, names: list) -> list:
    perm = {"Y": (2, 0, 1, 3), "Y_h": (1, 0, 2), "Y_c": (1, 0, 2)}
    return [np.ascontiguousarray(o.transpose(perm[n])) for o, n in zip(outs, names)]


def reference(case: LayerCase, seed: int = 0) -> tuple[onnx.ModelProto, dict, list[np.ndarray]]:
    """(model, feeds, ONNX Runtime outputs), going through the layout-0 twin for layout 1 and
    through the float32 twin for float16 and bfloat16 (ONNX Runtime's CPU kernels are float32 only)."""
    model, feeds = make_model(case, seed)
    ref_case = dataclasses.replace(case, layout=0, dtype="float32")
    ref_model, _ = make_model(ref_case, seed)
    if case.dtype != "float32":  # same values, widened
        for init, src in zip(ref_model.graph.initializer, model.graph.initializer):
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(src).astype("float32"), src.name))
    ref_feeds = {k: (v.astype("float32") if v.dtype in (np.dtype("float16"), np.dtype("bfloat16")) else v)
                 for k, v in feeds.items()}
    if case.layout == 1:
        ref_feeds = layout1_feeds_to_0(ref_feeds)
    outs = ort_run(ref_model, ref_feeds)
    names = [o.name for o in model.graph.output]
    if case.layout == 1:
        outs = layout0_outputs_to_1(outs, names)
    return model, feeds, outs


def max_rel_error(got: list, want: list) -> float:
    """max |got - want| / max(1, max |want|) over all outputs: error relative to output scale."""
    err = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g, "float64"), np.asarray(w, "float64")
        if g.shape != w.shape:
            raise AssertionError(f"shape {g.shape} != reference {w.shape}")
        err = max(err, float(np.abs(g - w).max(initial=0.0)) / max(1.0, float(np.abs(w).max(initial=0.0))))
    return err


def torch_to_onnx_weights(op: str, w_ih, w_hh, b_ih, b_hh):
    """torch nn.LSTM/nn.GRU weights of one direction -> ONNX W, R, B blocks (gate reorder)."""
    order = {"LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2], "RNN": [0]}[op]

    def reorder(a):
        return np.concatenate([np.split(a, len(order), axis=0)[k] for k in order], axis=0)

    return reorder(w_ih), reorder(w_hh), np.concatenate([reorder(b_ih), reorder(b_hh)])


def cell_loop_model(cell: str, steps: int = 4, batch: int = 2, input_size: int = 8, hidden: int = 8,
                    activation: str = "Tanh", seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """A recurrent cell stepped `steps` times in primitive ONNX ops, the way torch exports an
    nn.RNNCell / nn.LSTMCell in a Python loop: Gather x[t], Gemm(x, W_ih, b_ih) + Gemm(h, W_hh,
    b_hh), then the cell ("rnn" with `activation`, or "lstm" in torch's i, f, g, o order); or
    "gru0", a GRU with linear_before_reset=0 as Keras writes it (reset_after=False): a MatMul per
    gate and h(t) = z * h + (1 - z) * n. Inputs x (T, B, I), h0 (and c0); outputs the stacked
    h(t) and the last h."""
    rng = np.random.default_rng(seed)
    G = {"rnn": 1, "lstm": 4, "gru0": 3}[cell]
    rnd = lambda *s: (rng.standard_normal(s) * 0.4).astype("float32")
    w_ih, w_hh, b_ih, b_hh = rnd(G * hidden, input_size), rnd(G * hidden, hidden), rnd(G * hidden), rnd(G * hidden)
    if cell == "gru0":  # Keras: a kernel per gate (z, r, n), one bias, and a constant one
        weights = {"one": np.array(1.0, "float32")}
        for k, g in enumerate("zrn"):
            rows = slice(k * hidden, (k + 1) * hidden)
            weights |= {f"W{g}": w_ih[rows].T, f"U{g}": w_hh[rows].T, f"b{g}": b_ih[rows]}
    else:
        weights = {"w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih, "b_hh": b_hh}
    inits = [numpy_helper.from_array(np.ascontiguousarray(a), n) for n, a in weights.items()]
    nodes, h, c, ys = [], "h0", "c0", []

    def mk(op, ins, name, **kw):  # one node, its output named after it and the step
        nodes.append(helper.make_node(op, ins, [f"{name}_{t}"], **kw))
        return f"{name}_{t}"
    for t in range(steps):
        inits.append(numpy_helper.from_array(np.array(t, "int64"), f"t{t}"))
        x_t = mk("Gather", ["x", f"t{t}"], "x", axis=0)
        if cell == "gru0":
            h = _keras_gru_step(mk, x_t, h)
            ys.append(mk("Unsqueeze", [h, "axis0"], "y"))
            continue
        pre = mk("Add", [mk("Gemm", [x_t, "w_ih", "b_ih"], "gx", transB=1), mk("Gemm", [h, "w_hh", "b_hh"], "gh", transB=1)], "pre")
        if cell == "rnn":
            h = mk(activation, [pre], "h")
        else:
            nodes.append(helper.make_node("Split", [pre], [f"i_{t}", f"f_{t}", f"g_{t}", f"o_{t}"], axis=1, num_outputs=4))
            i, f, o = (mk("Sigmoid", [f"{k}_{t}"], "s" + k) for k in "ifo")
            c = mk("Add", [mk("Mul", [f, c], "fc"), mk("Mul", [i, mk("Tanh", [f"g_{t}"], "tg")], "ig")], "c")
            h = mk("Mul", [o, mk("Tanh", [c], "tc")], "h")
        ys.append(mk("Unsqueeze", [h, "axis0"], "y"))
    inits.append(numpy_helper.from_array(np.array([0], "int64"), "axis0"))
    nodes.append(helper.make_node("Concat", ys, ["ys"], axis=0))
    nodes.append(helper.make_node("Identity", [h], ["h_last"]))
    feeds = {"x": rng.standard_normal((steps, batch, input_size)).astype("float32"),
             "h0": rng.standard_normal((batch, hidden)).astype("float32")}
    inputs = [_tensor("x", "float32", [steps, batch, input_size]), _tensor("h0", "float32", [batch, hidden])]
    if cell == "lstm":
        feeds["c0"] = rng.standard_normal((batch, hidden)).astype("float32")
        inputs.append(_tensor("c0", "float32", [batch, hidden]))
    outputs = [_tensor("ys", "float32", [steps, batch, hidden]), _tensor("h_last", "float32", [batch, hidden])]
    graph = helper.make_graph(nodes, f"{cell}_cell_loop", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model, feeds


def _keras_gru_step(mk, x_t, h):
    """One GRU step with linear_before_reset=0 in Keras's form (see cell_loop_model)."""
    def gate(g, act, h_in):
        return mk(act, [mk("Add", [mk("Add", [mk("MatMul", [x_t, f"W{g}"], "xw" + g), mk("MatMul", [h_in, f"U{g}"], "hu" + g)],
                                         "s" + g), f"b{g}"], "p" + g)], "a" + g)
    z, r = gate("z", "Sigmoid", h), gate("r", "Sigmoid", h)
    n = gate("n", "Tanh", mk("Mul", [r, h], "rh"))
    return mk("Add", [mk("Mul", [z, h], "zh"), mk("Mul", [mk("Sub", ["one", z], "omz"), n], "zn")], "h")


def projection_module(func, M, K, N):
    """A Relax function calling `func` as the importer does: out = call_tir(func, [x, w_t, b]), x
    and w_t typed as `func` takes them (a 16-bit x; w_t packed as pairs, gemm_staging.pack_pairs or
    pack_pairs_nk)."""
    from tvm import relax  # here: the ONNX builders above need no TVM

    bb = relax.BlockBuilder()
    info = json.loads(str(func.attrs["persist_rnn.projection"]))
    x_dtype, (w_shape, w_dtype) = func.params[0].dtype, ((K, N), "float32")
    if info.get("w_pairs"):
        w_shape, w_dtype = ((N, K // 2) if info.get("w_nk") else (K // 2, N)), "uint32"
    x, w, b = (relax.Var(n, relax.TensorType(s, d)) for n, s, d in (("x", (M, K), str(x_dtype)), ("w", w_shape, w_dtype),
                                                                     ("b", (N,), "float32")))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            gv = bb.add_func(func, "projection")
            out = bb.emit_output(relax.call_tir(gv, [x, w, b], relax.TensorType((M, N), "float32")))
        bb.emit_func_output(out)
    return bb.get()


def cuda_source(built) -> str:
    """The CUDA source of a built module (an Executable, or a runtime Module whose imports hold it)."""
    stack = [getattr(built, "mod", built)]
    while stack:
        m = stack.pop()
        if m.kind == "cuda":
            return m.inspect_source()
        stack += list(m.imports)
    raise AssertionError("no CUDA module")


def stacked_layers_model(op: str, hidden: int, layers: int, steps: int, batch, *, direction="forward",
                         lengths=False, states=False, linear_before_reset=1, seed=0):
    """(ONNX model, feeds): `layers` ONNX `op` layers of one hidden size, layer l's Y squeezed
    into layer l+1's X (a stack, transform/layer_stacks.py), with biases; `batch` an int or a
    symbolic name; `lengths`: a sequence_lens input (every third row empty, the rest of varying
    length); `states`: initial states as inputs. Outputs: the top Y, then each layer's Y_h (and Y_c)."""
    rng = np.random.default_rng(seed)
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    nodes, inits, inputs, outs, x = [], [], [helper.make_tensor_value_info("X", TensorProto.FLOAT, [steps, batch, hidden])], [], "X"
    scale = 1 / np.sqrt(hidden)
    for l in range(layers):
        inits += [numpy_helper.from_array((rng.uniform(-scale, scale, (1, G * hidden, hidden))).astype("float32"), f"W{l}"),
                  numpy_helper.from_array((rng.uniform(-scale, scale, (1, G * hidden, hidden))).astype("float32"), f"R{l}"),
                  numpy_helper.from_array((rng.uniform(-scale, scale, (1, 2 * G * hidden))).astype("float32"), f"B{l}")]
        ins = [x, f"W{l}", f"R{l}", f"B{l}", "L" if lengths else ""]
        if states:
            ins.append(f"h0_{l}")
            inputs.append(helper.make_tensor_value_info(f"h0_{l}", TensorProto.FLOAT, [1, batch, hidden]))
            if op == "LSTM":
                ins.append(f"c0_{l}")
                inputs.append(helper.make_tensor_value_info(f"c0_{l}", TensorProto.FLOAT, [1, batch, hidden]))
        names = [f"Y{l}", f"Yh{l}"] + ([f"Yc{l}"] if op == "LSTM" else [])
        extra = {"linear_before_reset": linear_before_reset} if op == "GRU" else {}
        nodes.append(helper.make_node(op, ins, names, name=f"{op.lower()}{l}", hidden_size=hidden, direction=direction, **extra))
        nodes.append(helper.make_node("Squeeze", [f"Y{l}", "one"], [f"X{l + 1}"]))
        x = f"X{l + 1}"
        outs += names[1:]
    if lengths:
        inputs.insert(1, helper.make_tensor_value_info("L", TensorProto.INT32, [batch]))
    inits.append(numpy_helper.from_array(np.array([1], "int64"), "one"))
    graph = helper.make_graph(nodes, "stack", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                                        for o in [x] + outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8  # loadable by older ONNX Runtime builds too (the GPU box's)
    n_b = batch if isinstance(batch, int) else 5
    feeds = {"X": rng.standard_normal((steps, n_b, hidden)).astype("float32")}
    if lengths:
        feeds["L"] = np.array([0 if b % 3 == 2 else steps - (b % 3) * (steps // 3) for b in range(n_b)], "int32")
    for name in [i.name for i in graph.input if i.name.startswith(("h0", "c0"))]:
        feeds[name] = (rng.standard_normal((1, n_b, hidden)) * 0.5).astype("float32")
    return model, feeds


def sixteen_bit_model(model: onnx.ModelProto, feeds: dict, dtype: str = "float16"):
    """(model16, feeds16, model32, feeds32): `model` and `feeds` in `dtype` (initializers, inputs
    and outputs; lengths stay int32), and the fp32 model on the same 16-bit-exact weights and
    feeds, which ONNX Runtime's CPU layers (fp32 only) run as the reference."""
    exact = {k: (v.astype(dtype).astype("float32") if v.dtype == np.float32 else v) for k, v in feeds.items()}
    half, ref = onnx.ModelProto(), onnx.ModelProto()
    half.CopyFrom(model)
    ref.CopyFrom(model)
    for i, t in enumerate(model.graph.initializer):
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32:
            rounded = a.astype(dtype).astype("float32")
            half.graph.initializer[i].CopyFrom(helper.make_tensor(t.name, NP_TO_ONNX[dtype], a.shape,
                                                                  rounded.flatten().tolist()))
            ref.graph.initializer[i].CopyFrom(numpy_helper.from_array(rounded, t.name))
    for v in [*half.graph.input, *half.graph.output]:
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = NP_TO_ONNX[dtype]
    ours = {k: (v.astype(dtype) if v.dtype == np.float32 else v) for k, v in exact.items()}
    return half, ours, ref, exact


def embedding_model(op="LSTM", vocab=50, embed=16, hidden=24, steps=7, batch=3, axis=0, seed=0, batch_first=False):
    """Gather(table, ids) -> op (one layer) -> Y, with a symbolic batch; and feeds with negative ids
    (ONNX's Gather counts them from the end). `batch_first`: ids (B, T), the rows transposed to
    (T, B) before the layer (torch's batch_first=True export); `axis` 1: the table's columns gathered."""
    rng = np.random.default_rng(seed)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    table = rng.standard_normal((vocab, embed) if axis == 0 else (embed, vocab)).astype("float32")
    # torch's initialisation, U(-1/sqrt(H), 1/sqrt(H)): larger recurrent weights make the sequence
    # chaotic, and any two summation orders (ours, ONNX Runtime's) drift apart step by step
    w, r, b = (rng.uniform(-1, 1, shape).astype("float32") / np.float32(np.sqrt(hidden))
               for shape in ((1, gates * hidden, embed), (1, gates * hidden, hidden), (1, 2 * gates * hidden)))
    nodes = [helper.make_node("Gather", ["table", "ids"], ["x"], axis=axis)]
    if axis != 0 or batch_first:
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2] if batch_first else [1, 2, 0]))
    nodes.append(helper.make_node(op, ["x" if axis == 0 and not batch_first else "xt", "W", "R", "B"], ["Y"],
                                  hidden_size=hidden, **({"linear_before_reset": 1} if op == "GRU" else {})))
    rows_first = axis == 0 and not batch_first
    ids_shape = [steps, "batch"] if rows_first else ["batch", steps]
    graph = helper.make_graph(nodes, "embedded", [helper.make_tensor_value_info("ids", TensorProto.INT64, ids_shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for a, n in ((table, "table"), (w, "W"), (r, "R"), (b, "B"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    ids = rng.integers(-vocab, vocab, size=(steps, batch) if rows_first else (batch, steps)).astype("int64")
    return model, {"ids": ids}
