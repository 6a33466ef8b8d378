"""Which stacks the layer wavefront runs, and how it gives each layer a thread-block cluster.

Every layer runs on one cluster of `cluster` CTAs, each holding its slice of that layer's weights in
registers for the whole sequence: layer 0 its recurrent matrix R (K = H columns), every later layer
[W | R], its input and recurrent weights side by side (K = 2H). Every CTA owns H / cluster units
(all their gates); a warp owns `rows_per_group` of the CTA's gate rows and each lane a stride-32
slice of their columns. `stack_configs` lists every warp count and cluster size whose CTAs hold
the widest layer's weights in registers (the config space, which persist_rnn's stack cost model
ranks); `plan_stack`, the rule, takes the fewest warps (registers a thread shrink as warps grow:
17 warps leave 120) and then the smallest cluster (fewer peers to send h to). Each takes the whole
batch in one tile or, a copy for each way to split it (`batch_tilings`), in tiles that each run
on clusters of their own: a tile's dot products walk fewer rows, on more SMs (the layer below's
h is loaded ahead for the tile's rows at once; the dot products keep every row's sums where 32
padded sums a lane hold them, else walk the tile a row at a time: `layout.live`).
"""
from __future__ import annotations

import dataclasses

from ..config import MAX_CLUSTER
from ..spec import CellSpec

#: weight registers a lane holds at most (rows_per_group x columns per lane), by compute warps: the
#: 64K-register file over the CTA's threads (the communication warp included) leaves 227 registers
#: a thread at 8 warps and 120 at 16, and the rest of a thread's state takes 50-60 (ptxas, sm_90:
#: 180 registers and no spill for 128 weights at 8 warps; 128 weights at 16 warps spill)
MAX_WEIGHT_REGS = {8: 128, 16: 64}
#: the most batch rows a tile takes: both copies of [h below ; h] for every row of the tile sit in
#: shared memory, and a step's update pairs are the tile's rows times the CTA's units
MAX_BATCH = 16
#: batch tiles a launch may have (each a set of clusters, one a layer)
MAX_TILES = 16
#: compute warps a CTA may have (the communication warp comes on top)
WARP_CHOICES = (8, 16)
#: layers a wavefront kernel takes at most (the kernel has a branch per layer)
MAX_LAYERS = 4
#: lanes that share a gate row's columns: one warp, summed by a shuffle
LANES = 32
#: the 16-bit dtypes a stack may have: weights widened to fp32 on chip, each layer's h rounded to
#: the dtype where the layer above reads it (`steps.as_layer_input`), as the layer's Y would be
SIXTEEN_BIT = ("float16", "bfloat16")


class UnsupportedStack(Exception):
    """The wavefront cannot run this stack; the message is the report's reason (its layers keep
    their own kernels)."""


@dataclasses.dataclass(frozen=True)
class StackConfig:
    """threads: compute threads per CTA (a communication warp comes on top); cluster: CTAs a
    layer; rows_per_group: gate rows a warp owns (every layer alike: each CTA owns H / cluster
    units); batch_chunk: batch rows a tile; lane_updates: a warp's lanes update its units from
    their own sums (`lanes.py`; only where `lanes_fit`); batch_tiles: tiles of the batch, each on
    L clusters of its own (the last may hold fewer rows)."""
    threads: int
    cluster: int
    rows_per_group: int
    batch_chunk: int
    lane_updates: bool = False
    batch_tiles: int = 1

    def as_dict(self) -> dict:
        """The config as the tuning log and the report name it (lane_updates and batch_tiles only
        when set, so that records written before them still name their configs)."""
        out = {"threads": self.threads, "cluster": self.cluster, "rows_per_group": self.rows_per_group,
               "batch_chunk": self.batch_chunk}
        if self.lane_updates:
            out["lane_updates"] = True
        if self.batch_tiles > 1:
            out["batch_tiles"] = self.batch_tiles
        return out


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
    if first.dtype not in SIXTEEN_BIT + ("float32",):
        bad.append(f"dtype {first.dtype}: the wavefront kernel takes float32, float16 and bfloat16")
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


def parts(spec: CellSpec, layer: int) -> int:
    """Dot-product sums a gate row keeps per batch row: GRU's layers above the first keep their
    input and recurrent parts apart (its candidate needs them so), every other layer one sum."""
    return 2 if layer > 0 and spec.cell == "gru" else 1


def lanes_fit(spec: CellSpec, cfg: StackConfig) -> bool:
    """Whether a warp's lanes can update its units straight from the shuffle's sums (`lanes.py`): the
    warp owns whole units (all their gates), every (batch row, unit) pair of them has a lane, and a
    lane's sums (each part's, each row's, each batch row's), padded to a power of two, number at
    most 32, so that one transposing shuffle-sum leaves one row's sum in each lane."""
    units, rows = divmod(cfg.rows_per_group, spec.num_gates)
    sums = (2 if spec.cell == "gru" else 1) * cfg.rows_per_group * cfg.batch_chunk  # an upper GRU's two parts
    return rows == 0 and units * cfg.batch_chunk <= LANES and padded_sums(sums) <= LANES


def padded_sums(n: int) -> int:
    """n sums padded to the next power of two (the transposing shuffle halves them each round)."""
    return 1 << max(n - 1, 0).bit_length()


def stack_configs(specs: list[CellSpec], batch: int | None, num_sms: int) -> list[StackConfig]:
    """Every config the wavefront can run `specs` with at a static `batch` (the config space of a
    stack): each warp count and cluster size whose CTAs hold the widest layer's [W | R] in
    registers, fewest warps first, then smallest cluster, each with its sums met in shared memory
    and, where they fit, with lane updates; all of them with the whole batch in one tile first,
    then in more tiles (those whose CTAs the GPU's SMs hold). UnsupportedStack, with the reason,
    when there is none."""
    check_stack(specs)
    if batch is None:
        raise UnsupportedStack("the wavefront takes static batches (the batch is known at run time): each tile of "
                               "the batch has its own clusters")
    if batch < 1:
        raise UnsupportedStack(f"batch {batch}: the wavefront takes a batch of at least one row")
    spec = specs[0]
    H, G = spec.hidden_size, spec.num_gates
    widest = 2 * H // LANES  # columns a lane holds of an upper layer's [W | R]
    shapes = []
    for warps in WARP_CHOICES:  # 8 warps first: a CTA of 17 warps (with the comm warp) has 120 registers a thread
        for cluster in (2, 4, 8, MAX_CLUSTER):
            units = H // cluster
            if H % cluster or units % 4 or (G * units) % warps:  # units go to peers 4 at a time (16 bytes)
                continue
            rpg = G * units // warps
            if rpg * widest <= MAX_WEIGHT_REGS[warps]:
                shapes.append(StackConfig(LANES * warps, cluster, rpg, batch))
    if not shapes:
        raise UnsupportedStack(f"an upper layer's [W | R] does not fit the registers of a cluster of {MAX_CLUSTER} CTAs")
    fitting = [dataclasses.replace(shape, batch_chunk=chunk, batch_tiles=tiles)
               for tiles, chunk in batch_tilings(batch) for shape in shapes]
    if not fitting:
        raise UnsupportedStack(f"batch {batch} in {MAX_TILES} tiles or fewer leaves more than {MAX_BATCH} rows a tile: "
                               "both copies of a tile's step input sit in shared memory")
    if all(ctas(c, specs) > num_sms for c in fitting):
        tiles = min(c.batch_tiles for c in fitting)
        split = f" with the batch in {tiles} tiles of at most {MAX_BATCH} rows" if tiles > 1 else ""
        raise UnsupportedStack(f"the stack needs {min(ctas(c, specs) for c in fitting)} CTAs{split}, more than the "
                               f"GPU's {num_sms} SMs")
    fitting = [c for c in fitting if ctas(c, specs) <= num_sms]
    return [v for c in fitting for v in (c, dataclasses.replace(c, lane_updates=True)) if v is c or lanes_fit(spec, v)]


def batch_tilings(batch: int) -> list[tuple[int, int]]:
    """(tiles, rows a tile) of each way to split `batch` into tiles of at most MAX_BATCH rows, the
    whole batch first: each tile runs the stack on clusters of its own, so a step's dot products
    walk fewer rows on more SMs. The last tile may hold fewer rows; a split that would leave a
    tile empty is left out."""
    out = []
    for tiles in range(1, min(batch, MAX_TILES) + 1):
        chunk = -(-batch // tiles)
        if chunk <= MAX_BATCH and -(-batch // chunk) == tiles:
            out.append((tiles, chunk))
    return out


def ctas(cfg: StackConfig, specs: list[CellSpec]) -> int:
    """CTAs of the launch: a cluster a layer, a set of them a batch tile."""
    return cfg.batch_tiles * len(specs) * cfg.cluster


def plan_stack(specs: list[CellSpec], batch: int | None, num_sms: int) -> StackConfig:
    """The wavefront's rule-based config for `specs` at a static `batch` (the first of
    `stack_configs`: fewest warps, then fewest peers), or UnsupportedStack with the reason."""
    return stack_configs(specs, batch, num_sms)[0]
