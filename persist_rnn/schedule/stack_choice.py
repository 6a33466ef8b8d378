"""Choose how a stack of layers is lowered under `wavefront="auto"`: tuning log, else cost model.

A measured stack record of the tuning log (`stack_log.py`) decides; without one the cost model
(`stack_cost.py`) does (a choice that costs nothing to make again, so it is not logged). A stack
with a layer that has no persistent kernel of its own is fused: the reference scan that layer
would keep is far slower than any persistent kernel.
"""
from __future__ import annotations

import dataclasses

from tir_templates.config import Config
from tir_templates.spec import CellSpec
from tir_templates.wavefront.plan import StackConfig

from . import stack_log
from .gpu import gpu_model
from .stack_cost import FUSE_MARGIN, stack_us


@dataclasses.dataclass
class StackChoice:
    fuse: bool
    source: str  # "tuning_log" | "cost_model"
    wavefront_us: float | None = None
    per_layer_us: float | None = None

    def why(self) -> str:
        """The report's words for the choice."""
        if self.source == "cost_model" and self.per_layer_us is None:
            return "the cost model's choice: a layer has no persistent kernel of its own"
        if self.per_layer_us is None or self.wavefront_us is None:
            return "the tuning log's measured choice"
        times = f"{self.per_layer_us:.0f} us a kernel a layer against {self.wavefront_us:.0f} us as one wavefront kernel"
        if self.source == "tuning_log":
            return f"the tuning log's measured choice: {times}"
        return f"the cost model's choice: {times}, predicted; fused from {FUSE_MARGIN}x"


def choose_stack(specs: list[CellSpec], cfg: StackConfig, layer_configs: list[Config | None], arch: str,
                 batch: int, steps: int | None, *, tuning_log_path=None, precision: str = "fp32") -> StackChoice:
    """Whether the stack `specs` (its wavefront config `cfg`; each layer's own kernel's config, or
    None for a layer without one) runs as one wavefront kernel."""
    wl = stack_log.stack_workload(specs, batch, arch, precision)
    if tuning_log_path:
        rec = stack_log.lookup(tuning_log_path, wl)
        if rec is not None and rec.source == "measured":
            return StackChoice(rec.lowering == "wavefront", "tuning_log", rec.wavefront_us, rec.per_layer_us)
    if any(c is None for c in layer_configs):
        return StackChoice(True, "cost_model")
    fused, per_layer = stack_us(specs, cfg, layer_configs, gpu_model(arch), batch, steps)
    return StackChoice(per_layer >= FUSE_MARGIN * fused, "cost_model", fused, per_layer)
