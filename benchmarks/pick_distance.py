"""How far apart `tune`'s picks from a model's ranking should be: the k configs measured, picked
`space.diverse_top`-style (each next one in rank order differing from every earlier pick in at least
d knobs), scored on SPADE matrices whose 256 configs are all simulated.

The matrices are `benchmarks/transfer.py`'s evaluation corpus (simulated there, or here if missing),
split as it splits them; the transfer models never fine-tuned on either part. For each model (the
package's SPADE TL5 model and its CPU source models, zero-shot, by default) and each d in
`--distances`, per split, geomeans over matrices of:

- best of the k picks / the oracle (the fastest of the 256), k in `--ks`;
- tune-like: the best of the baseline config, the model's first best fixed config and k - 1 picks
  at distance d, over the oracle (what `tune --target spade` measures by default).

Choose d on the validation split; the test split is shown beside it.

    python benchmarks/pick_distance.py --data-root DATA --out docs/results/pick_distance

Outputs in --out: ``pick_distance.json`` and ``pick_distance.md``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from cognate_tvm.metrics import diverse_top_k_time, geomean
from cognate_tvm.model.cognate import CognateCostModel
from cognate_tvm.model.pretrained import PRETRAINED_DIR
from cognate_tvm.space import create as create_space
from cognate_tvm.transfer import SIZES, evaluation_split  # the transfer protocol's corpus and split
from cognate_tvm.tuning import pick_top
from common import setup_logging

log = logging.getLogger("pick_distance")
DEFAULT_MODELS = ("{op}-spade", "{op}-cpu-2t", "{op}-cpu")


def tune_like(configs, times, scores, space, model, k: int, distance: int) -> float:
    """Best of the baseline, the model's first best fixed config and k - 1 diverse picks (what
    `tuning.pick_top` has `tune` measure), over the oracle; `times` and `scores` in `configs` order."""
    ranked = [configs[i] for i in np.argsort(scores, kind="stable")]
    baseline = space.baseline()
    picks, _ = pick_top(model, space, ranked, measured={baseline}, top_k=k, fixed=1, min_distance=distance)
    picked = times[[configs.index(c) for c in [baseline] + picks]]
    return float(np.nanmin(times) / np.nanmin(picked))


def score_split(groups, model, space, *, feat: int, ks, distances) -> dict:
    """{d: {"top<k>": geomean fraction, "tune": ...}} over `groups`."""
    fractions: dict[int, dict[str, list[float]]] = {d: {} for d in distances}
    for g in groups:
        configs = list(g.configs)
        times = np.asarray(g.times_ms, dtype=np.float64)
        scores = np.asarray(model.predict(g.matrix, configs, space=space, feat=feat), dtype=np.float64)
        oracle = float(np.nanmin(times))
        baseline = float(times[configs.index(space.baseline())])
        for d in distances:
            for k in ks:
                t = diverse_top_k_time(times, scores, configs, k, d, baseline)
                fractions[d].setdefault(f"top{k}", []).append(oracle / t)
            fractions[d].setdefault("tune", []).append(tune_like(configs, times, scores, space, model, max(ks), d))
    return {d: {key: geomean(v) for key, v in cols.items()} for d, cols in fractions.items()}


def markdown(result: dict, ks, distances) -> list[str]:
    lines = []
    for op, models in result["ops"].items():
        for model_name, splits in models.items():
            lines += ["", f"## {op}, {model_name}", "",
                      "| d | split | " + " | ".join(f"top-{k} / oracle" for k in ks)
                      + f" | tune-like: baseline + fixed + {max(ks) - 1} / oracle |",
                      "|---|---|" + "---|" * (len(ks) + 1)]
            for d in distances:
                for split in ("validation", "test"):
                    row = splits[split][str(d)]
                    lines.append(f"| {d} | {split} ({splits[split + '_matrices']}) | "
                                 + " | ".join(f"{row[f'top{k}']:.3f}" for k in ks) + f" | {row['tune']:.3f} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full",
                        help="transfer.py's corpus sizes (full: its 40 evaluation matrices of 1k-1M rows)")
    parser.add_argument("--ops", nargs="+", default=["spmm", "sddmm"], choices=["spmm", "sddmm"])
    parser.add_argument("--data-root", type=Path, required=True,
                        help="where transfer.py keeps its SPADE datasets (spade_eval_<op>)")
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS),
                        help="model directories; '{op}' is replaced, a bare name is one of the package's")
    parser.add_argument("--distances", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--ks", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--threads", type=int, default=1, help="simulator workers for missing matrices")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if min(args.distances) < 1 or min(args.ks) < 2:
        parser.error("--distances must be >= 1 and --ks >= 2 (tune-like needs room for a ranked pick)")
    setup_logging()
    params = dataclasses.replace(SIZES[args.size], threads=args.threads)
    start = time.perf_counter()
    result = {"command": "python benchmarks/pick_distance.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "ops": {}}
    for op in args.ops:
        space = create_space("spade", op)
        val, test = evaluation_split(op, params, args.data_root, progress=False)
        for template in args.models:
            name = template.format(op=op)
            path = Path(name) if "/" in name else PRETRAINED_DIR / name
            model = CognateCostModel.load(path)
            log.info("%s: %s on %d validation + %d test matrices", op, name, len(val), len(test))
            splits = {f"{split}_matrices": len(groups) for split, groups in (("validation", val), ("test", test))}
            for split, groups in (("validation", val), ("test", test)):
                scores = score_split(groups, model, space, feat=params.feat, ks=args.ks, distances=args.distances)
                splits[split] = {str(d): v for d, v in scores.items()}
            result["ops"].setdefault(op, {})[name] = splits
    result["seconds"] = round(time.perf_counter() - start, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pick_distance.json").write_text(json.dumps(result, indent=1))
    lines = ["# Picks from a ranking, d knobs apart: best of them / oracle (geomean over matrices)", "",
             f"`{result['command']}` ({result['seconds']:.0f} s)"] + markdown(result, args.ks, args.distances)
    (args.out / "pick_distance.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
