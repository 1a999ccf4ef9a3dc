"""How much the SPADE space matters, and how fast the model is.

On a generated corpus (all families), simulates all 256 SPADE configs per
matrix and reports: the oracle (best of 256) over the baseline config as a
geomean (the COGNATE paper's SPADE space gave 1.55x), how often each config is
the best (a good space has no config that wins everywhere), the best single
config for the whole corpus and its geomean gap to the per-matrix oracle (what
a per-matrix cost model can add over choosing once), on how many matrices
barrier, bypass and split help, a PNG of these distributions, and the time the
model takes for all 256 configs of a 1M-nonzero SpMM.

    python benchmarks/spade_space.py --out benchmarks/results/spade_space

A matrix's winner is its fastest config that simulated without an error. No
output check applies: the model replays the accesses and counts cycles but does
no arithmetic (`SpadeBackend` reports `correct=None`), so there is no output to
compare with scipy. A matrix on which the baseline or every config failed is
left out of the figures and named in `left_out`.

Per-matrix results are saved as JSON under OUT/matrices/; a rerun skips the
matrices already done with the same model version, op, width and sampling
(delete them to recompute).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from tqdm import tqdm

from cognate_tvm import simulator
from cognate_tvm.matrix import as_csr, generate_corpus
from cognate_tvm.space import create as create_space
from common import save_png, setup_logging

logger = logging.getLogger("spade_space")


def simulate_corpus(args: argparse.Namespace, out: Path) -> list[dict]:
    space = create_space("spade", args.op)
    configs = space.configs()
    entries = generate_corpus(args.count, seed=args.seed, min_rows=args.min_rows, max_rows=args.max_rows)
    folder = out / "matrices"
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for entry in tqdm(entries, desc="matrices"):
        path = folder / f"{entry.name}.json"
        if path.exists():
            record = json.loads(path.read_text())
            if (record.get("model_version") == simulator.MODEL_VERSION and record.get("feat") == args.feat
                    and record.get("op") == args.op and record.get("sampling") == args.sampling):
                records.append(record)
                continue
            logger.info("%s: cached result is from another model version or setting; recomputing", entry.name)
        matrix = entry.build()
        start = time.perf_counter()
        sims = simulator.simulate(matrix, args.op, args.feat, configs, threads=args.workers,
                                  sampling=args.sampling)
        record = {"name": entry.name, "family": entry.family, "permuted": entry.permuted,
                  "rows": matrix.shape[0], "cols": matrix.shape[1], "nnz": int(matrix.nnz),
                  "feat": args.feat, "op": args.op, "model_version": simulator.MODEL_VERSION,
                  "sampling": args.sampling, "seconds": time.perf_counter() - start,
                  "cycles": [s.cycles for s in sims], "errors": [s.error for s in sims]}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)
        records.append(record)
    return records


def summarize(records: list[dict], op: str) -> dict:
    space = create_space("spade", op)
    configs = space.configs()
    base = configs.index(space.baseline())
    left_out = [rec["name"] for rec in records
                if rec["cycles"][base] is None or all(c is None for c in rec["cycles"])]
    for name in left_out:
        logger.warning("%s: the baseline or every config failed to simulate; left out of the figures", name)
    records = [rec for rec in records if rec["name"] not in left_out]
    if not records:
        raise RuntimeError(f"no matrix has a simulated baseline and winner (left out: {', '.join(left_out)})")
    speedups, winners, families = [], Counter(), {}
    for rec in records:
        cycles = np.array([c if c is not None else np.inf for c in rec["cycles"]])
        best = int(np.argmin(cycles))
        speedups.append(cycles[base] / cycles[best])
        winners[best] += 1
        families.setdefault(rec["family"], []).append(cycles[base] / cycles[best])
    geo = float(math.exp(np.mean(np.log(speedups))))
    # The best single config for the whole corpus (lowest geomean slowdown to
    # the per-matrix oracle): how much a per-matrix choice adds over choosing once.
    table = np.array([[c if c is not None else np.inf for c in rec["cycles"]] for rec in records])
    log_gap = np.log(table / table.min(axis=1, keepdims=True))
    fixed = int(np.argmin(log_gap.mean(axis=0)))
    fixed_gap = float(math.exp(log_gap[:, fixed].mean()))
    fixed_over_baseline = float(math.exp(np.mean(np.log(table[:, base] / table[:, fixed]))))
    # Per binary knob: on how many matrices the best config with the knob on beats the best with it off.
    knob_helps = {}
    for name in ("barrier", "bypass"):
        on = np.array([getattr(c, name) for c in configs])
        knob_helps[name] = int(np.sum(table[:, on].min(axis=1) < table[:, ~on].min(axis=1)))
    split_on = np.array([c.split > 1 for c in configs])
    knob_helps["split>1"] = int(np.sum(table[:, split_on].min(axis=1) < table[:, ~split_on].min(axis=1)))
    top_share = max(winners.values()) / len(records)
    knob_wins = {}
    for name in ("row_panel", "col_panel", "split", "barrier", "bypass"):
        counts = Counter()
        for idx, n in winners.items():
            counts[str(getattr(configs[idx], name))] += n
        knob_wins[name] = dict(sorted(counts.items()))
    return {
        "matrices": len(records),
        "left_out": left_out,
        "baseline": space.baseline().to_dict(),
        "oracle_over_baseline_geomean": geo,
        "oracle_over_baseline_by_family": {f: float(math.exp(np.mean(np.log(v)))) for f, v in sorted(families.items())},
        "best_fixed_config": configs[fixed].to_dict(),
        "best_fixed_gap_to_oracle_geomean": fixed_gap,
        "best_fixed_over_baseline_geomean": fixed_over_baseline,
        "matrices_where_best_fixed_is_within_1pct_of_oracle": int(np.sum(log_gap[:, fixed] < math.log(1.01))),
        "best_fixed_gap_by_family": {
            f: float(math.exp(np.mean([log_gap[n, fixed] for n, r in enumerate(records) if r["family"] == f])))
            for f in sorted(families)},
        "matrices_where_knob_helps": knob_helps,
        "distinct_winning_configs": len(winners),
        "most_frequent_winner": configs[winners.most_common(1)[0][0]].to_dict(),
        "most_frequent_winner_share": top_share,
        "wins_by_knob_value": knob_wins,
        "wins_by_config": {configs[i].to_json(): n for i, n in winners.most_common()},
        "goals": {"oracle_geomean>=1.3": geo >= 1.3, "no_config_wins_more_than_a_third": top_share <= 1 / 3,
                  "best_fixed_gap>=1.15": fixed_gap >= 1.15,
                  "barrier_bypass_split_each_win_somewhere": all(v > 0 for v in knob_helps.values())},
        "_speedups": speedups, "_winners": winners, "_fixed_gaps": np.exp(log_gap[:, fixed]).tolist(),
    }


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(19, 4.8))
    wins = summary["wins_by_config"]
    labels = [
        "rp{row_panel} cp{col_panel} s{split}{b}{y}".format(
            **json.loads(k), b=" B" if json.loads(k)["barrier"] else "", y=" Y" if json.loads(k)["bypass"] else "")
        for k in wins]
    ax1.bar(range(len(wins)), list(wins.values()))
    ax1.set_xticks(range(len(wins)), labels, rotation=75, fontsize=7)
    ax1.axhline(summary["matrices"] / 3, color="r", ls="--", lw=1, label="1/3 of the matrices")
    ax1.set_ylabel("matrices where the config is best")
    ax1.set_title(f"Best config per matrix ({summary['distinct_winning_configs']} distinct; B=barrier, Y=bypass)")
    ax1.legend()
    ax2.hist(summary["_speedups"], bins=20)
    ax2.axvline(summary["oracle_over_baseline_geomean"], color="r", lw=1,
                label=f"geomean {summary['oracle_over_baseline_geomean']:.2f}x")
    ax2.set_xlabel("oracle (best of 256) / baseline")
    ax2.set_ylabel("matrices")
    ax2.set_title("Speed-up of the best config over the baseline")
    ax2.legend()
    fixed = summary["best_fixed_config"]
    ax3.hist(summary["_fixed_gaps"], bins=20, color="tab:orange")
    ax3.axvline(summary["best_fixed_gap_to_oracle_geomean"], color="r", lw=1,
                label=f"geomean {summary['best_fixed_gap_to_oracle_geomean']:.2f}x")
    ax3.set_xlabel("best fixed config / oracle")
    ax3.set_ylabel("matrices")
    helps = ", ".join(f"{k} {v}" for k, v in summary["matrices_where_knob_helps"].items())
    ax3.set_title("Best fixed config (rp{row_panel} cp{col_panel} s{split}{b}{y}) vs oracle\n"
                  "matrices where the knob helps: {helps}".format(
                      **fixed, b=" B" if fixed["barrier"] else "", y=" Y" if fixed["bypass"] else "", helps=helps),
                  fontsize=9)
    ax3.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=120)
    plt.close(fig)


def speed_figure(args: argparse.Namespace) -> dict:
    """Seconds for all 256 configs of a uniform-random SpMM with `args.speed_nnz` nonzeros."""
    rows = args.speed_rows
    rng = np.random.default_rng(args.seed)
    matrix = as_csr(sp.random_array((rows, rows), density=args.speed_nnz / rows / rows, rng=rng, format="csr"))
    configs = create_space("spade", "spmm").configs()
    start = time.perf_counter()
    simulator.simulate(matrix, "spmm", args.feat, configs, threads=args.workers, sampling=args.sampling)
    seconds = time.perf_counter() - start
    return {"rows": rows, "nnz": int(matrix.nnz), "feat": args.feat, "configs": len(configs),
            "threads": args.workers, "sampling": args.sampling, "seconds": seconds}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/spade_space"))
    parser.add_argument("--count", type=int, default=56, help="matrices (cycled over all families)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-rows", type=int, default=1000)
    parser.add_argument("--max-rows", type=int, default=300_000)
    parser.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    parser.add_argument("--feat", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sampling", type=int, default=simulator.DEFAULT_SAMPLING)
    parser.add_argument("--speed-nnz", type=int, default=1_000_000)
    parser.add_argument("--speed-rows", type=int, default=100_000)
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args(argv)
    setup_logging(plain=True)

    args.out.mkdir(parents=True, exist_ok=True)
    records = simulate_corpus(args, args.out)
    summary = summarize(records, args.op)
    plot(summary, args.out / "distribution.png")
    if not args.skip_speed:
        summary["speed"] = speed_figure(args)
    public = {k: v for k, v in summary.items() if not k.startswith("_")}
    (args.out / "summary.json").write_text(json.dumps(public, indent=2))
    logger.info("oracle/baseline geomean %.3fx over %d matrices; most frequent winner %s on %.0f%%; "
                "%d distinct winners", public["oracle_over_baseline_geomean"], public["matrices"],
                public["most_frequent_winner"], 100 * public["most_frequent_winner_share"],
                public["distinct_winning_configs"])
    logger.info("wins by knob value: %s", public["wins_by_knob_value"])
    logger.info("best fixed config %s: %.3fx from the oracle (geomean), %.3fx over the baseline; "
                "matrices where the knob helps: %s", public["best_fixed_config"],
                public["best_fixed_gap_to_oracle_geomean"], public["best_fixed_over_baseline_geomean"],
                public["matrices_where_knob_helps"])
    if "speed" in public:
        logger.info("speed: %d configs of a %d-nnz SpMM in %.2f s (%d threads)", public["speed"]["configs"],
                    public["speed"]["nnz"], public["speed"]["seconds"], public["speed"]["threads"])
    return public


if __name__ == "__main__":
    main()
