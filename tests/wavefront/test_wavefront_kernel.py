"""The layer wavefront kernel (tir_templates/wavefront): its CPU twin against a numpy stack of
ONNX cells (every CTA's weights read where the kernel loads them, the barrier counted as on the
GPU), its plan, and its CUDA through nvcc at sm_80 and sm_90 without spills."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
import tvm

from tir_templates.spec import CellSpec
from tir_templates.wavefront import StackConfig, UnsupportedStack, emulated_stack_kernel, plan_stack, stack_kernel
from tir_templates.wavefront.plan import lanes_fit, stack_configs

G = {"lstm": 4, "gru": 3, "rnn": 1}
sig = lambda v: 1 / (1 + np.exp(-v))


def numpy_stack(cell, x, W, Wb, R, Rb, h0, c0, lens, reverse=False):
    """ONNX's equations layer by layer: (Y, Y_h, Y_c) of each layer."""
    n_t, n_b, H = x.shape
    out = []
    for l in range(len(W)):
        h, c, Y = h0[l].copy(), c0[l].copy(), np.zeros((n_t, n_b, H), "float32")
        for s in range(n_t):
            pos = np.array([(lens[b] - 1 - s if reverse else s) for b in range(n_b)])
            xt = x[np.clip(pos, 0, n_t - 1), np.arange(n_b)]
            xp, hp = xt @ W[l].T + Wb[l], h @ R[l].T + Rb[l]
            part = lambda a, k: a[:, k * H:(k + 1) * H]
            if cell == "lstm":
                i, o, f, g = (part(xp, k) + part(hp, k) for k in range(4))
                cn = sig(f) * c + sig(i) * np.tanh(g)
                hn = sig(o) * np.tanh(cn)
            elif cell == "gru":
                z, r = sig(part(xp, 0) + part(hp, 0)), sig(part(xp, 1) + part(hp, 1))
                hn, cn = (1 - z) * np.tanh(part(xp, 2) + r * part(hp, 2)) + z * h, c
            else:
                hn, cn = np.tanh(xp + hp), c
            live = (s < lens)[:, None]
            h, c = np.where(live, hn, h), np.where(live, cn, c)
            for b in np.nonzero(s < lens)[0]:
                Y[pos[b], b] = hn[b]
        some = (lens > 0)[:, None]
        out.append((Y, np.where(some, h, 0), np.where(some, c, 0)))
        x = Y
    return out


def run_twin(cell, H, n_l, n_t, n_b, plan_batch, direction="forward", seed=0, lanes=None, tiles=1):
    """The twin of the stack at the rule's config, or (lanes True / False, or `tiles` batch tiles)
    at the first config of the space that has (has not) lane updates and has `tiles` tiles."""
    rng = np.random.default_rng(seed)
    specs = [CellSpec(cell, H, H, direction=direction, node=f"l{l}", linear_before_reset=cell == "gru")
             for l in range(n_l)]
    cfg = plan_stack(specs, plan_batch, 132) if lanes is None and tiles == 1 else next(
        c for c in stack_configs(specs, plan_batch, 132)
        if c.lane_updates == bool(lanes) and c.batch_tiles == tiles)
    f = emulated_stack_kernel(specs, cfg)
    lib = tvm.compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}), target="llvm")
    x = rng.standard_normal((n_t, n_b, H)).astype("float32")
    W, R = ([(rng.standard_normal((G[cell] * H, H)) * 0.2).astype("float32") for _ in range(n_l)] for _ in range(2))
    Wb, Rb = ([(rng.standard_normal(G[cell] * H) * 0.1).astype("float32") for _ in range(n_l)] for _ in range(2))
    h0, c0 = ((rng.standard_normal((n_l, n_b, H)) * 0.5).astype("float32") for _ in range(2))
    lens = np.array([(n_t, n_t - 2, 0)[b % 3] for b in range(n_b)], "int32")
    want = numpy_stack(cell, x, W, Wb, R, Rb, h0, c0, lens, direction == "reverse")
    xw = np.zeros((n_t, n_b, 1, G[cell] * H), "float32")
    for b in range(n_b):  # layer 0's projection at every position (the kernel picks the row's)
        xw[:, b, 0] = x[:, b] @ W[0].T + Wb[0]
    args = [xw, lens]
    for l in range(n_l):
        args += [R[l][None], Rb[l][None], h0[l][None], c0[l][None], np.zeros((1, 3 * H), "float32")]
        if l:
            args += [np.ascontiguousarray(W[l].T), Wb[l]]
    outs = []
    for _ in range(n_l):
        outs += [np.zeros((n_t, 1, n_b, H), "float32"), np.zeros((1, n_b, H), "float32"),
                 np.zeros((1, n_b, H), "float32"), np.zeros((n_t, 1, n_b, 2 * H), "float32")]
    outs.append(np.zeros(32, "uint32"))
    tensors = [tvm.runtime.tensor(a) for a in args + outs]
    lib["main"](*tensors)
    got = [t.numpy() for t in tensors[len(args):]]
    assert got[-1][31] == 0, "a layer's wait or published count would not match the GPU's"
    return cfg, [(got[4 * l][:, 0], got[4 * l + 1][0], got[4 * l + 2][0]) for l in range(n_l)], want


@pytest.mark.parametrize("cell,H,n_l,n_b,direction", [
    ("lstm", 64, 2, 3, "forward"), ("gru", 64, 3, 3, "forward"), ("rnn", 32, 2, 4, "forward"),
    ("lstm", 32, 4, 3, "reverse"), ("gru", 64, 2, 10, "reverse"), ("lstm", 128, 3, 1, "forward")])
def test_twin_matches_numpy_stack(cell, H, n_l, n_b, direction):
    """Lengths with an empty row, initial states, several CTAs a cluster."""
    cfg, got, want = run_twin(cell, H, n_l, 5, n_b, n_b, direction)
    for (y, yh, yc), (wy, wyh, wyc) in zip(got, want):
        assert np.abs(y - wy).max() < 1e-5 and np.abs(yh - wyh).max() < 1e-5
        if cell == "lstm":
            assert np.abs(yc - wyc).max() < 1e-5


@pytest.mark.parametrize("cell,H,n_l,n_b,direction", [
    ("lstm", 64, 2, 3, "forward"), ("gru", 64, 3, 2, "forward"), ("gru", 64, 2, 1, "reverse"),
    ("rnn", 32, 3, 4, "forward"), ("lstm", 128, 2, 1, "reverse")])
def test_twin_with_lane_updates_matches_numpy_stack(cell, H, n_l, n_b, direction):
    """Lane updates' row order (a warp's units, all their gates) and pairs: the twin reads the
    weights and sums where the GPU's lanes keep them."""
    cfg, got, want = run_twin(cell, H, n_l, 5, n_b, n_b, direction, lanes=True)
    for (y, yh, yc), (wy, wyh, wyc) in zip(got, want):
        assert np.abs(y - wy).max() < 1e-5 and np.abs(yh - wyh).max() < 1e-5
        if cell == "lstm":
            assert np.abs(yc - wyc).max() < 1e-5


@pytest.mark.parametrize("cell,H,n_l,n_b,tiles,lanes,direction", [
    ("lstm", 64, 3, 10, 3, False, "forward"),  # tiles of 4, 4 and 2 rows: the last one short
    ("gru", 64, 2, 8, 4, True, "reverse"),
    ("rnn", 32, 2, 5, 5, False, "forward"),  # a row a tile
    ("lstm", 32, 2, 9, 2, True, "forward")])
def test_twin_in_batch_tiles_matches_numpy_stack(cell, H, n_l, n_b, tiles, lanes, direction):
    """Each batch tile on clusters of its own reads and writes its own rows of every tensor (its
    lengths, initial and final states, Y and the stamped h), and a short last tile none past the
    batch."""
    cfg, got, want = run_twin(cell, H, n_l, 5, n_b, n_b, direction, lanes=lanes, tiles=tiles)
    assert cfg.batch_tiles == tiles and cfg.batch_chunk * tiles >= n_b
    for (y, yh, yc), (wy, wyh, wyc) in zip(got, want):
        assert np.abs(y - wy).max() < 1e-5 and np.abs(yh - wyh).max() < 1e-5
        if cell == "lstm":
            assert np.abs(yc - wyc).max() < 1e-5


def test_batch_tilings_split_the_batch_without_an_empty_tile():
    from tir_templates.wavefront.plan import MAX_BATCH, batch_tilings
    assert batch_tilings(10) == [(1, 10), (2, 5), (3, 4), (4, 3), (5, 2), (10, 1)]
    assert batch_tilings(1) == [(1, 1)]
    assert batch_tilings(64)[0] == (4, MAX_BATCH)  # the whole batch does not fit one tile's shared memory
    for batch in range(1, 70):
        for tiles, chunk in batch_tilings(batch):
            assert chunk <= MAX_BATCH and (tiles - 1) * chunk < batch <= tiles * chunk


def test_lane_updates_where_a_warp_holds_whole_units_and_its_sums_fit_the_lanes():
    spec = CellSpec("lstm", 256, 256)
    assert lanes_fit(spec, StackConfig(256, 16, 8, 1))  # 2 units of 4 gates, 8 sums
    assert lanes_fit(spec, StackConfig(256, 16, 8, 4))  # 32 sums
    assert not lanes_fit(spec, StackConfig(256, 16, 8, 10))  # 80 sums
    assert not lanes_fit(spec, StackConfig(512, 16, 2, 1))  # half a unit a warp
    gru = CellSpec("gru", 256, 256, linear_before_reset=True)
    assert lanes_fit(gru, StackConfig(256, 16, 6, 1))  # 2 parts x 6 rows: 12 sums, padded to 16
    assert not lanes_fit(gru, StackConfig(256, 16, 6, 3))  # 36 sums, padded to 64
    # the space has each shape met in shared memory, then with lane updates where they fit
    space = stack_configs([spec] * 3, 1, 132)
    assert [(c.threads, c.rows_per_group, c.lane_updates) for c in space] == [
        (256, 8, False), (256, 8, True), (512, 4, False), (512, 4, True)]
    assert StackConfig(**space[1].as_dict()) == space[1] and "lane_updates" not in space[0].as_dict()


def transposed_shuffle(S, layer, partial):
    """dots.shuffle_sums as numpy: partial[lane, n] are the lanes' held sums; returns each lane's
    acc[0] after the five rounds (a lane keeps the half its lane bit picks, adds its partner's)."""
    acc = partial.copy()
    lanes = np.arange(32)
    for r in range(5):
        bit, n = 16 >> r, acc.shape[1]
        if n > 1:
            upper = (lanes & bit) != 0
            keep = np.where(upper[:, None], acc[:, n // 2:], acc[:, :n // 2])
            give = np.where(upper[:, None], acc[:, :n // 2], acc[:, n // 2:])
            acc = keep + give[lanes ^ bit]
        else:
            acc = acc + acc[lanes ^ bit]
    return acc[:, 0]


@pytest.mark.parametrize("cell,H,n_l,batch,cfg", [("lstm", 256, 3, 1, (256, 16, 8)), ("lstm", 256, 3, 10, (256, 16, 8)),
                                                  ("gru", 256, 2, 1, (256, 16, 6)), ("gru", 256, 2, 8, (512, 16, 3)),
                                                  ("lstm", 128, 3, 2, (256, 16, 4, True)), ("rnn", 64, 2, 4, (256, 2, 4))])
def test_each_sum_reaches_its_gate_row_after_the_transposing_shuffle(cell, H, n_l, batch, cfg):
    """The GPU's dot sums (dots.py; the CPU twin meets in gs directly): every (part, row, batch
    row) has its own slot among a lane's held sums (all batch rows live where 32 padded sums
    hold them, else one batch row at a time, and then the input part runs before the wait);
    after the transposing shuffle the lane sums_to_gs picks holds its slot's whole sum, and
    `sum_part`, `sum_gate_row`, `sum_row` name where it belongs."""
    from tir_templates.wavefront.layout import StackLayout
    specs = [CellSpec(cell, H, H, node=f"l{l}", linear_before_reset=cell == "gru") for l in range(n_l)]
    S = StackLayout(specs, StackConfig(*cfg[:3], batch, *cfg[3:]))
    rng = np.random.default_rng(batch)
    for layer in range(n_l):
        live = S.live(layer)
        assert live == (S.LANE or S.PARTS[layer] * S.RPG * batch <= 32)
        rows = range(batch) if live else [0]
        slots = {S.sum_index(layer, p, q, b): (p, q, b) for p in range(S.PARTS[layer]) for q in range(S.RPG) for b in rows}
        assert len(slots) == S.PARTS[layer] * S.RPG * len(rows) and max(slots) < S.held_sums(layer) <= 32
        partial = np.zeros((32, S.held_sums(layer)))
        partial[:, :len(slots)] = rng.standard_normal((32, len(slots)))
        total = transposed_shuffle(S, layer, partial)
        per = 32 // S.held_sums(layer)
        for lane in range(0, 32, per):
            n = lane // per
            if n < len(slots):
                bi = 7  # a row-by-row step's batch row
                p, q, b = slots[n]
                assert (S.sum_part(layer, n), S.sum_gate_row(layer, n), S.sum_row(layer, n, bi)) == (p, q, b if live else bi)
                assert total[lane] == pytest.approx(partial[:, n].sum(), rel=1e-9, abs=1e-9)
                assert S.sum_lane(layer, n) == lane
                assert all(S.held_sum(layer, lane + k) == n for k in range(per))


def test_plan_gives_each_layer_the_smallest_cluster_that_holds_it():
    specs = [CellSpec("lstm", 256, 256, node=f"l{l}") for l in range(3)]
    cfg = plan_stack(specs, 1, 132)  # [W | R] of 1024 rows x 512 columns: 16 CTAs of 8 warps, 128 weights a lane
    assert (cfg.cluster, cfg.threads, cfg.rows_per_group, cfg.batch_chunk) == (16, 256, 8, 1)
    assert plan_stack([CellSpec("lstm", 128, 128)] * 3, 1, 132).cluster == 4  # the char-RNN's layers, 8 warps
    with pytest.raises(UnsupportedStack, match="more than the GPU's"):
        plan_stack(specs, 1, 40)
    with pytest.raises(UnsupportedStack, match="cluster of 16"):
        plan_stack([CellSpec("lstm", 1024, 1024)] * 2, 1, 132)
    with pytest.raises(UnsupportedStack, match="static batches"):
        plan_stack(specs, None, 132)
    big = plan_stack(specs, 17, 132)  # 17 rows do not fit one tile's shared memory: two tiles of 9 (96 CTAs)
    assert (big.batch_tiles, big.batch_chunk) == (2, 9)
    with pytest.raises(UnsupportedStack, match="the batch in 4 tiles of at most 16 rows, more than the GPU's 132"):
        plan_stack(specs, 64, 132)
    with pytest.raises(UnsupportedStack, match="batch 300 in 16 tiles or fewer leaves more than 16 rows a tile"):
        plan_stack([CellSpec("lstm", 64, 64)] * 2, 300, 132)
    with pytest.raises(UnsupportedStack, match="at least one row"):
        plan_stack([CellSpec("lstm", 64, 64)] * 2, 0, 132)
    with pytest.raises(UnsupportedStack, match="linear_before_reset=0"):
        plan_stack([CellSpec("gru", 64, 64)] * 2, 1, 132)
    with pytest.raises(UnsupportedStack, match="2 to 4 layers"):
        plan_stack([CellSpec("rnn", 64, 64)] * 5, 1, 132)
    assert plan_stack([CellSpec("lstm", 64, 64, dtype="float16")] * 2, 1, 132).cluster == 2
    assert plan_stack([CellSpec("lstm", 64, 64, dtype="bfloat16")] * 2, 1, 132).cluster == 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("cell,H,n_l,batch,dtype", [("lstm", 256, 3, 1, "float32"), ("gru", 256, 2, 8, "float32"),
                                                    ("lstm", 128, 3, 1, "float32"), ("gru", 256, 2, 1, "float32"),
                                                    ("lstm", 256, 3, 1, "float16"), ("gru", 256, 2, 1, "bfloat16")])
def test_cuda_compiles_without_spills(cell, H, n_l, batch, dtype, tmp_path):
    """Clusters (and the ticket's distributed shared memory) need sm_90. (LSTM H=256 at B >= 10
    spills: its weights take 64 of a thread's 128 registers, and a step's loads 2 a batch row.)
    A 16-bit stack adds a rounding of each input word and 16-bit stores of Y."""
    arch = "sm_90"
    specs = [CellSpec(cell, H, H, node=f"l{l}", linear_before_reset=cell == "gru", dtype=dtype) for l in range(n_l)]
    func = stack_kernel(specs, plan_stack(specs, batch, 132))
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                      target=tvm.target.Target({"kind": "cuda", "arch": arch}))
    src = tmp_path / "k.cu"
    src.write_text(lib.mod.imports[0].inspect_source())
    res = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(src)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert max(int(m) for m in re.findall(r"(\d+) bytes spill stores", res.stderr)) == 0


@pytest.mark.parametrize("cell,H,n_l,batch", [("lstm", 256, 3, 10), ("gru", 256, 2, 8), ("lstm", 128, 3, 1),
                                              ("rnn", 32, 2, 3)])
def test_cluster_sends_every_unit_to_every_peer_once(cell, H, n_l, batch):
    """The GPU's exchange of a layer's h(t) inside its cluster (the CPU twin reads it stamped
    instead): each CTA's 16-byte stores reach every peer, never itself, once for every (batch
    row, own unit), where the peer keeps that unit; each CTA receives RECV_BYTES a step."""
    from tir_templates.wavefront.layout import StackLayout
    specs = [CellSpec(cell, H, H, node=f"l{l}", linear_before_reset=cell == "gru") for l in range(n_l)]
    S = StackLayout(specs, plan_stack(specs, batch, 132))
    for layer in range(n_l):
        got = {}
        for c in range(S.C):
            for tx in range(S.NT):
                for k in range((S.SENDS + S.NT - 1) // S.NT):
                    if S.sends(tx, k):
                        peer, row, col = S.send(layer, c, tx, k)
                        assert peer != c and col % 4 == 0
                        for v in range(4):
                            key = (peer, row, col + v - S.XK[layer] * 32)
                            assert key not in got
                            got[key] = c
        want = {(p, b, j): j // S.TW for p in range(S.C) for b in range(batch) for j in range(H) if j // S.TW != p}
        assert got == want
        assert S.RECV_BYTES == 4 * sum(1 for key in got if key[0] == 0)



def test_early_launch_waits_before_the_ticket_and_the_zeroing_waits_for_the_gemm():
    """Launched early, the layers' kernel must not draw a ticket, read a stamp or read layer 0's
    GEMM before the zeroing kernel has finished, and the zeroing kernel must not finish before the
    GEMM has: out of this order a cluster would read the last call's stamps or rows (silently
    wrong). The zeroing kernel lets the layers' kernel launch before it zeroes anything."""
    specs = [CellSpec("lstm", 64, 64, node=f"l{l}") for l in range(2)]
    func = stack_kernel(specs, plan_stack(specs, 4, 132)).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    src = lib.mod.imports[0].inspect_source()

    def body(name):  # a kernel's definition, from its opening brace to its closing one
        start = re.search(rf"__global__ void __launch_bounds__\(\d+\) {name}\([^)]*\) {{", src).end()
        return src[start:src.index("\n}\n", start)]

    zeroing, layers = body("main_kernel"), body("main_kernel_1")
    assert zeroing.index("prnn_griddep_launch(") < zeroing.index("ws_ptr[") < zeroing.index("0x0p+0f")
    assert zeroing.rindex("0x0p+0f") < zeroing.rindex("prnn_griddep_wait(")
    assert layers.index("prnn_griddep_wait(") < layers.index("prnn_cluster_ticket(") < layers.index("xw_ptr[")
