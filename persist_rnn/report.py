"""What happened to each recurrent layer: read back from the attributes the IRModule carries."""
from __future__ import annotations

import dataclasses
import json

import tvm

from tir_templates.config import Config
from tir_templates.early_launch import COOPERATIVE_LAUNCH, EARLY_LAUNCH
from tir_templates.spec import ATTR_KEY, CellSpec
from tir_templates.wavefront import STACK_KERNEL_ATTR

from .frontend.importer import UNROLLED_ATTR

#: PrimFunc attributes the pass sets on the kernel that replaces a reference scan
LOWERING_ATTR = "persist_rnn.lowering"
REASON_ATTR = "persist_rnn.reason"
CONFIG_ATTR = "persist_rnn.config"
SOURCE_ATTR = "persist_rnn.source"
#: a kernel with one persistent kernel per batch bucket: JSON list of {max_batch, config, source, time_us}
BUCKETS_ATTR = "persist_rnn.buckets"
#: a layer of a stack (transform/layer_stacks.py): {"stack": [node names, lowest first], "position": l}
STACK_ATTR = "persist_rnn.stack"
#: set on a stack's per-layer kernels when the stack stays per layer (transform/layer_wavefront.py): why
STACK_REASON_ATTR = "persist_rnn.stack_reason"
#: a layer whose input projection was folded into the embedding table it reads
#: (transform/embedding_projection.py)
EMBEDDING_FOLDED_ATTR = "persist_rnn.embedding_folded"


def kernel_configs(func) -> list[Config]:
    """The configs of a persistent kernel: one, or one per batch bucket."""
    if func.attrs is not None and BUCKETS_ATTR in func.attrs:
        return [Config.from_dict(b["config"]) for b in json.loads(str(func.attrs[BUCKETS_ATTR]))]
    return [Config.from_dict(json.loads(str(func.attrs[CONFIG_ATTR])))]


def kernel_config_at(func, batch: int) -> Config | None:
    """The config a layer's kernel runs `batch` with (its bucket's), or None if it is not persistent."""
    if func.attrs is None or str(func.attrs.get(LOWERING_ATTR, "")) != "persistent":
        return None
    if BUCKETS_ATTR in func.attrs:
        for row in json.loads(str(func.attrs[BUCKETS_ATTR])):
            if row["max_batch"] is None or batch <= row["max_batch"]:
                return Config.from_dict(row["config"])
    return Config.from_dict(json.loads(str(func.attrs[CONFIG_ATTR])))


@dataclasses.dataclass
class LayerReport:
    """One recurrent layer (all its directions): how it was lowered and why."""

    node: str
    cell: str
    input_size: int
    hidden_size: int
    directions: int
    lowering: str  # "reference" | "unrolled" | "persistent" | "streamed" | "gemm_scan" | "wavefront"
    reason: str = ""
    config: dict = dataclasses.field(default_factory=dict)
    source: str = ""  # "tuning_log" | "cost_model" | "measured" | "" (a wavefront layer: the stack's choice, or "asked")
    early_launch: bool = False  # starts while the kernel before it runs, the input projection's (tir_templates.early_launch)
    cooperative_launch: bool = False  # a grid barrier: launched whole or not at all, never a hang
    tf32_step: bool = False  # the recurrent step (some bucket's, at least) on the tensor cores at TF32 precision
    #: batch known only at run time: a config per bucket, [{max_batch (None: the rest), config, source, time_us}]
    buckets: list = dataclasses.field(default_factory=list)
    #: the stack of layers this one belongs to (node names, lowest first; transform/layer_stacks.py):
    #: one wavefront kernel (lowering "wavefront"), or each layer its own kernel; `stack_reason` says why
    stack: list = dataclasses.field(default_factory=list)
    stack_reason: str = ""
    #: a stack whose batch is known at run time: per batch bucket, one wavefront kernel or a kernel
    #: a layer, [{max_batch (None: the rest), fused, why, config (the wavefront's, if fused)}]
    stack_buckets: list = dataclasses.field(default_factory=list)
    #: its input projection folded into the embedding table it reads: a lookup, no GEMM
    embedding_folded: bool = False
    #: compiled from a torch module: the layer's module path and place ("encoder.lstm, layer 2 of 3")
    module: str = ""
    #: its weights are int8 values (a quantized model's) held in fp16 by its kernel (some bucket's, at least)
    int8_weights_in_fp16: bool = False
    #: ... and multiplied on the tensor cores (the 16-bit mma), h(t-1) rounded to fp16 for them
    #: (some bucket's, at least; config.tensor_core_dtypes)
    int8_weights_on_tensor_cores: bool = False
    #: ... held as int8 in registers, four to a register, by its kernel (some bucket's, at least: int8_rows.py)
    int8_weights_as_int8: bool = False
    #: its kernel reads part of its weights from global memory each step, as none fit on chip
    #: (`Config.global_runs`; some bucket's, at least)
    weights_from_global_memory: bool = False

    def __getitem__(self, key):
        return getattr(self, key)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def line(self) -> str:
        dirs = {1: "1 direction", 2: "2 directions"}[self.directions]
        why = f" ({self.reason})" if self.reason else ""
        early = ", early launch" if self.early_launch else ", cooperative launch" if self.cooperative_launch else ""
        buckets = f", {len(self.buckets)} batch buckets" if self.buckets else ""
        tf32 = ", TF32 step" if self.tf32_step else ""
        folded = ", input projection folded into its embedding table" if self.embedding_folded else ""
        stacked = f", layer {self.stack.index(self.node) + 1} of {len(self.stack)} stacked" if self.stack else ""
        fused = [b["max_batch"] for b in self.stack_buckets if b["fused"]]
        if fused:  # the wavefront up to a batch, a kernel a layer above it
            stacked += f" (one wavefront kernel for B <= {max(fused)}, own kernel above)"
        elif self.stack and self.lowering in ("persistent", "streamed", "gemm_scan"):  # a kernel a layer, not the wavefront
            stacked += f" (own kernel: {self.stack_reason})" if self.stack_reason else " (own kernel)"
        elif self.lowering == "wavefront" and self.stack_reason:  # one wavefront kernel: whose choice
            stacked += f" ({self.stack_reason})"
        held = (["as int8"] if self.int8_weights_as_int8 else []) + (["in fp16"] if self.int8_weights_in_fp16 else [])
        if self.int8_weights_on_tensor_cores:
            held[-1] += " on the tensor cores (h(t-1) rounded to fp16 for them)"
        int8 = ", int8 weights held " + " or ".join(held) if held else ""
        if len(held) > 1:
            int8 += ", by batch bucket"
        streams = ", part of its weights read from global memory each step" if self.weights_from_global_memory else ""
        name = f"{self.module} ({self.node})" if self.module else self.node
        return (f"{name}: {self.cell.upper()} input {self.input_size} hidden {self.hidden_size}, "
                f"{dirs}: {self.lowering}{tf32}{int8}{streams}{folded}{early}{buckets}{stacked}{why}")

    def bucket_lines(self) -> list[str]:
        """One line per batch bucket: the batches it takes, its config and where it came from; and
        one per bucket of its stack: the wavefront or a kernel a layer, and why."""
        out = [f"  {span}: {b['config']} [{b['source']}]" for span, b in _spans(self.buckets)]
        for span, b in _spans(self.stack_buckets):
            out.append(f"  stack, {span}: " + (f"one wavefront kernel ({b['why']})" if b["fused"] else
                                               f"a kernel a layer ({b['why']})"))
        return out


def _spans(buckets: list) -> list:
    """(the batches a bucket takes, "B 2" / "B 3-4" / "B >= 65"; the bucket) of each of `buckets`."""
    out, low = [], 1
    for b in buckets:
        top = b["max_batch"]
        out.append((f"B >= {low}" if top is None else f"B {low}" if top == low else f"B {low}-{top}", b))
        low = (top or 0) + 1
    return out


def _entry(spec: CellSpec, lowering: str, **kw) -> LayerReport:
    return LayerReport(node=spec.node, cell=spec.cell, input_size=spec.input_size,
                       hidden_size=spec.hidden_size, directions=spec.num_directions, lowering=lowering, **kw)


def _attr(func, key, default=""):
    return str(func.attrs[key]) if func.attrs is not None and key in func.attrs else default


def _wavefront_layers(func) -> list[LayerReport]:
    """The layers of a wavefront kernel (tir_templates.wavefront), one entry each."""
    info = json.loads(str(func.attrs[STACK_KERNEL_ATTR]))
    specs = [CellSpec.from_json(text) for text in info["layers"]]
    choice = info.get("choice", {})
    early = EARLY_LAUNCH[1][0] in list(func.attrs.get(EARLY_LAUNCH[0], []))
    return [_entry(spec, "wavefront", config=info["config"], source=choice.get("source", ""), early_launch=early,
                   stack=[s.node for s in specs], stack_reason=choice.get("why", "")) for spec in specs]


def layer_report(mod: tvm.IRModule) -> list[LayerReport]:
    """One LayerReport per recurrent layer found in `mod`, in graph order of the node names."""
    out, stack_buckets = [], {}
    for _, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None and STACK_KERNEL_ATTR in func.attrs:
            info = json.loads(str(func.attrs[STACK_KERNEL_ATTR]))
            if "buckets" in info:  # a runtime-batch stack: its layers' own kernels tell the rest
                stack_buckets.update({CellSpec.from_json(t).node: info["buckets"] for t in info["layers"]})
            else:
                out += _wavefront_layers(func)
        elif isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None and ATTR_KEY in func.attrs:
            spec = CellSpec.from_json(str(func.attrs[ATTR_KEY]))
            launch = func.attrs.get(EARLY_LAUNCH[0], [])
            lowering = _attr(func, LOWERING_ATTR, "reference")
            configs = kernel_configs(func) if lowering == "persistent" else []  # every bucket's
            out.append(_entry(spec, lowering, reason=_attr(func, REASON_ATTR),
                              config=json.loads(_attr(func, CONFIG_ATTR, "{}")), source=_attr(func, SOURCE_ATTR),
                              early_launch=EARLY_LAUNCH[1][0] in list(launch),
                              cooperative_launch=COOPERATIVE_LAUNCH[1][0] in list(launch),
                              tf32_step=any(c.tf32() for c in configs),
                              int8_weights_in_fp16=spec.int8_weights and any(c.weight_dtype == "float16" for c in configs),
                              int8_weights_on_tensor_cores=spec.int8_weights and any(c.f16_mma() for c in configs),
                              int8_weights_as_int8=any(c.int8_weights() for c in configs),
                              weights_from_global_memory=any(c.global_runs for c in configs),
                              buckets=json.loads(_attr(func, BUCKETS_ATTR, "[]")),
                              stack=json.loads(_attr(func, STACK_ATTR, "{}")).get("stack", []),
                              stack_reason=_attr(func, STACK_REASON_ATTR),
                              embedding_folded=_attr(func, EMBEDDING_FOLDED_ATTR) == "1"))
    for entry in out:
        entry.stack_buckets = stack_buckets.get(entry.node, [])
    if mod.attrs is not None and UNROLLED_ATTR in mod.attrs:
        for text in json.loads(str(mod.attrs[UNROLLED_ATTR])):
            out.append(_entry(CellSpec.from_json(text), "unrolled", reason="unroll=True was asked for"))
    return out
