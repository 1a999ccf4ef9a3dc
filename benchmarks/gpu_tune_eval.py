"""`tune` with the shipped GPU models, offline, on recorded sweeps of matrices they never saw.

    python benchmarks/gpu_tune_eval.py --data 'data/gpu_h200_{op}' --out docs/results/gpu_transfer
        [--ops spmm sddmm] [--pretrained-root DIR] [--random-draws 200]

For each op, the shipped model (`load_pretrained(op, "gpu")`) and the matrices of the sweep
dataset that are neither its fine-tune nor its validation matrices (the ``split.json``
beside the model): the real `tuner.tune` runs on a `ReplayBackend` of the sweep (every
config's recorded time), with its defaults (the baseline, then 5 configs: the model's best
fixed config and its 4 best-ranked others; the fastest measured is chosen). Each number is
a geomean over the held-out matrices of the swept best time / the time of:

- ``model top-1``: the model's first-ranked config;
- ``tune (6 measurements)``: the config `tune` chose;
- ``best fixed config``: the first of the model's best fixed configs (chosen on its fine-tune
  and validation matrices), alone;
- ``random-6`` / ``random-48``: the fastest of the baseline and 5 / 47 random configs
  (the mean over ``--random-draws`` seeded draws).

Writes ``gpu_tune_eval.json`` and ``gpu_tune_eval.md`` under ``--out``.
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
ROWS = (("top1", "model top-1"), ("tune6", "tune (6 measurements)"), ("fixed", "best fixed config"),
        ("random6", "random-6 (baseline + 5)"), ("random48", "random-48 (baseline + 47)"))


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
        rows.append({"matrix": g.name, "nnz": int(g.matrix.nnz), "best_ms": best,
                     "top1": best / times[top1], "tune6": best / times[tuned.chosen.config],
                     "measured": len(tuned.measured), "fixed": best / times[fixed],
                     "random6": random_best(array, g.configs.index(baseline), 5, draws, n),
                     "random48": random_best(array, g.configs.index(baseline), 47, draws, n),
                     "chosen": tuned.chosen.config.to_dict(), "notes": tuned.notes})
        logging.info("%s %s: top-1 %.3f tune %.3f fixed %.3f", op, g.name, rows[-1]["top1"], rows[-1]["tune6"],
                     rows[-1]["fixed"])
    summary = {key: geomean([r[key] for r in rows]) for key, _ in ROWS}
    summary["min_tune6"] = float(min(r["tune6"] for r in rows))
    return {"op": op, "model": str(model_dir), "held_out": len(rows), "fixed_config": fixed.to_dict(),
            "summary": summary, "rows": rows}


def markdown(results: Sequence[dict], command: str) -> str:
    lines = ["# `tune` with the shipped GPU models on held-out H200 sweeps (replayed)", "", f"`{command}`", "",
             "Geomean over the held-out matrices of (swept best time / the time of the config); "
             "`tune` runs with its defaults on a backend that replays the recorded sweep.", "",
             "| op | held-out matrices | " + " | ".join(title for _, title in ROWS) + " | worst tune (6) |",
             "|---|---|" + "---|" * (len(ROWS) + 1)]
    for r in results:
        s = r["summary"]
        lines.append(f"| {r['op']} | {r['held_out']} | " + " | ".join(f"{s[k]:.3f}" for k, _ in ROWS)
                     + f" | {s['min_tune6']:.3f} |")
    return "\n".join(lines) + "\n"


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
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
