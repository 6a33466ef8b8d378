"""Config: how a persistent kernel is tiled and mapped onto the GPU (GRNN sections 5-6).

Each CTA owns `tile_units` hidden units of one direction and *all* gate rows of them, so the
gate math and the state update stay inside the CTA. Inside a CTA, work groups of `group_size`
lanes each own `rows_per_group` gate rows; every lane keeps its strided slice of those rows in
registers for the whole sequence (the last `smem_runs` runs of its columns in shared memory, when
the registers cannot hold them all, and, where shared memory cannot hold the rest either, the
last `global_runs` read from global memory each step: L2 keeps them when they fit it, as the
weight-streaming thesis in the seeds has it). Batch rows are processed `batch_chunk` at a time.

The batch can also be split into tiles of `batch_tile` rows, each with a direction's CTAs of
its own: batch rows never interact, so tiles never wait for each other and each runs at the
speed of a smaller batch. When one CTA holds a direction (small H) a tile is one CTA with no
barrier at all; otherwise a tile's CTAs form a thread-block cluster, whose hardware barrier is
the tile's own, or a grid of their own that meets at a barrier counter of its own (one per
tile and direction, as many as the workspace has words for).

GRU with linear_before_reset=0 has two variants (`gru_barriers`): 2, two phases per step, each
ending in a barrier (GRNN Fig. 7a); 1, GRNN's partial sums (Fig. 7b): the work groups hold only
the candidate rows, and each thread also holds whole rows of the CTA's columns of R_z and R_r, so
that after h(t) the CTA can publish its partial sums of every unit's z and r pre-activations,
which all CTAs reduce after the step's one barrier.

When a work group holds *all* gate rows of its units (`rows_per_group` a multiple of the gates)
and has a lane for each (unit, batch row) pair it owns, its lanes apply the cell straight from
the shuffle's sums (`lane_updates`): the gate sums never go through shared memory, and the step
saves a `__syncthreads` (one per step in all for a CTA that holds its direction).

With `mma_k_split` > 0 the dot products run on the tensor cores instead, with fp32 accuracy
(3xTF32: each operand split into a TF32 high part and the fp32 remainder, read as TF32 by the
mma; three `mma.sync` m16n8k8 products, the remainders' product dropped): each warp holds one 16-row tile of the
CTA's gate rows over 1/`mma_k_split` of the columns as mma A fragments in registers, h(t-1) of
the chunk is the B operand (batch rows padded to 8), and the `mma_k_split` warps of a row tile
leave partial sums in shared memory that the updating threads add. The tensor cores pay off at
larger batches (on the H100 from B=20), where the FMA units' version waits on shared-memory loads of h;
`group_size` and `rows_per_group` are then 32 and 16 (a warp, a row tile) and unused otherwise.
When the CTA's gate rows are not whole 16-row tiles (GRU: 3 x `tile_units`), the last tile is
padded with zero rows. With `mma_precision` "tf32" (what `torch.backends.cudnn.allow_tf32` allows,
asked for by compiling with precision="tf32") the weights are rounded to TF32 once, as they are
loaded, and h(t-1) each step: one mma per tile instead of three, no splits.

With `dsmem` the CTAs of a cluster exchange h through distributed shared memory instead of L2:
each keeps h in two shared copies by step parity (as a resident CTA does), writes its units of
h(t) straight into every other CTA's next copy (`st.async`, 16 bytes a store), and waits on an
mbarrier of its own that counts the bytes arriving. The cluster barrier, the exchange buffer's
store and the reload of h from L2 leave the step; C(t) and h(t) stay on chip until the last step.

With `stamped` the CTAs of a grid direction never meet at a counter after the first step: each
publishes its units of h(t) as 8-byte words (the value beside its step's stamp, one store), and
every CTA reads all of h(t-1) straight from those words, spinning only on a word whose stamp is
not there yet (`persistent/stamped_exchange.py`). The barrier's release fence, atomic and poll
leave the step; the words are twice the bytes of plain h. A 16-bit mma step's words carry two
units' 16-bit halves beside the stamp instead (`stamped_halves`), twice the bytes of its 16-bit
exchange.
"""
from __future__ import annotations

import dataclasses

from .signature import BARRIER_FLAG_WORD, WORKSPACE_WORDS
from .spec import CellSpec

#: 2: lane updates, shared-memory h double-buffered in a resident CTA, fast sigmoid;
#: 3: tensor-core configs (`mma_k_split`), the FMA-unit kernels unchanged;
#: 4: a resident CTA keeps h(t) and C(t) on chip until its last step, its inputs alternate
#: between two register sets; sigmoid and tanh from ex2/rcp.approx.ftz; weights loaded 16 bytes
#: at a time
TEMPLATE_VERSION = 4
#: an SM's 32-bit registers, which a CTA's threads share, and the most one thread may have
REGISTER_FILE, MAX_THREAD_REGISTERS = 65536, 255
#: ... split evenly among the SM's sub-partitions, each of which runs every fourth warp of a CTA;
#: ptxas gives a thread registers in steps of 8. So a CTA's register cap is set by its busiest
#: sub-partition: with 9 to 12 warps (three on one), 168 a thread, not 65536 / 320 = 204 (nvcc
#: 13 for sm_90, `__launch_bounds__(320)`: a kernel of 166 live floats spilled 60 bytes; an LSTM
#: H=1280 B=1 fp32 kernel estimated at 196 registers used 168 and spilled 120)
SUB_PARTITIONS, REGISTER_STEP = 4, 8
#: FMA-unit configs whose batch chunk is at most this many rows must fit `register_cap_of`: their
#: step is short, and a spilled weight's reload from local memory lies on every step's path. A
#: longer chunk spreads that reload over more rows, and there a config past the cap beat what
#: fits: GRU H=1536 B=16-64 fp32, 16 rows a chunk and 340 bytes spilled, 1.11-1.52x faster than
#: the model's best fitting config; at B=1-8 the fitting one ran 1.06-1.42x faster, GRU H=1280
#: B=4 0.91x (kernels alone, H200: docs/data/register-cap-h200.jsonl)
SPILL_FREE_CHUNK = 8
#: grid barrier counters a launch may use: the workspace's words before its flag word, one per
#: direction, or per batch tile and direction
BARRIER_COUNTERS = BARRIER_FLAG_WORD

#: registers past the thread's cap that a 16-bit tensor-core config with A fragments in shared
#: memory may still be estimated at: GRU H=640 B=128 fp16 with 14 of 20 k-tiles there (8 past) ran
#: 1.18x faster kernel alone than with none (run D); GRU H=1536 B=32 bf16 with the 2 shared memory
#: takes (30 past, 212 bytes spilled) 1.06x slower, LSTM H=1536 B=64 fp16 with 1 (36 past) 1.03x
#: slower (run C; docs/data/tc-shared-fragments-h200.jsonl)
SPILL_SLACK = 8


def register_cap_of(threads: int) -> int:
    """The most registers ptxas gives each of a CTA's `threads` (its launch bound)."""
    warps_per_sub_partition = -(-threads // (32 * SUB_PARTITIONS))
    per_thread = REGISTER_FILE // (SUB_PARTITIONS * warps_per_sub_partition * 32)
    return min(MAX_THREAD_REGISTERS, per_thread // REGISTER_STEP * REGISTER_STEP)


def two_phase(spec: CellSpec) -> bool:
    """GRU with linear_before_reset=0: r * h(t-1) of every unit is needed before the candidate's
    GEMV, so a step has two phases (or GRNN's partial sums)."""
    return spec.cell == "gru" and not spec.linear_before_reset


@dataclasses.dataclass(frozen=True)
class Config:
    tile_units: int  # TW: hidden units per CTA
    group_size: int  # WS: lanes per work group (a power of two <= 32, inside one warp)
    rows_per_group: int  # gate rows each work group owns
    batch_chunk: int  # batch rows per pass over the CTA's weights
    weight_dtype: str = "float32"  # "float32" | "float16" | "bfloat16" (tensor cores only) | "int8"; fp32 accumulation
    gru_barriers: int = 2  # GRU linear_before_reset=0 only: 2 (two phases) or 1 (partial sums)
    cluster: bool = False  # a direction's CTAs form one thread-block cluster (Hopper; at most MAX_CLUSTER)
    batch_tile: int = 0  # > 0: each tile of this many batch rows gets a direction's CTA (or cluster) of its own
    smem_runs: int = 0  # of each lane's runs of columns (column_run wide), how many live in shared memory
    # (tensor cores: of each warp's k-tiles of A fragments, the last this many)
    global_runs: int = 0  # ... and how many, after those, are read from global memory (L2, HBM) each step
    # (16-bit tensor cores: the warp's k-tiles after its `smem_runs`, their A fragments read each step)
    mma_k_split: int = 0  # > 0: tensor-core dot products, this many warps splitting the columns of a row tile
    dsmem: bool = False  # a cluster's CTAs send h(t) into each other's shared memory (no cluster barrier)
    mma_precision: str = "3xtf32"  # tensor cores: "3xtf32" (fp32 accuracy) or "tf32" (one mma of rounded operands)
    stamped: bool = False  # a grid direction's CTAs read h(t-1) as stamped words (no barrier after the first)

    def tensor_cores(self) -> bool:
        return self.mma_k_split > 0

    def tf32(self) -> bool:
        """Tensor cores at TF32 precision (one mma of rounded operands, not 3xTF32)."""
        return self.tensor_cores() and self.mma_precision == "tf32"

    def half_weights(self) -> bool:
        """Weights held in 16 bits (fp16 or bf16), two to a 32-bit register."""
        return self.weight_dtype in HALF_DTYPES

    def int8_weights(self) -> bool:
        """Weights held as int8, four to a 32-bit register, R packed (int8_rows.py)."""
        return self.weight_dtype == INT8

    def f16_mma(self) -> bool:
        """Tensor cores on a 16-bit layer's own weights (mma m16n8k16 on fp16 or bf16 operands,
        h(t-1) rounded to the layer's dtype)."""
        return self.tensor_cores() and self.half_weights()

    def mma_k(self) -> int:
        """Columns of one k-tile: the mma's K (16 for 16-bit operands, 8 for TF32)."""
        return MMA_K_F16 if self.half_weights() else MMA_K

    def mma_passes(self) -> int:
        """mma instructions per (k-tile, n-tile): 3 for 3xTF32, 1 for TF32, fp16 and bf16."""
        return 1 if self.mma_precision == "tf32" or self.half_weights() else 3

    def k_splits(self) -> int:
        """Blocks of dot results a chunk leaves in shared memory: one per column split of a row
        tile with tensor cores (the updating threads add them), else one."""
        return max(1, self.mma_k_split)

    def row_tiles(self, spec: CellSpec) -> int:
        """16-row tiles of the CTA's gate rows, the last one padded with zero rows when they are not
        whole tiles (GRU's 3 x 8 rows; tensor cores: one warp per tile and column split)."""
        return -(-self.row_gates(spec) * self.tile_units // MMA_M)

    def k_tiles_per_warp(self, spec: CellSpec) -> int:
        """k-tiles of R (`mma_k` columns each) each warp holds (tensor cores)."""
        return spec.hidden_size // self.mma_k() // self.mma_k_split

    def n_tiles(self) -> int:
        """8-wide tiles of the batch chunk (tensor cores: the mma's N, padded)."""
        return -(-self.batch_chunk // MMA_N)

    def acc_sets(self) -> int:
        """Sets of C fragments a tensor-core warp alternates between, k-tile by k-tile, summed once
        after its last: two where a 16-bit mma warp has one n-tile and every k-tile of its row
        tile (one column split), whose mma otherwise wait for each other in one chain of 24-32.
        Kernel alone on the H200: LSTM H=512 B=32 fp16 2.29 -> 2.09 us a step, H=384 B=32 1.78
        -> 1.71; with two or more column splits, two n-tiles, or at TF32 and 3xTF32, the sets ran
        0.84-1.02x (docs/data/acc-sets-h200.jsonl)."""
        one_chain = self.f16_mma() and self.n_tiles() == 1 and self.k_splits() == 1
        return 2 if one_chain else 1

    def h_rows(self) -> int:
        """Rows of the shared copy of h: the chunk, padded to whole n-tiles with tensor cores."""
        return self.n_tiles() * MMA_N if self.tensor_cores() else self.batch_chunk

    def h_stride(self, spec: CellSpec) -> int:
        """Row stride of the shared copy of h: with tensor cores padded so that the batch rows a
        B fragment reads fall into different banks. TF32 reads one float a row and lane (8 rows
        of 4 floats: a stride of 4 mod 8 floats); the 16-bit mma two adjacent floats (LDS.64,
        served per half warp: 4 rows of 8 floats, a stride of 8 or 24 mod 32 floats)."""
        if not self.tensor_cores():
            return spec.hidden_size
        if self.h16_exchange(spec):  # uint32 words of two halves, LDS.32: 8 rows of 4 words, 4 mod 8 words
            return self._h16_stride(spec)
        if self.f16_mma():
            return self._f16_stride(spec)
        return spec.hidden_size + 4

    def _f16_stride(self, spec: CellSpec) -> int:
        """`h_stride` of the 16-bit mma's fp32 copy of h: H floats, padded to 8 mod 16."""
        return spec.hidden_size + (8 - spec.hidden_size) % 16

    def _h16_stride(self, spec: CellSpec) -> int:
        """`h_stride` with 16-bit exchange: H / 2 words, padded to 4 mod 8. Where the halved copy of
        h would leave between 0 and 48 KiB of dynamic shared memory beside static memory past 48
        KiB in all (a launch TVM's runtime fails, `problems`), the rows are spread further apart,
        so that the configs the fp32 copy allowed stay allowed."""
        words = spec.hidden_size // 2 + (4 - spec.hidden_size // 2) % 8
        rows, smem_w = self.h_rows(), self.smem_weight_bytes(spec)
        dynamic = 4 * rows * words + smem_w
        if self.dot_result_bytes(spec) + dynamic > STATIC_SHARED_BYTES > dynamic and rows > 1:
            # TVM keeps the copy up to its last row's last word: (rows - 1) strides and H / 2 words
            need = (STATIC_SHARED_BYTES - smem_w) // 4 - spec.hidden_size // 2
            words = -(-need // (rows - 1))
            words += (4 - words) % 8
        return words

    def h16_exchange(self, spec: CellSpec) -> bool:
        """A 16-bit mma step whose CTAs exchange h(t-1) in the layer's 16 bits: each owner rounds
        its unit of h(t) once and publishes it beside the fp32 value, and every CTA copies the
        16-bit slot into shared memory as the B fragments' pairs (half the bytes; no rounding in
        the dot, which read the same rounded values before). The fp32 h(t) stays the final state
        and the owner's own h(t-1). Not with h on chip or two phases; with stamped words, as
        stamped halves (`stamped_halves`)."""
        return (self.f16_mma() and not self.h_on_chip(spec) and not two_phase(spec)
                and spec.hidden_size % 8 == 0)

    def stamped_halves(self, spec: CellSpec) -> bool:
        """Stamped words of a 16-bit mma step (`persistent/stamped_exchange.py`): each 8-byte word
        holds two units' 16-bit halves of h(t), the pair a B fragment reads, beside the stamp."""
        return bool(self.stamped) and self.h16_exchange(spec)

    def h16_slot(self, spec: CellSpec) -> int | None:
        """The exchange slot of 16-bit h (`h16_exchange`): one fp32 row holds both step parities'
        halves (stamped halves: this slot and the next, a copy each); None without it."""
        return self._h_slots(spec) + (self.cell_state_slot(spec) is not None) if self.h16_exchange(spec) else None

    def partial_sums(self, spec: CellSpec) -> bool:
        """GRNN's one-barrier GRU (see the module docstring)."""
        return two_phase(spec) and self.gru_barriers == 1

    def lane_updates(self, spec: CellSpec) -> bool:
        """Whether the work groups' lanes apply the cell themselves (see the module docstring): the
        group holds whole units, at most one (unit, batch row) pair per lane, one phase a step."""
        units = self.rows_per_group // spec.num_gates
        return (not self.tensor_cores() and not two_phase(spec) and self.rows_per_group % spec.num_gates == 0
                and units * self.batch_chunk <= self.group_size)

    def updates_per_thread(self, spec: CellSpec) -> int:
        """(batch row, unit) pairs one thread updates per chunk: spread over the CTA's threads, or
        one per lane with lane updates."""
        if self.lane_updates(spec):
            return 1
        return -(-self.batch_chunk * self.tile_units // self.threads(spec))

    def resident(self, spec: CellSpec) -> bool:
        """One CTA holds the direction and the step has one phase: h stays in shared memory,
        double-buffered by step parity (when the CTA's batch rows fit one chunk)."""
        return self.barrier(spec) == "cta" and not two_phase(spec)

    def h_on_chip(self, spec: CellSpec) -> bool:
        """h stays in two shared copies by step parity for the whole sequence: a resident CTA, or a
        cluster whose CTAs exchange h through distributed shared memory (`dsmem`)."""
        return self.resident(spec) or (bool(self.dsmem) and self.barrier(spec) == "cluster" and not two_phase(spec)
                                       and not self.tensor_cores())

    def row_gates(self, spec: CellSpec) -> int:
        """Gates whose rows the work groups hold: all, or only the candidate's with partial sums."""
        return 1 if self.partial_sums(spec) else spec.num_gates

    def partial_rows(self, spec: CellSpec) -> int:
        """Rows of R_z and R_r (all 2H of them) each thread holds, TW weights each (partial sums)."""
        return -(-2 * spec.hidden_size // self.threads(spec)) if self.partial_sums(spec) else 0

    def exchange_slots(self, spec: CellSpec) -> int:
        """Leading extent of the exchange buffer: h by step parity and a spare slot, plus, with
        partial sums, one slot per (parity, gate z/r, CTA of a direction); stamped words take two
        slots each, by step parity. A 16-bit LSTM adds its cell state's slot (`cell_state_slot`), a
        16-bit mma step its 16-bit h's (`h16_slot`; stamped halves, one a copy)."""
        h16 = STAMPED_COPIES if self.stamped_halves(spec) else int(self.h16_exchange(spec))
        return self._h_slots(spec) + (self.cell_state_slot(spec) is not None) + h16

    def _h_slots(self, spec: CellSpec) -> int:
        if self.stamped and not self.stamped_halves(spec):
            return 2 * STAMPED_COPIES
        return 3 + (4 * self.ctas_per_direction(spec) if self.partial_sums(spec) else 0)

    def cell_state_slot(self, spec: CellSpec) -> int | None:
        """The exchange slot where a 16-bit LSTM keeps C in fp32 between steps (a CTA walking
        batch chunks reads it back each step), so that Y_c leaves the kernel in the layer's dtype
        with no cast kernel after it; None where Y_c itself is fp32 and is C's home."""
        return self._h_slots(spec) if spec.cell == "lstm" and spec.dtype != "float32" else None

    def num_ctas(self, spec: CellSpec) -> int:
        return spec.num_directions * (spec.hidden_size // self.tile_units)

    def ctas_per_direction(self, spec: CellSpec) -> int:
        return spec.hidden_size // self.tile_units

    def groups(self, spec: CellSpec) -> int:
        return self.row_gates(spec) * self.tile_units // self.rows_per_group

    def threads(self, spec: CellSpec) -> int:
        """Work-group lanes rounded up to whole warps (padding lanes hold zero weights); with tensor
        cores, a warp per (row tile, column split)."""
        if self.tensor_cores():
            return self.row_tiles(spec) * self.mma_k_split * 32
        return -(-self.groups(spec) * self.group_size // 32) * 32

    def cols_per_lane(self, spec: CellSpec) -> int:
        return spec.hidden_size // self.group_size

    def column_run(self, spec: CellSpec) -> int:
        """A lane's columns come in runs of this many (4: one float4 shared load of h each)."""
        return 4 if self.cols_per_lane(spec) % 4 == 0 else 1

    def weight_bytes(self) -> int:
        return 1 if self.int8_weights() else 2 if self.half_weights() else 4

    def weight_regs(self, spec: CellSpec) -> int:
        """32-bit registers per thread holding weights: one per weight, fp16 too (ptxas gives each
        half of a local array a register of its own: with two per register the fp16 configs the
        planner picked spilled); the last `smem_runs` runs of each row are in shared memory, and
        the `global_runs` after them in global memory."""
        if self.tensor_cores():  # an A fragment (4 registers) per k-tile, but the last `smem_runs`
            return 4 * (self.k_tiles_per_warp(spec) - self.smem_runs - self.global_runs)  # (and `global_runs`)
        if self.int8_weights():  # a run of four columns a register, and the row's scale
            return self.rows_per_group * (self.cols_per_lane(spec) // 4 + 1)
        return self.rows_per_group * (self.cols_per_lane(spec)
                                      - (self.smem_runs + self.global_runs) * self.column_run(spec))

    def stamped_words(self, spec: CellSpec) -> int:
        """Stamped words of h(t-1) each thread loads a step (0 without `stamped`; stamped halves:
        two units a word)."""
        units = spec.hidden_size // 2 if self.stamped_halves(spec) else spec.hidden_size
        return -(-self.batch_chunk * units // self.threads(spec)) if self.stamped else 0

    def registers(self, spec: CellSpec) -> int:
        """Estimated registers per thread: weights, accumulators, prefetched inputs and recurrent
        biases, ~40 of overhead."""
        updates = self.updates_per_thread(spec)
        partial = self.partial_rows(spec) * self.tile_units
        # a run staged from shared or global memory
        staged = self.rows_per_group * self.column_run(spec) if self.smem_runs or self.global_runs else 0
        if self.tensor_cores():  # C fragments, and the split A and B fragments of one k-tile
            return (self.weight_regs(spec) + 4 * self.n_tiles() * self.acc_sets() + 16
                    + updates * (2 * spec.num_gates + 2) + 40)
        return (self.weight_regs(spec) + partial + staged + self.rows_per_group * self.batch_chunk
                + updates * (2 * spec.num_gates + 2) + 2 * self.stamped_words(spec) + 40)

    def live_registers(self, spec: CellSpec) -> int:
        """Registers a tensor-core thread must keep for the whole step loop: its A fragments and
        C fragments (+8). The rest (`registers`) ptxas may spill to L1 at little cost: on the
        H200, configs that `registers` put 1.2-1.8x past the register file ran 1.2-2x faster
        than the FMA units' pick (GRU H=1536 B=8 fp16, 3.95 against 7.90 us a step; GRU H=2048
        B=16 bf16, 10.1, where no FMA config fits; docs/data/tc-registers-h200.jsonl)."""
        return self.weight_regs(spec) + 4 * self.n_tiles() * self.acc_sets() + 8

    def register_cap(self, spec: CellSpec) -> int:
        """Registers each thread may have, as the tensor-core configs' rules count them (fitted
        so): the register file over the CTA's threads, at most 255 (`register_cap_of` is what
        ptxas gives)."""
        return min(MAX_THREAD_REGISTERS, REGISTER_FILE // self.threads(spec))

    def shared_bytes(self, spec: CellSpec) -> int:
        h_vectors = 2 if self.partial_sums(spec) or self.h_on_chip(spec) else 1  # h(t-1), and r * h(t-1) or h(t)
        return (4 * h_vectors * self.h_rows() * self.h_stride(spec) + self.dot_result_bytes(spec)
                + self.smem_weight_bytes(spec))

    def dot_result_bytes(self, spec: CellSpec) -> int:
        """Static shared memory of a chunk's dot results (`gs`; with partial sums also z and h(t)
        of the tile); none with lane updates."""
        tile = 0 if self.lane_updates(spec) else self.row_gates(spec) * self.k_splits()  # dot results
        tile += 2 if self.partial_sums(spec) else 0  # z and h(t) of the tile
        return 4 * self.batch_chunk * tile * self.tile_units

    def fp32_copy_shared_bytes(self, spec: CellSpec) -> int:
        """`shared_bytes` with h(t-1) held in fp32. The planner offers the configs whose fp32 copy
        fits: chunks that fit only in 16 bits ran slower where timed (LSTM H=896 B=64 bf16, 64 rows
        a chunk on 16 warps: 13.99 us a step against 8.35 for 32 rows on 8 warps; GRU H=1536 B=32
        fp16 7.66 against 6.28; docs/data/exchange-ab-h200.jsonl). A tensor-core config's A
        fragments in shared memory are left out of it: they hold weights, not the chunk's rows
        (GRU H=640 B=128 fp16 with 16 of 20 k-tiles there, which it refused, ran 6.24 us a step
        kernel alone against 7.27 with 14; docs/data/tc-shared-fragments-h200.jsonl, run B)."""
        if not self.h16_exchange(spec):
            return self.shared_bytes(spec)
        fragments = self.smem_weight_bytes(spec) if self.tensor_cores() else 0  # weights, not the chunk's rows
        return self.shared_bytes(spec) - 4 * self.h_rows() * (self.h_stride(spec) - self._f16_stride(spec)) - fragments

    def smem_weight_bytes(self, spec: CellSpec) -> int:
        """Bytes of the weights moved to shared memory (`smem_runs` runs of every lane's rows; with
        tensor cores, the A fragments of each warp's last `smem_runs` k-tiles, 4 words a thread)."""
        if self.tensor_cores():
            return self.threads(spec) * 4 * self.smem_runs * 4
        return self.threads(spec) * self.rows_per_group * self.smem_runs * self.column_run(spec) * self.weight_bytes()

    def global_weight_bytes(self, spec: CellSpec) -> int:
        """Bytes of the CTA's weights read from global memory each pass over them (`global_runs`),
        in the layer's own dtype (R as the kernel receives it); a tensor-core warp's k-tile, its
        A fragment as the 16-bit pairs the kernel packed into its workspace, 16 bytes a thread."""
        if self.tensor_cores():
            return self.threads(spec) * self.global_runs * 4 * 4
        r_bytes = 2 if spec.dtype in HALF_DTYPES else 4
        return self.threads(spec) * self.rows_per_group * self.global_runs * self.column_run(spec) * r_bytes

    def workspace_words(self, spec: CellSpec) -> int:
        """Words of the per-call workspace the kernel takes: the barrier's, and with 16-bit
        tensor-core A fragments read each step (`global_runs`) their packed pairs, 4 words a
        k-tile and thread of each CTA of a batch tile (`dot_mma.pack_streamed_fragments`)."""
        if not (self.tensor_cores() and self.global_runs):
            return WORKSPACE_WORDS
        return WORKSPACE_WORDS + self.num_ctas(spec) * self.threads(spec) * self.global_runs * 4

    def static_shared_bytes(self, spec: CellSpec) -> int:
        """Shared memory outside the dynamic allocation: a resident CTA's copies of h (kept apart so
        that TVM's sync planner sees them as two buffers) and the dot results."""
        if not self.h_on_chip(spec):
            return 0
        return 4 * 2 * self.h_rows() * self.h_stride(spec) + self.dot_result_bytes(spec)  # no partial sums on chip

    def dynamic_shared_bytes(self, spec: CellSpec) -> int:
        """Shared memory in the kernel's dynamic allocation: once `shared_bytes` passes 48 KiB,
        the h vectors of a CTA that reloads h each step and the shared-memory weights (the dot
        results and a resident CTA's copies of h stay static); else none."""
        if self.shared_bytes(spec) <= STATIC_SHARED_BYTES:
            return 0
        h_vectors = 0 if self.h_on_chip(spec) else (2 if self.partial_sums(spec) else 1)
        return 4 * h_vectors * self.h_rows() * self.h_stride(spec) + self.smem_weight_bytes(spec)

    def barrier(self, spec: CellSpec) -> str:
        """How a direction's CTAs meet each step: "cta" when one CTA holds it (no barrier across
        CTAs at all), "cluster" (the hardware's cluster barrier), else "grid" (a counter in L2)."""
        if self.ctas_per_direction(spec) == 1:
            return "cta"
        return "cluster" if self.cluster else "grid"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


#: the tensor cores' mma shape (m16n8k8, TF32 operands, fp32 accumulators)
MMA_M, MMA_N, MMA_K = 16, 8, 8
#: (batch row, unit) pairs a tensor-core config's thread may update a chunk (the FMA units' configs: 1);
#: a wide tile of batch rows over few warps needs several
MAX_TC_UPDATES = 4
#: ... and its K with fp16 operands (m16n8k16)
MMA_K_F16 = 16
#: weight dtypes held two to a register
HALF_DTYPES = ("float16", "bfloat16")
#: ... and the one held four to a register (a quantized layer's, `CellSpec.int8_rows`)
INT8 = "int8"

#: shared memory a CTA may use without opting in to more (dynamic shared memory beyond it)
STATIC_SHARED_BYTES = 48 * 1024


#: CTAs per thread-block cluster that every Hopper GPU can launch (more needs an opt-in)
MAX_PORTABLE_CLUSTER = 8
#: CTAs per cluster with the non-portable opt-in, which TVM's CUDA runtime makes for a kernel whose
#: cluster is larger than the portable size (the H100 and H200 place 16 CTAs, one a SM, in a GPC)
MAX_CLUSTER = 16


def problems(spec: CellSpec, cfg: Config, num_sms: int, shared_limit: int = STATIC_SHARED_BYTES,
             max_cluster: int = 0) -> list[str]:
    """Why `cfg` cannot run `spec` on a GPU with `num_sms` SMs, `shared_limit` bytes of shared
    memory per CTA and clusters of up to `max_cluster` CTAs (0: none), empty when it can."""
    H, G = spec.hidden_size, cfg.row_gates(spec)
    out = []
    if cfg.tile_units <= 0 or H % cfg.tile_units:
        out.append(f"tile_units {cfg.tile_units} does not divide hidden_size {H}")
        return out
    if cfg.tensor_cores():
        out += tensor_core_problems(spec, cfg)
        if out:
            return out
    elif cfg.group_size not in (1, 2, 4, 8, 16, 32) or H % cfg.group_size:
        out.append(f"group_size {cfg.group_size} must be a power of two <= 32 dividing {H}")
        return out
    elif cfg.rows_per_group <= 0 or (G * cfg.tile_units) % cfg.rows_per_group:
        out.append(f"rows_per_group {cfg.rows_per_group} does not divide the CTA's {G * cfg.tile_units} gate rows")
        return out
    nt = cfg.threads(spec)
    if nt > 1024:
        out.append(f"{nt} threads per CTA (at most 1024)")
    if not cfg.tensor_cores() and (nt - cfg.groups(spec) * cfg.group_size >= 32
                                   or nt > 2 * cfg.groups(spec) * cfg.group_size):
        out.append(f"{cfg.groups(spec) * cfg.group_size} busy lanes waste most of {nt} threads")
    pairs = cfg.batch_chunk * cfg.tile_units
    if cfg.tensor_cores() and pairs > MAX_TC_UPDATES * nt:
        out.append(f"batch_chunk x tile_units = {pairs} exceeds {MAX_TC_UPDATES} pairs for each of {nt} threads")
    elif not cfg.tensor_cores() and pairs > nt:
        out.append(f"batch_chunk x tile_units = {pairs} exceeds {nt} threads")
    regs = cfg.registers(spec)
    if regs > 224:
        out.append(f"~{regs} registers per thread (weights, accumulators, prefetch; at most {MAX_THREAD_REGISTERS})")
    held = cfg.live_registers(spec) if cfg.tensor_cores() else regs  # what must not spill
    if nt * (held + 8) > REGISTER_FILE:  # 8 registers of slack: ptxas spills rather than fail
        out.append(f"{nt} threads x ~{held} registers (+8 slack) exceed the 64K register file")
    elif not cfg.tensor_cores() and cfg.batch_chunk <= SPILL_FREE_CHUNK and held + 8 > register_cap_of(nt):
        out.append(f"~{held} registers (+8 slack) a thread exceed the {register_cap_of(nt)} that ptxas gives each of "
                   f"{nt} threads, and a chunk of {cfg.batch_chunk} batch rows would reload the spills every step")
    shared = max(cfg.shared_bytes(spec), cfg.fp32_copy_shared_bytes(spec))
    if shared > shared_limit:
        out.append(f"{shared} bytes of shared memory (at most {shared_limit // 1024} KiB)")
    dynamic = cfg.dynamic_shared_bytes(spec)
    if 0 < dynamic < STATIC_SHARED_BYTES:
        out.append(f"{dynamic} bytes of dynamic shared memory beside {cfg.shared_bytes(spec) - dynamic} static: TVM's "
                   "runtime raises a kernel's limit only for 48 KiB or more of dynamic shared memory, so the launch "
                   "would fail")
    if cfg.static_shared_bytes(spec) > STATIC_SHARED_BYTES:
        out.append(f"{cfg.static_shared_bytes(spec)} bytes of static shared memory for a resident CTA's two copies of h "
                   f"(at most {STATIC_SHARED_BYTES // 1024} KiB)")
    if cfg.num_ctas(spec) > num_sms:
        out.append(f"{cfg.num_ctas(spec)} CTAs cannot all be resident on {num_sms} SMs (one CTA per SM)")
    if cfg.weight_dtype not in ("float32", *HALF_DTYPES, INT8):
        out.append(f"weight_dtype {cfg.weight_dtype!r} (float32, float16, bfloat16 on the tensor cores, or int8)")
    if cfg.int8_weights():
        out += int8_problems(spec, cfg)
    if cfg.weight_dtype == "float16" and spec.dtype == "float32" and not spec.int8_weights:
        out.append("weight_dtype 'float16' for an fp32 layer: only one whose weights are int8 values (a quantized "
                   "model's, which fp16 holds to within an eighth of their step) may lose fp32's precision")
    if cfg.weight_dtype == "bfloat16" and not cfg.tensor_cores():
        out.append("weight_dtype 'bfloat16': on the tensor cores only (the FMA units take bf16 layers' fp32 weights)")
    runs = cfg.cols_per_lane(spec) // cfg.column_run(spec)
    if not cfg.tensor_cores() and not (0 <= cfg.smem_runs and 0 <= cfg.global_runs
                                       and cfg.smem_runs + cfg.global_runs <= runs):
        out.append(f"smem_runs {cfg.smem_runs} and global_runs {cfg.global_runs}: a lane has {runs} runs of columns")
    if cfg.batch_tile and (cfg.batch_tile != cfg.batch_chunk or two_phase(spec)):
        out.append(f"batch_tile {cfg.batch_tile}: batch tiles need batch_chunk equal to the tile, and a cell with one "
                   "phase a step (not GRU with linear_before_reset=0)")
    if cfg.batch_tile and cfg.barrier(spec) == "grid" and (
            (cfg.stamped and not cfg.stamped_halves(spec))
            or num_sms // cfg.num_ctas(spec) * spec.num_directions > BARRIER_COUNTERS):
        out.append(f"batch_tile {cfg.batch_tile} in a grid: a counter per tile and direction, at most "
                   f"{BARRIER_COUNTERS} (tiles of {cfg.num_ctas(spec)} CTAs on {num_sms} SMs), and stamped words "
                   "only as a 16-bit mma step's halves")
    if cfg.cluster and not 1 < cfg.ctas_per_direction(spec) <= max_cluster:
        out.append(f"a cluster of {cfg.ctas_per_direction(spec)} CTAs (this GPU: "
                   + (f"2 to {max_cluster})" if max_cluster else "no thread-block clusters)"))
    if cfg.dsmem:
        out += dsmem_problems(spec, cfg)
    if cfg.stamped:
        out += stamped_problems(spec, cfg)
    if cfg.mma_precision not in ("3xtf32", "tf32") or (cfg.mma_precision == "tf32" and not cfg.tensor_cores()):
        out.append(f"mma_precision {cfg.mma_precision!r}: '3xtf32' or, for tensor-core configs only, 'tf32'")
    if cfg.gru_barriers not in (1, 2) or (cfg.gru_barriers == 1 and not cfg.partial_sums(spec)):
        out.append(f"gru_barriers {cfg.gru_barriers}: 1 (partial sums) is for GRU with linear_before_reset=0 only; "
                   "else 2")
    return out


def int8_problems(spec: CellSpec, cfg: Config) -> list[str]:
    """What weights held as int8 need: a layer whose R the pass packs (`CellSpec.int8_rows`), the
    FMA units, every weight in registers in runs of four columns, and one dot product per row
    (GRNN's partial sums read R_z, R_r as floats)."""
    out = []
    if not spec.int8_rows:
        out.append("weight_dtype 'int8': only for a layer whose R is int8 values times a scale per row at every "
                   "call site (a quantized model's constant weights)")
    if cfg.tensor_cores() or cfg.smem_runs or cfg.global_runs or cfg.cols_per_lane(spec) % 4 or cfg.partial_sums(spec):
        out.append("weight_dtype 'int8': FMA units, every weight in registers (no smem_runs, no global_runs), runs of "
                   "four columns a lane, and no partial sums")
    return out


def dsmem_problems(spec: CellSpec, cfg: Config) -> list[str]:
    """What the exchange through distributed shared memory needs: a cluster, one phase a step, the
    FMA units' dot products, and units of h that 16-byte stores can carry."""
    out = []
    if not cfg.cluster or cfg.barrier(spec) != "cluster":
        out.append("dsmem: h goes through distributed shared memory only between the CTAs of a cluster")
    if two_phase(spec):
        out.append("dsmem: GRU with linear_before_reset=0 has two phases a step (the exchange goes through L2)")
    if cfg.tensor_cores():
        out.append("dsmem: the FMA units' dot products only (the tensor cores read a padded copy of h)")
    if cfg.tile_units % 4 or spec.hidden_size % 4:
        out.append(f"dsmem: tile_units {cfg.tile_units} and hidden_size {spec.hidden_size} must be multiples of 4 "
                   "(16-byte stores)")
    return out


#: copies of h a stamped exchange keeps, by step parity (each word: value and stamp, 8 bytes)
STAMPED_COPIES = 2
#: stamped words one thread may load a step (each a register pair held until it settles)
MAX_STAMPED_WORDS = 16


def stamped_problems(spec: CellSpec, cfg: Config) -> list[str]:
    """What the stamped exchange needs: CTAs that meet at a grid counter (a cluster has its own
    barrier), one phase a step, the FMA units' dot products or a 16-bit mma step that exchanges
    h in 16 bits (its words then carry halves; fp32 words ran slower there,
    docs/data/stamped-tc-h200.jsonl), and few words per thread."""
    out = []
    if cfg.barrier(spec) != "grid":
        out.append("stamped: h goes through stamped words only between the CTAs of a grid direction")
    if two_phase(spec):
        out.append("stamped: GRU with linear_before_reset=0 has two phases a step")
    if cfg.tensor_cores() and not cfg.stamped_halves(spec):
        out.append("stamped: the FMA units' dot products, or a 16-bit mma step with h in 16 bits (hidden_size a "
                   "multiple of 8)")
    words = cfg.stamped_words(spec)
    if words > MAX_STAMPED_WORDS:
        out.append(f"stamped: {words} words of h a thread a step (at most {MAX_STAMPED_WORDS})")
    return out


def tensor_core_dtypes(spec: CellSpec) -> tuple[str, ...]:
    """The weight dtypes the tensor cores take for `spec`: the layer's own, and for an fp32 layer
    of int8 weights (`CellSpec.int8_weights`) also fp16 weights on the 16-bit mma,
    h(t-1) rounded to fp16 for it as the weights are. fp16's 11 bits round h 8x finer than ONNX
    Runtime's own DynamicQuantizeLSTM, which rounds h to 8 bits every step; a numpy LSTM (T=100,
    H=256-2048, B=1 and 16, int8 per tensor and per channel, weights and h rounded to fp16) erred
    by at most 1.02e-4 of the output scale against fp32, within INT8_WEIGHTS_TOLERANCE (1e-3)."""
    return (spec.dtype,) + (("float16",) if spec.int8_weights and spec.dtype == "float32" else ())


def tensor_core_problems(spec: CellSpec, cfg: Config) -> list[str]:
    """What the tensor-core dot products need: one phase a step, weights in registers at the
    layer's precision (fp32 layers: fp32, for 3xTF32 or TF32; fp16 and bf16 layers: their own
    dtype, for the 16-bit mma; a quantized fp32 layer: also fp16, `tensor_core_dtypes`)
    and k-tiles split evenly over the warps of a row tile."""
    out = []
    if two_phase(spec):
        out.append("tensor cores: GRU with linear_before_reset=0 has two phases a step (FMA units only)")
    if cfg.weight_dtype not in tensor_core_dtypes(spec):
        out.append("tensor cores: fp32 layers with fp32 weights (3xTF32 or TF32), fp16 and bf16 layers with weights "
                   "of their own dtype, and fp32 layers of int8 weights (a quantized model's) with fp16 weights")
    if cfg.f16_mma() and cfg.mma_precision != "3xtf32":
        out.append(f"tensor cores: mma_precision {cfg.mma_precision!r} is for fp32 layers (a 16-bit layer's mma is "
                   "at its own dtype)")
    if (cfg.group_size, cfg.rows_per_group) != (32, MMA_M):
        out.append("tensor cores: group_size 32 and rows_per_group 16")
    if cfg.global_runs and not (cfg.f16_mma() and spec.dtype in HALF_DTYPES and cfg.global_runs > 0
                                and cfg.smem_runs + cfg.global_runs <= cfg.k_tiles_per_warp(spec)):
        out.append(f"tensor cores: global_runs {cfg.global_runs} (k-tiles of A fragments read from global memory "
                   f"each step) only with a 16-bit layer's mma, after its smem_runs, at most the warp's "
                   f"{cfg.k_tiles_per_warp(spec)} k-tiles")
    if cfg.smem_runs and not (cfg.f16_mma() and 0 < cfg.smem_runs <= cfg.k_tiles_per_warp(spec)):
        out.append(f"tensor cores: smem_runs {cfg.smem_runs} (k-tiles of A fragments in shared memory) only with the "
                   f"16-bit mma, at most the warp's {cfg.k_tiles_per_warp(spec)} k-tiles")
    k = cfg.mma_k()
    if spec.hidden_size % k:
        out.append(f"tensor cores: hidden_size {spec.hidden_size} is not a multiple of the mma's k ({k})")
    elif (spec.hidden_size // k) % cfg.mma_k_split:
        out.append(f"tensor cores: {spec.hidden_size // k} k-tiles of {k} columns do not split over "
                   f"{cfg.mma_k_split} warps")
    return out
