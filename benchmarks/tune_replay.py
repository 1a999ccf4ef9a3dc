"""Search strategies of `tune` compared offline, on recorded sweeps replayed (`backends.replay`).

Every method picks among the configs recorded on a matrix and scores the recorded
time of its pick as a fraction of the matrix's recorded best (1.0: it found the
best); nothing is timed, so the comparison is free of noise. Methods:

- ``oneshot``: `tuning.tune(search="oneshot")`, one ranking, one batch (baseline + 5);
- ``adaptive``: `tuning.tune()`'s default, rounds of measure -> fine-tune -> re-rank
  (baseline + 7), and any ``adaptive:KEY=VALUE,...`` variant given with --variant;
- ``budget``: `tuning.tune(search="oneshot", budget=N)` (baseline + N sampled + 5);
- ``random_same``: the baseline and as many random configs as adaptive measured
  (expected over --draws seeded draws);
- ``random48``: the baseline and 48 random configs (the same, expected);
- ``best_fixed``: the config with the lowest mean ln(time / best) over the other
  evaluated matrices that recorded it (leave one out), when this matrix recorded it;
- ``train_fixed``: the model's first best fixed config (from its training data).

Data: a CPU dataset (``--data DIR``, matrices rebuilt from ``--corpus``; only the
matrices of the corpus split named by ``--split``, by default the test split,
which the shipped models never trained on) or the H200 sweeps (``--gpu-sweep
FILE``: every config of the GPU space on each matrix, matrices rebuilt from the
file's corpus arguments; the GPU has no shipped model, so the CPU model ranks
zero-shot).

    python benchmarks/tune_replay.py --op spmm --data data/cpu_spmm_2t --corpus synthetic:300:2026 \\
        --out docs/results/tune_adaptive/cpu_spmm_2t
    python benchmarks/tune_replay.py --op spmm --gpu-sweep PATH/gpu_sweep.json --out docs/results/tune_adaptive/gpu
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from cognate_tvm import space as spaces, tuning
from cognate_tvm.model.loading import load_shipped_model
from cognate_tvm.backends.replay import ReplayBackend
from cognate_tvm.data import load_frame
from cognate_tvm.matrix import generate_corpus
from cognate_tvm.matrix.corpus import load_corpus
from cognate_tvm.metrics import mean_log_slowdown
from cognate_tvm.tuning.search import Adaptive
from common import SPLITS, save_png, split_part

log = logging.getLogger("tune_replay")


def cpu_workload(args):
    """(backend, {name: matrix} of the CPU dataset's matrices in the chosen split, {name: {config: time}}
    of all its matrices)."""
    frame = pd.concat([load_frame(p) for p in args.data], ignore_index=True)
    frame = frame[frame["op"] == args.op]
    entries = {e.name: e for e in load_corpus(args.corpus, min_rows=args.min_rows, max_rows=args.max_rows)}
    names = split_part(entries, args.split, seed=args.split_seed)
    names = [n for n in names if n in set(frame["matrix"])][:args.matrices]
    tables = {name: dict(zip(part["config"].map(_canonical), part["time_ms"]))
              for name, part in frame.groupby("matrix")}
    return ReplayBackend.from_frame(frame), {n: entries[n].build() for n in names}, tables


def _canonical(text: str) -> str:
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def gpu_workload(args):
    """(backend, {name: matrix}, {name: {config: time}}) of the H200 sweeps' matrices."""
    timings, matrices = {}, {}
    for path in args.gpu_sweep:
        sweep = json.loads(Path(path).read_text())
        a = sweep["args"]
        entries = {e.name: e for e in generate_corpus(a["matrices"], seed=a["seed"], min_rows=a["min_rows"],
                                                      max_rows=a["max_rows"])}
        for row in sweep["rows"][:args.matrices]:
            matrices[row["name"]] = entries[row["name"]].build()
            timings[row["name"]] = {json.dumps(c, sort_keys=True, separators=(",", ":")): t
                                    for c, t in zip(row[args.op]["configs"], row[args.op]["times_ms"])}
        feat = a["feat"]
    backend = ReplayBackend.from_timings(timings, matrices=matrices, op=args.op, feat=feat, platform="gpu")
    return backend, matrices, timings


def variant(spec: str):
    """'adaptive:first=4,per_round=2' -> (label, Adaptive(first=4, per_round=2))."""
    name, _, options = spec.partition(":")
    kwargs = {}
    for item in filter(None, options.split(",")):
        key, _, value = item.partition("=")
        kwargs[key] = None if value == "None" else (value == "True" if value in ("True", "False") else int(value))
    return spec, Adaptive(**kwargs) if name == "adaptive" else None


def run_tune(label, strategy, *, op, matrix, name, backend, model, feat, candidates, budget=0, diversity=None):
    start = time.perf_counter()
    tuned = tuning.tune(op, matrix, backend=backend, feat=feat,
                        options=tuning.TuneOptions(model=copy.deepcopy(model), model_source="shipped", search=strategy,
                                                   candidates=candidates, budget=budget, name=name,
                                                   diversity=diversity))
    chosen = tuned.chosen
    return {f"{label}_ms": None if chosen is None else chosen.time_ms,
            f"{label}_measured": len(tuned.measured), f"{label}_seconds": round(time.perf_counter() - start, 2),
            f"{label}_config": None if chosen is None else chosen.config.to_json()}


def expected_random(times: np.ndarray, baseline_ms: float, k: int, draws: int, rng) -> float:
    """Mean over draws of (best / fastest of the baseline and `k` random configs)."""
    best = np.nanmin(times)
    picks = [min(baseline_ms, np.nanmin(times[rng.choice(len(times), size=min(k, len(times)), replace=False)]))
             for _ in range(draws)]
    return float(np.mean(best / np.asarray(picks)))


def evaluate(args) -> dict:
    backend, matrices, tables = (gpu_workload if args.gpu_sweep else cpu_workload)(args)
    platform_space = spaces.create(backend.platform, args.op)
    model, source, notes = load_shipped_model(args.op, backend.platform, threads=backend.kernel_threads(),
                                                    root=args.pretrained_dir)
    feat = next(iter(backend.recorded))[2]
    strategies = [("oneshot", "oneshot"), ("adaptive", "adaptive")] + [variant(v) for v in args.variant]
    rows = []
    for n, (name, matrix) in enumerate(matrices.items()):
        allowed = set(platform_space.candidates(backend.kernel_threads()))
        recorded = [platform_space.config_from_json(c) for c in backend.recorded_configs(args.op, matrix, feat)]
        candidates = [c for c in recorded if c in allowed]
        times = {r.config: r.time_ms for r in backend.measure(args.op, matrix, candidates, feat)}
        baseline = backend.measure(args.op, matrix, [platform_space.baseline()], feat)[0].time_ms
        best = min(times.values())
        row = {"matrix": name, "rows": matrix.shape[0], "nnz": int(matrix.nnz), "recorded": len(candidates),
               "best_ms": best, "baseline_ms": baseline}
        for label, strategy in strategies:
            row.update(run_tune(label, strategy, op=args.op, matrix=matrix, name=name, backend=backend, model=model,
                                feat=feat, candidates=candidates, diversity=args.diversity))
        row.update(run_tune(f"budget{args.budget}", "oneshot", op=args.op, matrix=matrix, name=name, backend=backend,
                            model=model, feat=feat, candidates=candidates, budget=args.budget, diversity=args.diversity))
        array = np.array(list(times.values()))
        rng = np.random.default_rng([args.seed, n])
        row["random_same"] = expected_random(array, baseline, row["adaptive_measured"] - 1, args.draws, rng)
        row["random48"] = expected_random(array, baseline, 48, args.draws, rng)
        fixed = next(iter(tuning.fixed_candidates(model, platform_space, candidates)), None)
        row["train_fixed_ms"] = times.get(fixed)
        row["best_fixed_ms"] = best_fixed_ms(name, {c.to_json(): t for c, t in times.items()}, tables)
        rows.append(row)
        if args.out is not None:  # kept as it goes: a long run that fails later loses nothing
            with open(args.out / "rows.jsonl", "a") as handle:
                handle.write(json.dumps(row) + "\n")
        log.info("%d/%d %s: %s", n + 1, len(matrices), name,
                 {k: round(best / v, 3) for k, v in row.items() if k.endswith("_ms") and v})
    labels = [label for label, _ in strategies] + [f"budget{args.budget}", "train_fixed", "best_fixed"]
    return {"args": {k: (list(map(str, v)) if isinstance(v, list) else str(v) if isinstance(v, Path) else v)
                     for k, v in vars(args).items()},
            "model": source, "notes": notes, "platform": backend.platform, "threads": backend.kernel_threads(),
            "feat": feat, "matrices": len(rows), "summary": summarise(rows, labels),
            "rows": rows}


def best_fixed_ms(name: str, times: dict, tables: dict) -> float | None:
    """The recorded time on `name` of the config, among those it recorded, with the lowest mean
    ln(time / best) over every other matrix of the data that recorded it (at least 3): leave one out."""
    scores = mean_log_slowdown([t for other, t in tables.items() if other != name], min_tables=3)
    ranked = sorted((c for c in scores if c in times), key=scores.get)
    return times[ranked[0]] if ranked else None


def summarise(rows: list[dict], labels: list[str]) -> dict:
    """Per method: mean, geomean and min of (recorded best / the pick's time), and measurements."""
    out = {}
    # a pick that failed scores 0; a fixed config this matrix did not record is left out
    fractions = {label: [r["best_ms"] / r[f"{label}_ms"] if r[f"{label}_ms"] else 0.0 for r in rows
                         if not (label.endswith("fixed") and r[f"{label}_ms"] is None)]
                 for label in labels}
    fractions.update({label: [r[label] for r in rows] for label in ("random_same", "random48")})
    fractions["baseline"] = [r["best_ms"] / r["baseline_ms"] for r in rows]
    for label, values in fractions.items():
        values = np.asarray(values, dtype=float)
        if not values.size:
            continue  # e.g. no best fixed config of the model among this platform's configs
        measured = [r.get(f"{label}_measured") for r in rows]
        out[label] = {"matrices": len(values),"mean": float(values.mean()), "geomean": float(np.exp(np.log(np.maximum(values, 1e-9)).mean())),
                      "min": float(values.min()), "at_least_0.95": int((values >= 0.95).sum()),
                      "measured": float(np.mean(measured)) if None not in measured else None}
    return out


def markdown(result: dict, command: str) -> str:
    lines = [f"# `tune` search strategies on replayed sweeps: {result['platform']} {result['args']['op']}",
             "", f"`{command}`", "",
             f"{result['matrices']} held-out matrices; model {result['model']} "
             f"({result['threads']} thread(s)); dense width {result['feat']}. Each figure: the recorded best "
             f"time / the pick's recorded time (1.0 = the best recorded config).", "",
             "| method | measurements | mean | geomean | min | matrices >= 0.95 |", "|---|---|---|---|---|---|"]
    for label, s in result["summary"].items():
        measured = "-" if s["measured"] is None else f"{s['measured']:.1f}"
        lines.append(f"| {label} | {measured} | {s['mean']:.3f} | {s['geomean']:.3f} | {s['min']:.3f} | "
                     f"{s['at_least_0.95']}/{s['matrices']} |")
    return "\n".join(lines + [""] + [f"- {n}" for n in result["notes"]]) + "\n"


COMBINED = ("oneshot", "adaptive", "budget8", "random_same", "random48", "best_fixed", "baseline")


def combine(directories: list[Path], out: Path) -> str:
    """One markdown table (``combined.md``) and bar chart (``combined.png``) of several runs' summaries."""
    results = [json.loads((d / "summary.json").read_text()) for d in directories]
    header = "| data | matrices | " + " | ".join(COMBINED) + " |"
    lines = [header, "|" + "---|" * (len(COMBINED) + 2)]
    for d, r in zip(directories, results):
        cells = [f"{r['summary'][m]['mean']:.3f}" if m in r["summary"] else "-" for m in COMBINED]
        lines.append(f"| {d.name} | {r['matrices']} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    (out / "combined.md").write_text(text)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(results)), 4))
    width = 0.8 / len(COMBINED)
    for n, method in enumerate(COMBINED):
        values = [r["summary"].get(method, {}).get("mean", 0.0) for r in results]
        ax.bar(np.arange(len(results)) + (n - (len(COMBINED) - 1) / 2) * width, values, width, label=method)
    ax.set_xticks(np.arange(len(results)), [d.name for d in directories], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("recorded best / pick (mean)")
    ax.set_ylim(0.3, 1.02)
    ax.legend(fontsize=7, ncol=4, loc="lower center")
    fig.tight_layout()
    save_png(fig, out / "combined.png", dpi=120)
    plt.close(fig)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, nargs="+", help="CPU dataset directories (one thread count)")
    source.add_argument("--gpu-sweep", type=Path, nargs="+", help="gpu_sweep.json files of full GPU sweeps")
    source.add_argument("--combine", type=Path, nargs="+",
                        help="--out directories of earlier runs: one table and figure of them all (--op ignored)")
    parser.add_argument("--corpus", default="synthetic:300:2026", help="the corpus spec of --data")
    parser.add_argument("--min-rows", type=int, default=1000)
    parser.add_argument("--max-rows", type=int, default=1_000_000)
    parser.add_argument("--split", choices=SPLITS, default="test")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--matrices", type=int, default=None, help="at most this many matrices (per sweep file)")
    parser.add_argument("--budget", type=int, default=8, help="N of the --budget N method")
    parser.add_argument("--variant", action="append", default=[], help="adaptive:KEY=VALUE,... (repeatable)")
    parser.add_argument("--diversity", type=int, default=None,
                        help="tune's --diversity for every tune run (default: the platform's)")
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pretrained-dir", type=Path, default=None,
                        help="a folder of models laid out as the package's pretrained/ (default: the shipped ones)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("cognate_tvm").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.combine:
        print(combine(args.combine, args.out))
        return 0
    (args.out / "rows.jsonl").unlink(missing_ok=True)
    result = evaluate(args)
    command = "python benchmarks/tune_replay.py " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    result["command"] = command
    (args.out / "summary.json").write_text(json.dumps(result, indent=1))
    (args.out / "summary.md").write_text(markdown(result, command))
    print(markdown(result, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
