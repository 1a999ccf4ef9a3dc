"""`tune` with the shipped GPU models, offline, on recorded sweeps of matrices they never saw.

    python benchmarks/gpu_tune_eval.py --data 'data/gpu_h200_{op}' --out docs/results/gpu_transfer
        [--ops spmm sddmm] [--pretrained-root DIR] [--random-draws 200]

For each op, the shipped model (`load_pretrained(op, "gpu")`) and the matrices of the sweep
dataset that are neither its training nor its validation matrices (the ``split.json``
beside the model): the real `tuner.tune` runs on a `ReplayBackend` of the sweep (every
config's recorded time) with its defaults, whatever its search strategy; it chooses the
fastest config it measured. Each number is a geomean over the held-out matrices of the
swept best time / the time of:

- ``model top-1``: the model's first-ranked config;
- ``tune``: the config `tune` chose (with the mean number of configs it measured);
- ``best fixed config``: the first of the model's best fixed configs (chosen on its training
  and validation matrices), alone;
- ``random, same measurements``: the fastest of the baseline and as many random others as
  `tune` measured beyond it on that matrix; ``random-48``: of the baseline and 47 others
  (each the mean over ``--random-draws`` seeded draws);
- ``oracle``: the swept best (1 by definition).

Writes ``gpu_tune_eval.json``, ``gpu_tune_eval.md`` and ``gpu_tune_eval.png`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from cognate_tvm import tuner
from cognate_tvm.backends.replay import ReplayBackend
from cognate_tvm.data import load_frame
from cognate_tvm.metrics import geomean
from cognate_tvm.model.pretrained import PRETRAINED_DIR, load_pretrained, pretrained_path
from cognate_tvm.space import create as create_space
from cognate_tvm.sweeps import load_sweep_groups

PLATFORM = "gpu"
SPLIT_FILE = "split.json"
ROWS = (("top1", "model top-1"), ("tune", "tune"), ("fixed", "best fixed config"),
        ("random_same", "random, same measurements"), ("random48", "random-48 (baseline + 47)"), ("oracle", "oracle"))


def random_best(times: np.ndarray, baseline: int, count: int, draws: int, seed: int) -> float:
    """Mean over seeded draws of (swept best / the fastest of the baseline and `count` random others)."""
    rng = np.random.default_rng(seed)
    others = np.array([i for i in range(len(times)) if i != baseline])
    best = np.nanmin(times)
    picks = [min(times[baseline], np.nanmin(times[rng.choice(others, size=count, replace=False)]))
             for _ in range(draws)]
    return float(np.mean(best / np.array(picks)))


def evaluate_op(op: str, data: str, root: Path, draws: int) -> dict:
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
        tuned = tuner.tune(op, g.matrix, backend=backend, feat=g.feat, pretrained_root=root, name=g.name)
        top1 = model.rank(g.matrix, space.candidates(None), space=space, feat=g.feat)[0]
        array = np.array([times[c] for c in g.configs])
        measured = len({m.config for m in tuned.measured})
        rows.append({"matrix": g.name, "nnz": int(g.matrix.nnz), "best_ms": best,
                     "top1": best / times[top1], "tune": best / times[tuned.chosen.config],
                     "measured": measured, "fixed": best / times[fixed],
                     "random_same": random_best(array, g.configs.index(baseline), measured - 1, draws, n),
                     "random48": random_best(array, g.configs.index(baseline), 47, draws, n), "oracle": 1.0,
                     "chosen": tuned.chosen.config.to_dict(), "notes": tuned.notes})
        logging.info("%s %s: top-1 %.3f tune %.3f (%d measured) fixed %.3f", op, g.name, rows[-1]["top1"],
                     rows[-1]["tune"], measured, rows[-1]["fixed"])
    summary = {key: geomean([r[key] for r in rows]) for key, _ in ROWS}
    summary["min_tune"] = float(min(r["tune"] for r in rows))
    summary["mean_measured"] = float(np.mean([r["measured"] for r in rows]))
    return {"op": op, "model": str(model_dir), "held_out": len(rows), "fixed_config": fixed.to_dict(),
            "summary": summary, "rows": rows}


def markdown(results: Sequence[dict], command: str) -> str:
    lines = ["# `tune` with the shipped GPU models on held-out H200 sweeps (replayed)", "", f"`{command}`", "",
             "Geomean over the held-out matrices of (swept best time / the time of the config); "
             "`tune` runs with its defaults on a backend that replays the recorded sweep.", "",
             "| op | held-out matrices | configs `tune` measured (mean) | "
             + " | ".join(title for _, title in ROWS) + " | worst tune |",
             "|---|---|---|" + "---|" * (len(ROWS) + 1)]
    for r in results:
        s = r["summary"]
        lines.append(f"| {r['op']} | {r['held_out']} | {s['mean_measured']:.1f} | "
                     + " | ".join(f"{s[k]:.3f}" for k, _ in ROWS) + f" | {s['min_tune']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(results: Sequence[dict], path: Path) -> None:
    """Each row's geomean fraction of the swept best, per op, the goals' lines drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / len(results)
    x = np.arange(len(ROWS))
    for n, r in enumerate(results):
        values = [r["summary"][key] for key, _ in ROWS]
        bars = ax.bar(x + (n - (len(results) - 1) / 2) * width, values, width, label=f"{r['op']} ({r['held_out']} "
                      "held-out matrices)")
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(x, [title for _, title in ROWS], rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("swept best / time (geomean)")
    ax.set_title("tune with the shipped GPU models on held-out sweeps (replayed)")
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the GPU sweep dataset ('{op}' is replaced)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ops", nargs="+", choices=("spmm", "sddmm"), default=["spmm", "sddmm"])
    parser.add_argument("--pretrained-root", type=Path, default=None)
    parser.add_argument("--random-draws", type=int, default=200)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = args.pretrained_root or PRETRAINED_DIR
    results = [evaluate_op(op, str(args.data).format(op=op), root, args.random_draws) for op in args.ops]
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
