"""Is what decides a SPADE config in the matrix features? An XGBoost probe trained on SPADE data alone.

    python benchmarks/locality_probe.py --op spmm --data-root DATA --out docs/results/locality_probe

The transfer benchmark's SPADE data (`transfer.target_data`: its pool at 1k-1M rows, 100 sampled
configs per matrix, the 5 validation matrices, the 35 test matrices with all 256 configs) is
reused as it is. For n target matrices drawn from pool + validation (seeded, 3 draws below the
full set), an XGBoost ranker (`baselines.XGBoostRanker`) is fitted on them with WACO's matrix
statistics alone, and with the matrix's `locality_profile` added, and every test matrix is
ranked. A third XGBoost row adds `cache_fit_features`: per config, an estimate of how much of
the gathered dense operand the modelled machine's L2 and LLC hold at the config's dense width.
The best fixed config of the same n matrices and random-k are printed beside them.
No source model and no validation choice enters: this measures how much the features can
tell, not a tuning method. docs/transfer.md has the results (the locality probe, and its cache-fit row).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from cognate_tvm.baselines import BestFixedRanker, RandomRanker, XGBoostRanker
from cognate_tvm.matrix import hot_column_cover
from cognate_tvm.simulator import HardwareParams
from cognate_tvm import transfer
from cognate_tvm.space import create as create_space
from common import figure


def cache_fit_features(matrix, configs, *, feat: int, hardware: HardwareParams) -> np.ndarray:
    """float32 [len(configs), 4] per SPADE config: the share of nonzeros whose dense row segment
    (w = feat / split floats) is among the columns that the L2 and the LLC can hold (the hottest
    first: an ideal cache), log2 of the DRAM bytes per nonzero that follow (A streamed once per
    pass, the misses' dense rows once each), and log2 of a column panel's dense rows over the LLC.
    Hand-written: it is an analytic estimate from the machine's sizes, not something a library has."""
    covered = hot_column_cover(matrix)

    def held(cache_bytes: float, width: float) -> float:
        return float(covered[min(len(covered) - 1, int(cache_bytes // (4 * width)))])

    out = np.empty((len(configs), 4), dtype=np.float32)
    for n, config in enumerate(configs):
        width = max(1.0, feat / config.split)
        in_llc = held(hardware.llc_bytes, width)
        dram_per_nnz = 8 * config.split + 4 * feat * (1 - in_llc)
        panel = min(config.col_panel, max(1, matrix.shape[1])) * 4 * width
        out[n] = (held(hardware.l2_bytes, width), in_llc, np.log2(dram_per_nnz), np.log2(panel / hardware.llc_bytes))
    return out


class CacheFitXGBoost(XGBoostRanker):
    """`XGBoostRanker(locality=True)` whose config features also hold `cache_fit_features`."""

    def __init__(self, *, seed: int = 0, hardware: HardwareParams | None = None):
        super().__init__(seed=seed, locality=True)
        self.hardware = hardware or HardwareParams()

    def features(self, matrix, configs, *, space, feat):
        fit = cache_fit_features(matrix, configs, feat=feat, hardware=self.hardware)
        return np.hstack([super().features(matrix, configs, space=space, feat=feat), fit])


METHODS = {
    "xgboost, statistics": lambda seed: XGBoostRanker(seed=seed),
    "xgboost, statistics + locality": lambda seed: XGBoostRanker(seed=seed, locality=True),
    "xgboost, statistics + locality + cache fit": lambda seed: CacheFitXGBoost(seed=seed),
    "best fixed config": lambda seed: BestFixedRanker(),
    "random-k": lambda seed: RandomRanker(seed=seed),
}


def draws(groups: list, n: int, seeds: int) -> list[tuple[int, list]]:
    """(seed, n groups): the whole list once when n covers it, else `seeds` seeded draws."""
    if n >= len(groups):
        return [(0, list(groups))]
    return [(s, [groups[i] for i in np.random.default_rng(s).choice(len(groups), n, replace=False)])
            for s in range(seeds)]


def full_params(pool_matrices: int) -> transfer.Params:
    """transfer.py's `--size full --pool-matrices N --pool-max-rows 1000000`, so that its data is reused."""
    return dataclasses.replace(transfer.with_pool_matrices(transfer.SIZES["full"], pool_matrices),
                               pool_max_rows=1_000_000)


def probe(op: str, sizes: list[int], seeds: int, root: Path, params: transfer.Params) -> dict:
    data = transfer.target_data(op, params, root, progress=False)
    spade = create_space("spade", op)
    train = [*data.pool, *data.val]
    rows = []
    for n in sizes:
        for seed, groups in draws(train, n, seeds):
            for method, make in METHODS.items():
                model = make(seed).fit(groups, space=spade)
                summary, _ = transfer.evaluate_groups(model, data.test, spade, k=5)
                rows.append({"n": len(groups), "seed": seed, "method": method,
                             "top1": summary["oracle_fraction_top1"], "top5": summary["oracle_fraction_topk"]})
                print(f"{op} n={len(groups)} seed={seed} {method}: top-1 {rows[-1]['top1']:.3f} "
                      f"top-5 {rows[-1]['top5']:.3f}", flush=True)
    return {"op": op, "rows": rows, "test_matrices": len(data.test), "train_available": len(train)}


def table(result: dict) -> list[str]:
    lines = [f"### {result['op']}: test top-1 / top-5 as a fraction of the oracle ({result['test_matrices']} "
             f"test matrices), mean ± std over draws", "",
             "| target matrices | " + " | ".join(METHODS) + " |", "|---|" + "---|" * len(METHODS)]
    for n in sorted({r["n"] for r in result["rows"]}):
        cells = []
        for method in METHODS:
            got = [r for r in result["rows"] if r["n"] == n and r["method"] == method]
            t1, t5 = np.array([r["top1"] for r in got]), np.array([r["top5"] for r in got])
            cells.append(f"{t1.mean():.3f} ± {t1.std():.3f} / {t5.mean():.3f}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def plot(result: dict, path: Path) -> None:
    with figure(path, figsize=(6, 4)) as (_, ax):
        for method in METHODS:
            got = [r for r in result["rows"] if r["method"] == method]
            ns = sorted({r["n"] for r in got})
            ax.plot(ns, [np.mean([r["top1"] for r in got if r["n"] == n]) for n in ns], marker="o", label=method)
        ax.set_xscale("log")
        ax.set_xlabel("SPADE target matrices (x 100 configs)")
        ax.set_ylabel("test top-1 / oracle")
        ax.set_title(f"{result['op']}: XGBoost probe of the matrix features")
        ax.legend(fontsize=8)


def main(argv=None, *, params: transfer.Params | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", choices=("spmm", "sddmm"), required=True)
    parser.add_argument("--data-root", type=Path, required=True, help="where transfer.py keeps its SPADE data")
    parser.add_argument("--pool-matrices", type=int, default=100)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 25, 50, 105])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = probe(args.op, args.sizes, args.seeds, args.data_root, params or full_params(args.pool_matrices))
    result["command"] = "python benchmarks/locality_probe.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result["wall_seconds"] = time.perf_counter() - start
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"locality_probe_{args.op}.json").write_text(json.dumps(result, indent=1))
    text = "\n".join([f"Command: `{result['command']}`; {result['wall_seconds']:.0f} s.", "", *table(result)])
    (args.out / f"locality_probe_{args.op}.md").write_text(text + "\n")
    plot(result, args.out / f"locality_probe_{args.op}.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
