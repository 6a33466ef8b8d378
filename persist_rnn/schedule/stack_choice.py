"""Choose how a stack of layers is lowered: fused or apart (under `wavefront="auto"`), and which
wavefront config (always). A measured record of the tuning log decides; without one the cost
model does.

The config space is `plan.stack_configs`: each warp count and cluster size whose CTAs hold the
layers' weights in registers, each with the batch whole or in tiles. The cost model ranks them by
their slowest layer's predicted step, once a wave of resident clusters (`stack_cost.wavefront_us`);
on the one stack timed at every config (3 x LSTM H=128, B=1, H100) it ranked the fastest first. A choice that costs nothing to make again is not logged. A stack with
a layer that has no persistent kernel of its own is fused: the reference scan that layer would
keep is far slower than any persistent kernel.
"""
from __future__ import annotations

import dataclasses

from tir_templates.config import Config
from tir_templates.spec import CellSpec
from tir_templates.wavefront.plan import StackConfig

from . import stack_log
from .gpu import gpu_model
from .stack_cost import FUSE_MARGIN, stack_us, wavefront_us


@dataclasses.dataclass
class StackChoice:
    fuse: bool
    source: str  # "tuning_log" | "cost_model" | "asked"
    config: StackConfig
    wavefront_us: float | None = None
    per_layer_us: float | None = None
    config_source: str = "cost_model"  # "tuning_log" | "cost_model" | "only" (the space has one config)

    def why(self) -> str:
        """The report's words for the choice."""
        if self.source == "asked":
            return ""
        if self.source == "cost_model" and self.per_layer_us is None:
            return "the cost model's choice: a layer has no persistent kernel of its own"
        if self.per_layer_us is None or self.wavefront_us is None:
            return "the tuning log's measured choice"
        times = f"{self.per_layer_us:.0f} us a kernel a layer against {self.wavefront_us:.0f} us as one wavefront kernel"
        if self.source == "tuning_log":
            return f"the tuning log's measured choice: {times}"
        return f"the cost model's choice: {times}, predicted; fused from {FUSE_MARGIN}x"

    def report_why(self) -> str:
        """The report's words for the choice and the config, together."""
        return "; ".join(w for w in (self.why(), self.config_why()) if w)

    def config_why(self) -> str:
        """The report's words for the wavefront config."""
        name = stack_log.config_name(self.config.as_dict())
        return {"tuning_log": f"{name}, the tuning log's measured config",
                "cost_model": f"{name}, the cost model's fastest config",
                "only": f"{name}, the only config whose registers hold the layers' weights"}[self.config_source]


def ranked_configs(specs: list[CellSpec], configs: list[StackConfig], arch: str) -> list[StackConfig]:
    """`configs` fastest first by the cost model: the slowest layer's predicted step, once a wave
    of resident clusters (a tie keeps the order of `configs`: fewer warps, then fewer peers, each
    shape met in shared memory before its lane updates, which the model prices alike)."""
    gpu = gpu_model(arch)
    return sorted(configs, key=lambda cfg: wavefront_us(specs, cfg, gpu, None))


def choose_stack(specs: list[CellSpec], configs: list[StackConfig], layer_configs: list[Config | None], arch: str,
                 batch: int, steps: int | None, *, tuning_log_path=None, precision: str = "fp32",
                 asked: bool = False) -> StackChoice:
    """How the stack `specs` is lowered: fused (`asked`, or the log's or the model's choice) and
    with which of `configs` (its config space); `layer_configs`: each layer's own kernel's config,
    or None for a layer without one."""
    ranked = ranked_configs(specs, configs, arch)
    config, config_source = ranked[0], ("only" if len(ranked) == 1 else "cost_model")
    rec = None
    if tuning_log_path:
        rec = stack_log.lookup(tuning_log_path, stack_log.stack_workload(specs, batch, arch, precision))
        logged = [c for c in configs if rec is not None and rec.config == c.as_dict()]
        if logged:
            config, config_source = logged[0], "tuning_log"
    if asked:
        return StackChoice(True, "asked", config, config_source=config_source)
    if rec is not None and rec.source == "measured":
        return StackChoice(rec.lowering == "wavefront", "tuning_log", config, rec.wavefront_us, rec.per_layer_us,
                           config_source)
    if any(c is None for c in layer_configs):
        return StackChoice(True, "cost_model", config, config_source=config_source)
    fused, per_layer = stack_us(specs, config, layer_configs, gpu_model(arch), batch, steps)
    return StackChoice(per_layer >= FUSE_MARGIN * fused, "cost_model", config, fused, per_layer, config_source)
