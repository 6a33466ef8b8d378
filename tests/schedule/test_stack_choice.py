"""wavefront="auto": the stack cost model (schedule/stack_cost.py) against every stack measured with
the current wavefront kernel, the stack records of a tuning log (schedule/stack_log.py), and what
compile() and report() make of them."""
from __future__ import annotations

import json
import pathlib

import pytest
import tvm

import persist_rnn
from persist_rnn.errors import PersistRNNError
from persist_rnn.schedule import stack_log, tuning_log
from persist_rnn.schedule.gpu import gpu_model
from persist_rnn.schedule.planner import choose
from persist_rnn.schedule.stack_choice import choose_stack, ranked_configs
from persist_rnn.schedule.stack_cost import FUSE_MARGIN, stack_us
from persist_rnn.bench.layer_models import stacked_layers_model
from tir_templates.config import Config
from tir_templates.spec import CellSpec
from tir_templates.wavefront.plan import StackConfig, plan_stack, stack_configs

SM90 = {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024, "thread_warp_size": 32,
        "max_shared_memory_per_block": 49152}
DATA = pathlib.Path(__file__).resolve().parents[2] / "docs" / "data"
#: every `bench --parts stacks` run of the wavefront kernel since it exchanges h in its clusters, each
#: row tagged with its run (H200 and H100; later runs time faster versions of the kernel): the
#: choices must hold for each version
MEASURED = "wavefront-stacks-measured.jsonl"
#: measured ratios this close to 1 are ties: either choice is as good
TIE = 1.1


def _measured_stacks():
    rows = [r for r in map(json.loads, (DATA / MEASURED).read_text().splitlines()) if r.get("part") == "stack"]
    assert len(rows) >= 50, f"{MEASURED}: {len(rows)} stack rows"
    return rows


def _spec(cell: str, hidden: int) -> CellSpec:
    return CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU")


def _choice(cell, hidden, layers, batch, steps=100, config=None):
    """(fuse, wavefront us, per-layer us) as a compile without a GPU or log decides (the cost model's
    per-layer configs; the wavefront at `config`, else the cost model's best of the config space)."""
    spec = _spec(cell, hidden)
    layer_cfg = choose(spec, tvm.target.Target(SM90), batch, measure=False).config
    configs = [StackConfig(**config)] if config else stack_configs([spec] * layers, batch, 132)
    c = choose_stack([spec] * layers, configs, [layer_cfg] * layers, "sm_90", batch, steps)
    return c.fuse, c.wavefront_us, c.per_layer_us


@pytest.mark.parametrize("row", _measured_stacks(), ids=lambda r: f"run{r['run']}-{r['cell']}{r['hidden']}x{r['layers']}-B{r['batch']}")
def test_the_choice_agrees_with_every_measured_stack(row):
    """Where the wavefront measured more than 10% faster, auto fuses; more than 10% slower, it
    keeps a kernel a layer (GPU runs of `persist-rnn bench --parts stacks`)."""
    measured = row["per_layer_ms"] / row["ours_ms"]
    fuse, _, _ = _choice(row["cell"], row["hidden"], row["layers"], row["batch"], row["seq_len"], row["config"])
    if measured >= TIE:
        assert fuse, f"measured {measured:.2f}x faster fused"
    elif measured <= 1 / TIE:
        assert not fuse, f"measured {1 / measured:.2f}x slower fused"


def test_batch_makes_the_wavefront_compute_bound():
    """At B=1 a 3-layer LSTM stack is predicted faster fused; at B=10 every layer's [W | R] dot on
    its 16 SMs costs more than a kernel a layer saves (docs/design.md, *The layer wavefront*)."""
    one = _choice("LSTM", 256, 3, 1)
    ten = _choice("LSTM", 256, 3, 10)
    assert one[0] and one[2] >= FUSE_MARGIN * one[1]
    assert not ten[0] and ten[1] > ten[2]


def test_the_slowest_layer_sets_the_pace():
    spec = _spec("LSTM", 128)
    cfg = plan_stack([spec] * 3, 1, 132)
    layer_cfg = Config(8, 8, 1, 1)
    two = stack_us([spec] * 2, plan_stack([spec] * 2, 1, 132), [layer_cfg] * 2, gpu_model("sm_90"), 1, 100)
    three = stack_us([spec] * 3, cfg, [layer_cfg] * 3, gpu_model("sm_90"), 1, 100)
    assert three[0] == pytest.approx(two[0] * 102 / 101, rel=1e-9)  # layers 1 and 2 alike: one more step
    assert three[1] == pytest.approx(two[1] * 1.5)


def _measured_record(log, cell, hidden, layers, batch, lowering):
    specs = [_spec(cell, hidden)] * layers
    stack_log.append(str(log), stack_log.StackRecord(stack_log.stack_workload(specs, batch, "sm_90"), lowering,
                                                     100.0, 200.0, "measured"))


def test_auto_fuses_where_the_model_or_a_measured_record_says(tmp_path):
    model, _ = stacked_layers_model("LSTM", 128, 3, 100, 1)
    target = tvm.target.Target(SM90)
    report = persist_rnn.compile(model, target, measure=False).report()
    assert [r.lowering for r in report] == ["wavefront"] * 3
    assert report[0].source == "cost_model" and "the cost model's choice" in report[0].line()
    log = tmp_path / "log.jsonl"
    _measured_record(log, "LSTM", 128, 3, 1, "per_layer")
    apart = persist_rnn.compile(model, target, measure=False, tuning_log=str(log)).report()
    assert [r.lowering for r in apart] == ["persistent"] * 3
    assert all("own kernel: the tuning log's measured choice: 200 us" in r.line() for r in apart)
    wide, _ = stacked_layers_model("LSTM", 256, 3, 20, 10)
    kept = persist_rnn.compile(wide, target, measure=False).report()
    assert [r.lowering for r in kept] == ["persistent"] * 3 and "predicted" in kept[0].stack_reason
    _measured_record(log, "LSTM", 256, 3, 10, "wavefront")
    forced = persist_rnn.compile(wide, target, measure=False, tuning_log=str(log)).report()
    assert [r.lowering for r in forced] == ["wavefront"] * 3 and forced[0].source == "tuning_log"


def test_wavefront_takes_on_off_and_auto_only():
    model, _ = stacked_layers_model("LSTM", 64, 2, 4, 1)
    with pytest.raises(PersistRNNError, match="wavefront='sometimes'"):
        persist_rnn.compile(model, tvm.target.Target(SM90), measure=False, wavefront="sometimes")
    on = persist_rnn.compile(model, tvm.target.Target(SM90), measure=False, wavefront="on").report()
    assert [r.lowering for r in on] == ["wavefront"] * 2 and on[0].source == "asked"


def test_the_cli_takes_auto_on_and_off(tmp_path):
    """`--wavefront` alone is `on`; the default is `auto`; `inspect` says whose choice it was."""
    import onnx
    from click.testing import CliRunner

    from persist_rnn.cli import main

    model, _ = stacked_layers_model("LSTM", 128, 3, 20, 1)
    onnx.save(model, tmp_path / "stack.onnx")
    first = {}
    for name, extra in (("default", []), ("flag", ["--wavefront"]), ("off", ["--wavefront", "off"])):
        res = CliRunner().invoke(main, ["inspect", str(tmp_path / "stack.onnx"), "--target", json.dumps(SM90), *extra])
        assert res.exit_code == 0, res.output
        first[name] = res.output.splitlines()[0]
    assert "wavefront" in first["default"] and "the cost model's choice" in first["default"]
    assert "wavefront, early launch, layer 1 of 3 stacked" in first["flag"] and "[asked]" in first["flag"]
    assert "own kernel: the layer wavefront is off" in first["off"]
    bad = CliRunner().invoke(main, ["inspect", str(tmp_path / "stack.onnx"), "--wavefront", "maybe"])
    assert bad.exit_code != 0 and "maybe" in bad.output


def test_stack_records_share_the_tuning_log(tmp_path):
    """Layer records and stack records in one file: each reader takes its own, merge keeps both,
    a measured record wins over the cost model's, and a bad one is named."""
    log, out = tmp_path / "a.jsonl", tmp_path / "out.jsonl"
    spec = _spec("GRU", 64)
    tuning_log.append(str(log), tuning_log.Record(tuning_log.workload(spec, 1, "sm_90"), Config(8, 8, 1, 1), 1.0, "measured"))
    wl = stack_log.stack_workload([spec] * 2, 1, "sm_90")
    stack_log.append(str(log), stack_log.StackRecord(wl, "wavefront", 1.0, 2.0, "measured"))
    stack_log.append(str(log), stack_log.StackRecord(wl, "per_layer", 3.0, 2.0, "cost_model"))
    assert len(tuning_log.read(str(log))) == 1 and len(stack_log.read(str(log))) == 2
    assert stack_log.lookup(str(log), wl).lowering == "wavefront"
    assert stack_log.lookup(str(log), stack_log.stack_workload([spec] * 3, 1, "sm_90")) is None
    assert tuning_log.merge([str(log)], str(out)) == 1 and stack_log.merge_into([str(log)], str(out)) == 1
    assert [r.lowering for r in stack_log.read(str(out))] == ["wavefront"] and len(tuning_log.read(str(out))) == 1
    bad = json.loads(stack_log.read(str(out))[0].to_json()) | {"lowering": "sideways"}
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(PersistRNNError, match="bad.jsonl:1: lowering 'sideways'"):
        stack_log.read(str(tmp_path / "bad.jsonl"))


def test_tune_times_the_model_both_ways_and_logs_each_stack(tmp_path):
    """stack_tuning on llvm (the timing path is the GPU's, through TVM's VM timer): every stack the
    wavefront fused in the module gets a measured record of the two whole-model times, which a
    later compile with the log follows; a model without static float inputs is not timed."""
    from tvm import relax

    from persist_rnn.frontend import from_onnx
    from persist_rnn.stack_tuning import fusable_stacks, random_feeds, tune_stacks
    from persist_rnn.transform.layer_wavefront import fuse_stacks

    model, _ = stacked_layers_model("LSTM", 32, 2, 6, 2)
    mod = fuse_stacks(relax.transform.FoldConstant()(from_onnx(model)), "llvm", 132, emulate=True)
    assert [(len(specs), batch) for specs, batch in fusable_stacks(mod)] == [(2, 2)]
    log = str(tmp_path / "log.jsonl")
    rows = tune_stacks(model, mod, "llvm", log, "sm_90", dev=tvm.cpu(), top_k=2)
    assert len(rows) == 1 and rows[0]["lowering"] in ("wavefront", "per_layer") and rows[0]["per_layer_us"] > 0
    assert len(rows[0]["configs_timed"]) == 2 and rows[0]["wavefront_us"] == min(rows[0]["configs_timed"].values())
    rec = stack_log.lookup(log, stack_log.stack_workload([_spec("LSTM", 32)] * 2, 2, "sm_90"))
    assert rec.source == "measured" and rec.wavefront_us == rows[0]["wavefront_us"] and rec.config == rows[0]["config"]
    report = persist_rnn.compile(model, tvm.target.Target(SM90), measure=False, tuning_log=log).report()
    assert all("the tuning log's measured choice" in r.stack_reason for r in report)
    with_lengths, _ = stacked_layers_model("LSTM", 32, 2, 6, 2, lengths=True)
    assert random_feeds(persist_rnn.compile(with_lengths, "llvm").inputs) is None


def _config_name(name: str) -> dict:
    """"w8c16r4" (stack_cands' column) as a StackConfig's fields."""
    warps, rest = name[1:].split("c")
    cluster, rows = rest.split("r")
    return {"threads": 32 * int(warps), "cluster": int(cluster), "rows_per_group": int(rows)}


def test_the_cost_model_ranks_the_fastest_measured_config_first():
    """Stacks timed at several configs of their space on the H100 (docs/data/stack-configs-h100.jsonl:
    3 x LSTM H=128, 3 x LSTM H=256, 2 x GRU H=256, B=1): the model's first config of the whole space
    is the fastest timed."""
    rows = [json.loads(line) for line in (DATA / "stack-configs-h100.jsonl").read_text().splitlines()]
    assert rows
    for row in rows:
        spec = _spec(row["cell"], row["hidden"])
        specs = [spec] * row["layers"]
        timed = {k: v for k, v in row["ms"].items() if k.startswith("w")}
        space = stack_configs(specs, row["batch"], 132)
        names = [{k: v for k, v in c.as_dict().items() if k != "batch_chunk"} for c in space]
        assert all(_config_name(name) in names for name in timed)  # each timed config is in the space
        first = ranked_configs(specs, space, "sm_90")[0]
        fastest = _config_name(min(timed, key=timed.get))
        assert {k: v for k, v in first.as_dict().items() if k != "batch_chunk"} == fastest


def test_a_logged_config_is_built_and_reported(tmp_path):
    """A stack record's config is what compile builds (the tuning log's choice over the model's),
    the report names it, and a record with a malformed config is refused by name."""
    model, _ = stacked_layers_model("LSTM", 128, 3, 20, 1)
    target = tvm.target.Target(SM90)
    modelled = persist_rnn.compile(model, target, measure=False, wavefront=True).report()
    assert modelled[0].config["cluster"] == 16 and "the cost model's fastest config" in modelled[0].line()
    log = tmp_path / "log.jsonl"
    specs = [_spec("LSTM", 128)] * 3
    rule = plan_stack(specs, 1, 132)
    stack_log.append(str(log), stack_log.StackRecord(stack_log.stack_workload(specs, 1, "sm_90"), "wavefront",
                                                     90.0, 180.0, "measured", config=rule.as_dict()))
    logged = persist_rnn.compile(model, target, measure=False, tuning_log=str(log)).report()
    assert [r.lowering for r in logged] == ["wavefront"] * 3 and logged[0].config == rule.as_dict()
    assert "8 warps x 4 CTAs a layer, the tuning log's measured config" in logged[0].line()
    assert "8 warps x 4 CTAs a layer" in stack_log.describe(stack_log.read(str(log))[0])
    bad = json.loads(stack_log.read(str(log))[0].to_json()) | {"config": {"threads": 256}}
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(PersistRNNError, match="bad.jsonl:1: a stack record's config"):
        stack_log.read(str(tmp_path / "bad.jsonl"))


def test_a_logged_lane_config_is_built_and_reported(tmp_path):
    """The shipped log's measured record for 2 x GRU H=256 at B=1 names a config with lane updates:
    compile builds it fused, the report names it; a record whose lane_updates is not
    true is refused (a config without lane updates does not name them)."""
    model, _ = stacked_layers_model("GRU", 256, 2, 20, 1)
    report = persist_rnn.compile(model, tvm.target.Target(SM90), measure=False,
                                 tuning_log="docs/data/tune-h100.jsonl").report()
    assert [r.lowering for r in report] == ["wavefront"] * 2 and report[0].config.get("lane_updates") is True
    assert "8 warps x 16 CTAs a layer, lane updates, the tuning log's measured config" in report[0].line()
    rec = [r for r in stack_log.read("docs/data/tune-h100.jsonl") if r.config and r.config.get("lane_updates")][-1]
    bad = json.loads(rec.to_json())
    bad["config"]["lane_updates"] = False
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(PersistRNNError, match="lane_updates: true and batch_tiles"):
        stack_log.read(str(tmp_path / "bad.jsonl"))
    for tiles in (1, True, 2.0):  # one tile is the config without batch_tiles
        bad["config"] = {**json.loads(rec.to_json())["config"], "batch_tiles": tiles}
        (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
        with pytest.raises(PersistRNNError, match="an integer above 1"):
            stack_log.read(str(tmp_path / "bad.jsonl"))


def test_tune_names_each_config_it_builds(tmp_path):
    """tune's fused build at the k-th config is compiled from a log copy that names that config for
    each stack (stack_tuning._log_naming): the layer records stay, the stack records are replaced."""
    from persist_rnn.stack_tuning import _log_naming

    specs = [_spec("LSTM", 128)] * 3
    log = tmp_path / "log.jsonl"
    tuning_log.append(str(log), tuning_log.Record(tuning_log.workload(specs[0], 1, "sm_90"), Config(8, 8, 1, 1), 1.0,
                                                  "measured"))
    stack_log.append(str(log), stack_log.StackRecord(stack_log.stack_workload(specs, 1, "sm_90"), "per_layer", 2.0,
                                                     1.0, "measured"))
    space = stack_configs(specs, 1, 132)
    path = _log_naming(str(log), [(specs, 1)], [space[-1]], "sm_90", "fp32", str(tmp_path))
    assert len(tuning_log.read(path)) == 1
    rec = stack_log.lookup(path, stack_log.stack_workload(specs, 1, "sm_90"))
    assert rec.lowering == "wavefront" and rec.config == space[-1].as_dict()
    choice = choose_stack(specs, space, [Config(8, 8, 1, 1)] * 3, "sm_90", 1, 100, tuning_log_path=path, asked=True)
    assert choice.config == space[-1] and choice.config_source == "tuning_log"
