"""Which stacks the layer wavefront runs, and how it gives a launch's CTAs to their layers.

Every CTA of the launch holds its slice of one layer's weights in registers for the whole
sequence: layer 0 its recurrent matrix R (K = H columns), every later layer [W | R], its input and
recurrent weights side by side (K = 2H). A warp owns `rows_per_group` gate rows of its layer and
each lane a stride-32 slice of their columns, so a layer with twice the columns gets half the
rows a warp and twice the CTAs: each layer's share of the launch follows its work.
"""
from __future__ import annotations

import dataclasses

from ..spec import CellSpec

#: weight registers a lane holds at most (rows_per_group x columns per lane)
MAX_WEIGHT_REGS = 64
#: accumulators a lane holds at most (parts x rows_per_group x batch_chunk)
MAX_ACCUMULATORS = 96
#: layers a wavefront kernel takes at most (the kernel has a branch per layer)
MAX_LAYERS = 4
#: lanes that share a gate row's columns: one warp, summed by a shuffle
LANES = 32


class UnsupportedStack(Exception):
    """The wavefront cannot run this stack; the message is the report's reason (its layers keep
    their own kernels)."""


@dataclasses.dataclass(frozen=True)
class StackConfig:
    """threads: per CTA (all layers' CTAs run one block size); rows_per_group: per layer, gate rows
    a warp owns; batch_chunk: batch rows a step's dot products take at once."""
    threads: int
    rows_per_group: tuple
    batch_chunk: int

    def as_dict(self) -> dict:
        return {"threads": self.threads, "rows_per_group": list(self.rows_per_group), "batch_chunk": self.batch_chunk}


def stack_problems(specs: list[CellSpec]) -> list[str]:
    """Why the wavefront cannot run `specs` at all (empty when it can, given enough SMs)."""
    first = specs[0]
    bad = []
    if not 2 <= len(specs) <= MAX_LAYERS:
        bad.append(f"the wavefront takes stacks of 2 to {MAX_LAYERS} layers, not {len(specs)}")
    for spec in specs:
        if spec.num_directions != 1 or spec.direction != first.direction:
            bad.append(f"{spec.node}: the layers must be unidirectional in one direction")
        if (spec.cell, spec.hidden_size, spec.dtype) != (first.cell, first.hidden_size, first.dtype):
            bad.append(f"{spec.node}: the layers must share cell, hidden_size and dtype")
        if spec.batch_broadcast != first.batch_broadcast:
            bad.append(f"{spec.node}: the layers' lengths and initial states must be given alike")
    if first.dtype != "float32":
        bad.append(f"dtype {first.dtype}: the wavefront kernel is fp32 only")
    if first.cell == "gru" and not first.linear_before_reset:
        bad.append("GRU with linear_before_reset=0 needs r * h(t-1) before its dot product (two phases)")
    if first.hidden_size % LANES:
        bad.append(f"hidden_size {first.hidden_size} is not a multiple of {LANES}")
    for spec in specs[1:]:
        if spec.input_size != first.hidden_size:
            bad.append(f"{spec.node}: input_size {spec.input_size} is not the layer below's hidden_size")
    return bad


def check_stack(specs: list[CellSpec]) -> None:
    """Raise UnsupportedStack unless the wavefront kernel can be built for `specs`."""
    bad = stack_problems(specs)
    if bad:
        raise UnsupportedStack("; ".join(bad))


def _warps(spec: CellSpec) -> int:
    """Warps per CTA: a whole number of units' gates per CTA at any rows_per_group."""
    return 6 if spec.num_gates == 3 else 8


def plan_stack(specs: list[CellSpec], batch: int | None, num_sms: int) -> StackConfig:
    """The wavefront's config for `specs` at a static `batch` (None: known at run time), or
    UnsupportedStack with the reason."""
    check_stack(specs)
    spec = specs[0]
    H, G, warps = spec.hidden_size, spec.num_gates, _warps(spec)
    rows = []
    for layer in range(len(specs)):
        cols = (H if layer == 0 else 2 * H) // LANES
        fits = [r for r in (8, 4, 2, 1) if r * cols <= MAX_WEIGHT_REGS and (warps * r) % G == 0
                and H % (warps * r // G) == 0]
        if not fits:
            raise UnsupportedStack(f"layer {layer}: {cols} columns a lane do not fit {MAX_WEIGHT_REGS} weight registers")
        rows.append(fits[0])
    ctas = sum(G * H // (warps * r) for r in rows)
    if ctas > num_sms:
        raise UnsupportedStack(f"the stack's weights need {ctas} CTAs of registers, more than the GPU's {num_sms} SMs")
    # layers above the first sum their input and recurrent parts apart (GRU's candidate); the budget
    # is taken for the widest layer in two parts, which splits B=10 into two chunks a step: measured
    # as the wavefront's loss at B >= 8 (docs/design.md), a budget per layer is the first lever
    parts = 2
    most = MAX_ACCUMULATORS // (parts * max(rows))
    chunk = max(1, min(batch if batch else 4, most))
    return StackConfig(LANES * warps, tuple(rows), chunk)
