"""ONNX's own backend test cases for the ops that surround recurrent layers in real models, run
through `persist_rnn.compile`: each case passes, is refused with a PersistRNNError (or TVM's own
error at import), or is *wrong* (runs, but not ONNX's answer). Wrong must never happen.

    python -m persist_rnn.bench.op_sweep --target llvm --out docs/data/op-sweep-llvm.jsonl
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import warnings

import numpy as np

#: the op types checked (issue 15's list)
OPS = ("Conv", "ConvTranspose", "Pad", "Pow", "Sqrt", "Abs", "Exp", "Log", "Sigmoid", "Tanh", "Relu", "LeakyRelu",
       "Clip", "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization", "MatMul", "Gemm", "Gather",
       "Slice", "Split", "Concat", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "ReduceMean", "ReduceSum",
       "ReduceMax", "Where", "Cast", "Expand", "Tile", "CumSum")


@dataclasses.dataclass
class CaseResult:
    op: str
    case: str
    outcome: str  # "pass" | "refused" | "wrong"
    detail: str = ""


def cases(ops=OPS):
    """(op type, onnx TestCase) of every single-node backend case of `ops`."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collected = collect_testcases()
    for case in collected:
        nodes = case.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in ops and not case.name.endswith("_expanded"):
            yield nodes[0].op_type, case


def _matches(got, want, rtol, atol) -> tuple[bool, str]:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False, f"shape {got.shape} instead of {want.shape}"
    if got.dtype != want.dtype:
        return False, f"dtype {got.dtype} instead of {want.dtype}"
    if want.dtype.kind in "fc":
        ok = np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        return ok, "" if ok else f"max error {float(np.nanmax(np.abs(got.astype('float64') - want))):.3g}"
    ok = np.array_equal(got, want)
    return ok, "" if ok else "values differ"


def run_case(op: str, case, target: str) -> CaseResult:
    import persist_rnn
    from persist_rnn.errors import PersistRNNError

    try:
        compiled = persist_rnn.compile(case.model, target, measure=False)
    except PersistRNNError as err:
        return CaseResult(op, case.name, "refused", str(err).splitlines()[0][:200])
    except Exception as err:  # TVM's importer or build refuses the case
        return CaseResult(op, case.name, "refused", f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}")
    names = [i.name for i in compiled.inputs]
    for inputs, outputs in case.data_sets:
        feeds = dict(zip([i.name for i in case.model.graph.input], inputs))
        try:
            got = compiled.run({n: feeds[n] for n in names})
        except PersistRNNError as err:
            return CaseResult(op, case.name, "refused", str(err).splitlines()[0][:200])
        except Exception as err:
            return CaseResult(op, case.name, "refused", f"at run time: {type(err).__name__}: "
                                                         f"{str(err).strip().splitlines()[-1][:160]}")
        for k, (g, w) in enumerate(zip(got, outputs)):
            ok, why = _matches(g, w, max(case.rtol, 1e-4), max(case.atol, 1e-5))
            if not ok:
                return CaseResult(op, case.name, "wrong", f"output {k}: {why}")
        if len(got) != len(outputs):
            return CaseResult(op, case.name, "wrong", f"{len(got)} outputs instead of {len(outputs)}")
    return CaseResult(op, case.name, "pass")


def sweep(target: str = "llvm", ops=OPS, progress=None) -> list[CaseResult]:
    out = []
    for op, case in cases(ops):
        out.append(run_case(op, case, target))
        if progress is not None:
            progress(out[-1])
    return out


def table(results: dict) -> str:
    """Markdown: op, cases, then pass/refused/wrong per target (`results`: target -> rows)."""
    targets = list(results)
    head = "| op | cases | " + " | ".join(f"{t} pass / refused / wrong" for t in targets) + " |"
    lines = [head, "|---|---|" + "---|" * len(targets)]
    ops = sorted({r.op for rows in results.values() for r in rows})
    for op in ops:
        cells, n = [], 0
        for t in targets:
            rows = [r for r in results[t] if r.op == op]
            n = max(n, len(rows))
            count = lambda o: sum(r.outcome == o for r in rows)
            cells.append(f"{count('pass')} / {count('refused')} / {count('wrong')}")
        lines.append(f"| {op} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--out", required=True, help="JSON lines, one per case")
    parser.add_argument("--ops", default=",".join(OPS))
    args = parser.parse_args(argv)
    from tqdm import tqdm

    bar = tqdm(unit="case")
    with open(args.out, "w") as f:  # a row as each case ends: a sweep cut short keeps what it did

        def record(row):
            f.write(json.dumps(dataclasses.asdict(row)) + "\n")
            f.flush()
            bar.update(1)
        rows = sweep(args.target, tuple(args.ops.split(",")), progress=record)
    bar.close()
    print(table({args.target: rows}))
    for r in rows:
        if r.outcome == "wrong":
            print("WRONG", r.case, r.detail)


if __name__ == "__main__":
    main()
