"""`tune` with the shipped GPU models, offline, on recorded sweeps of matrices they never saw.

    python benchmarks/gpu_tune_eval.py --data 'data/gpu_h200_wide_{op}' --out docs/results/gpu_model
        [--ops spmm sddmm] [--searches adaptive oneshot] [--pretrained-root DIR] [--random-draws 200]

For each op, the shipped model (`load_pretrained(op, "gpu")`) and the matrices of the sweep
dataset that are neither its training nor its validation matrices (the ``split.json``
beside the model): the real `tuning.tune` runs on a `ReplayBackend` of the sweep (every
config's recorded time) with its defaults, once per search strategy of ``--searches``
(`cognate_tvm.tuning.search`; the first is `tune`'s default); it chooses the fastest config it
measured. Each number is a geomean over the held-out matrices of the swept best time / the
time of:

- ``model top-1`` / ``model top-5``: the model's first-ranked config / the fastest of its first five;
- ``tune (<search>)``: the config `tune` chose with that search strategy (with the mean number of
  configs it measured, the baseline included);
- ``random, same measurements (<search>)``: the fastest of the baseline and as many random others
  as `tune` measured beyond it on that matrix; ``random-48``: of the baseline and 47 others
  (each the mean over ``--random-draws`` seeded draws);
- ``best fixed config``: the first of the model's best fixed configs (chosen on its training
  and validation matrices), alone;
- ``oracle``: the swept best (1 by definition).

Writes ``gpu_tune_eval.json``, ``gpu_tune_eval.md`` and ``gpu_tune_eval.png`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from cognate_tvm.tuning import search as search_strategies
from cognate_tvm import tuning
from cognate_tvm.backends.replay import ReplayBackend
from cognate_tvm.data import load_frame
from cognate_tvm.metrics import geomean
from cognate_tvm.model.pretrained import PRETRAINED_DIR, load_pretrained, pretrained_path
from cognate_tvm.space import create as create_space
from cognate_tvm.sweeps import load_sweep_groups
from common import figure

PLATFORM = "gpu"
SPLIT_FILE = "split.json"
TOP_K = 5


def default_searches() -> list[str]:
    """Every search strategy, `tune`'s default first."""
    default = search_strategies.DEFAULT_STRATEGY
    return [default] + sorted(set(search_strategies.STRATEGIES) - {default})


class Row(NamedTuple):
    """One reported number: its summary key and title; `search` for the rows of one search strategy
    (their measurement count is that strategy's mean), else `measured`, a fixed count."""
    key: str
    title: str
    search: str | None = None
    measured: str = ""


def rows_of(searches: Sequence[str]) -> list[Row]:
    """Each reported number, in table order."""
    per_search = [row for s in searches for row in (Row(f"tune_{s}", f"tune ({s})", s),
                                                   Row(f"random_same_{s}", f"random, same measurements ({s})", s))]
    return ([Row("top1", "model top-1", measured="0"), Row("top5", f"model top-{TOP_K}", measured="0")] + per_search
            + [Row("random48", "random-48 (baseline + 47)", measured="48"),
               Row("fixed", "best fixed config", measured="0"), Row("oracle", "oracle", measured="all")])


def random_best(times: np.ndarray, baseline: int, count: int, draws: int, seed: int) -> float:
    """Mean over seeded draws of (swept best / the fastest of the baseline and `count` random others)."""
    rng = np.random.default_rng(seed)
    others = np.array([i for i in range(len(times)) if i != baseline])
    best = np.nanmin(times)
    picks = [min(times[baseline], np.nanmin(times[rng.choice(others, size=count, replace=False)]))
             for _ in range(draws)]
    return float(np.mean(best / np.array(picks)))


def evaluate_op(op: str, data: str, root: Path, draws: int,
                searches: Sequence[str] = (search_strategies.DEFAULT_STRATEGY,)) -> dict:
    """Per-matrix fractions of the swept best and their geomeans, on the held-out matrices."""
    space = create_space(PLATFORM, op)
    model_dir = pretrained_path(op, PLATFORM, root=root)
    seen = json.loads((model_dir / SPLIT_FILE).read_text())
    groups = [g for g in load_sweep_groups(data, op=op, platform=PLATFORM)
              if g.name not in set(seen["finetune"]) | set(seen["validation"])]
    backend = ReplayBackend.from_frame(load_frame(data), platform=PLATFORM)
    model = load_pretrained(op, PLATFORM, root=root)
    fixed = model.fixed_configs(space)[0]
    baseline = space.baseline()
    rows = []
    for n, g in enumerate(groups):
        times = {c: float(t) for c, t in zip(g.configs, g.times_ms)}
        best = min(times.values())
        ranked = model.rank(g.matrix, space.candidates(None), space=space, feat=g.feat)
        array = np.array([times[c] for c in g.configs])
        row = {"matrix": g.name, "nnz": int(g.matrix.nnz), "best_ms": best, "top1": best / times[ranked[0]],
               "top5": best / min(times[c] for c in ranked[:TOP_K]), "fixed": best / times[fixed],
               "random48": random_best(array, g.configs.index(baseline), 47, draws, n), "oracle": 1.0}
        for s in searches:
            tuned = tuning.tune(op, g.matrix, backend=backend, feat=g.feat,
                                options=tuning.TuneOptions(pretrained_root=root, name=g.name, search=s))
            measured = len({m.config for m in tuned.measured})
            row.update({f"tune_{s}": best / times[tuned.chosen.config], f"measured_{s}": measured,
                        f"random_same_{s}": random_best(array, g.configs.index(baseline), measured - 1, draws, n),
                        f"chosen_{s}": tuned.chosen.config.to_dict(), f"notes_{s}": tuned.notes})
        rows.append(row)
        logging.info("%s %s: top-1 %.3f %s fixed %.3f", op, g.name, row["top1"],
                     " ".join(f"tune ({s}) {row[f'tune_{s}']:.3f} ({row[f'measured_{s}']} measured)"
                              for s in searches), row["fixed"])
    summary = {row.key: geomean([r[row.key] for r in rows]) for row in rows_of(searches)}
    for s in searches:
        summary[f"min_tune_{s}"] = float(min(r[f"tune_{s}"] for r in rows))
        summary[f"mean_measured_{s}"] = float(np.mean([r[f"measured_{s}"] for r in rows]))
    return {"op": op, "model": str(model_dir), "held_out": len(rows), "fixed_config": fixed.to_dict(),
            "searches": list(searches), "summary": summary, "rows": rows}


def markdown(results: Sequence[dict], command: str) -> str:
    """One row per op and reported number: the geomean, and for `tune` the configs it measured and
    its worst matrix."""
    lines = ["# `tune` with the shipped GPU models on held-out H200 sweeps (replayed)", "", f"`{command}`", "",
             "Geomean over the held-out matrices of (swept best time / the time of the config); "
             "`tune` runs with its defaults but the search strategy on a backend that replays the recorded "
             "sweep; configs measured count the baseline.", "",
             "| op | held-out matrices | method | configs measured (mean) | / swept best | worst matrix |",
             "|---|---|---|---|---|---|"]
    for r in results:
        s = r["summary"]
        for row in rows_of(r["searches"]):
            count = row.measured or f"{s[f'mean_measured_{row.search}']:.1f}"
            worst = f"{s[f'min_tune_{row.search}']:.3f}" if row.key == f"tune_{row.search}" else ""
            lines.append(f"| {r['op']} | {r['held_out']} | {row.title} | {count} | {s[row.key]:.3f} | {worst} |")
    return "\n".join(lines) + "\n"


def plot(results: Sequence[dict], path: Path) -> None:
    """Each row's geomean fraction of the swept best, a bar per op."""
    rows = rows_of(results[0]["searches"])
    width = 0.8 / len(results)
    x = np.arange(len(rows))
    with figure(path, figsize=(9, 3.8), dpi=110) as (_, ax):
        for n, r in enumerate(results):
            values = [r["summary"][row.key] for row in rows]
            bars = ax.bar(x + (n - (len(results) - 1) / 2) * width, values, width,
                          label=f"{r['op']} ({r['held_out']} held-out matrices)")
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.set_xticks(x, [row.title for row in rows], rotation=20, ha="right", fontsize=8)
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("swept best / time (geomean)")
        ax.set_title("tune with the shipped GPU models on held-out sweeps (replayed)")
        ax.legend(fontsize=8, loc="lower left")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the GPU sweep dataset ('{op}' is replaced)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ops", nargs="+", choices=("spmm", "sddmm"), default=["spmm", "sddmm"])
    parser.add_argument("--pretrained-root", type=Path, default=None)
    parser.add_argument("--random-draws", type=int, default=200)
    parser.add_argument("--searches", nargs="+", choices=sorted(search_strategies.STRATEGIES),
                        default=default_searches(),
                        help="search strategies `tune` runs with, side by side (default: all, the default first)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = args.pretrained_root or PRETRAINED_DIR
    results = [evaluate_op(op, str(args.data).format(op=op), root, args.random_draws, args.searches)
               for op in args.ops]
    command = "python benchmarks/gpu_tune_eval.py " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_tune_eval.json").write_text(json.dumps({"command": command, "results": results}, indent=1))
    text = markdown(results, command)
    (args.out / "gpu_tune_eval.md").write_text(text)
    plot(results, args.out / "gpu_tune_eval.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
