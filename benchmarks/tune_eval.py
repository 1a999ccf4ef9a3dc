"""Default `tune` against the best of N random measured configs, the baseline config and the vendor library.

For each of `--matrices` generated matrices (all families in turn, rows drawn
in [--min-rows, --max-rows], seeds from EVAL_SEED = 9,000,000 on, which no
corpus of the project uses, so the shipped model never saw them):

- tune: `cognate_tvm.tuning.tune` as `python -m cognate_tvm.tune` runs it by
  default (`--search adaptive`: baseline + 7 measured in rounds, the model
  fine-tuned on this matrix's measurements between them; `cognate_tvm.tuning.search`),
  `--fixed` (1) of the first round the model's best fixed configs (from its
  training data; the ranked ones differ pairwise in `--diversity` knobs, by default
  the platform's `Space.pick_distance`), the winner is checked against scipy;
- tune, one-shot: `--search oneshot`, the model ranks once and baseline + 5 are
  measured (run beside any other search);
- tune, ranking only: the same with ``fixed=0`` (the model's top-k), to show
  what the best fixed config adds (run only when `--fixed` > 0);
- tune --budget: `--beside-budget` (8) seeded random configs are measured first and
  the model is fine-tuned on them before the same search (so 8 more measurements;
  not run when tune itself has a `--budget`);
- the training data's best fixed config alone (the model's first best fixed
  config among the candidates; no measurement of the matrix);
- random: the baseline and `--random` (48) seeded random configs are measured,
  and the fastest whose output is right is kept (`pick_checked`);
- vendor: the target's vendor library (MKL on the CPU when installed, else scipy).

When every matrix is done, each matrix's baseline and four picks are timed
again side by side in one call (outputs checked), in `--retime-rounds` (5)
rounds with the order rotated, and every speedup below is the median over
rounds of a pick's time over the same call's baseline time:

- tune's choice, the one-shot's, tune's with the ranking only, tune --budget's, the training data's best
  fixed config;
- random: the fastest correct of the 48;
- random with tune's budget: the fastest of the baseline and as many random
  configs as tune measured after it, drawn (seeded per matrix) from the 48;
- the best fixed config, leave one out: the config of the sweep with the best
  geomean speedup on the other matrices' sweeps (the sweep draws the same
  configs on every matrix; the baseline if that config failed on this one).

Reported per matrix and as geomeans over the baseline, tune's speedup as a
fraction of random's (the goal: >= 1.0 with at most 8 measurements against
49, and ahead of the best fixed config), tune / vendor, and, from the sweeps' own times, the spread of
random with tune's budget over 1000 draws.

Outputs in --out:
``results.jsonl`` (one object per matrix: tune's run and the random sweep; a
rerun skips the matrices already there and re-times), ``summary.json`` (with
the re-timed rows, their sweeps left out), ``sweeps.parquet`` (the random sweeps'
times: matrix, config, time_ms; a failed or wrong config has none), ``summary.md``
(a markdown table) and ``tune_eval.png``.

    python benchmarks/tune_eval.py --out benchmarks/results/tune_eval                # full: 10 matrices, 2k-60k rows
    python benchmarks/tune_eval.py --matrix-file A.mtx --matrix-file B.npz --threads 2 --out OUT  # your matrices
    python benchmarks/tune_eval.py --corpus realistic:6:77:30000-120000 --no-vendor --out OUT     # a corpus spec or folder
    python benchmarks/tune_eval.py --corpus realistic:90:2026:2000-30000 --split test --out OUT   # a corpus's test split
    python benchmarks/tune_eval.py --matrices 1 --min-rows 300 --max-rows 400 --random 4 --top-k 2 \\
        --feat 32 --out /tmp/tune_eval                                                 # test-sized
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from cognate_tvm import baselines, space, tuning
from cognate_tvm.backends.base import measure_side_by_side, pick_checked
from cognate_tvm.matrix import load_matrix
from cognate_tvm.matrix.corpus import load_corpus
from cognate_tvm.ops import get_op
from cognate_tvm.tuning.search import DEFAULT_STRATEGY, STRATEGIES
from common import (SPLITS, add_matrix_arguments, budget_draw, eval_matrices, present_geomean, save_png,
                    setup_logging, split_part)

EVAL_SEED = 9_000_000
log = logging.getLogger("tune_eval")


def evaluate_matrix(name, matrix, *, op, backend, feat, top_k, random_k, seed, pretrained_root, vendor,
                    oracle=False, budget=0, fixed=tuning.DEFAULT_FIXED, diversity=None, search="adaptive",
                    beside_budget=0) -> dict:
    op = get_op(op)
    platform_space = space.create(backend.platform, op.name)
    def run_tune(**changes):  # tune as evaluated, with some of its options changed
        options = tuning.TuneOptions(top_k=top_k, seed=seed, fixed=fixed, search=search,
                                     pretrained_root=pretrained_root, name=name, budget=budget, diversity=diversity)
        return tuning.tune(op, matrix, backend=backend, feat=feat, options=options.replace(**changes))

    start = time.perf_counter()
    tuned = run_tune(oracle=oracle)
    tune_s = time.perf_counter() - start
    oneshot = run_tune(search="oneshot", top_k=None) if search != "oneshot" else tuned
    ranking = run_tune(fixed=0) if fixed else tuned
    budgeted = run_tune(budget=beside_budget) if beside_budget and not budget else None
    candidates = platform_space.candidates(backend.kernel_threads())
    train_fixed = next(iter(tuning.fixed_candidates(tuned.model, platform_space, candidates)), None)
    baseline = platform_space.baseline()
    sample = [baseline] + [c for c in platform_space.sample(random_k + 1, seed + 1) if c != baseline][:random_k]
    sweep = tuning.measure_configs(backend, op, matrix, sample, feat, seed=seed)
    random_pick = pick_checked(backend, op, matrix, sweep, feat, seed=seed)
    tune_choice = tuned.chosen.config if tuned.chosen is not None else None
    random_choice = random_pick.best.config if random_pick.best is not None else None
    row = {"matrix": name, "rows": matrix.shape[0], "cols": matrix.shape[1], "nnz": int(matrix.nnz),
           "op": op.name, "feat": feat, "tune_measurements": len(tuned.measured), "tune_diversity": tuned.diversity,
           "random_measurements": len(sweep), "tune_seconds": round(tune_s, 2),
           "tune_config": None if tune_choice is None else tune_choice.to_dict(),
           "tune_ranking_config": None if ranking.chosen is None else ranking.chosen.config.to_dict(),
           "tune_search": tuned.search, "tune_oneshot_measurements": len(oneshot.measured),
           "tune_budget_config": None if budgeted is None or budgeted.chosen is None
           else budgeted.chosen.config.to_dict(),
           "tune_budget_measurements": None if budgeted is None else len(budgeted.measured),
           "tune_oneshot_config": None if oneshot.chosen is None else oneshot.chosen.config.to_dict(),
           "train_fixed_config": None if train_fixed is None else train_fixed.to_dict(),
           "tune_fixed_measured": len(tuned.fixed),
           "random_config": None if random_choice is None else random_choice.to_dict(),
           "tune_rejected": len(tuned.rejected), "random_rejected": len(random_pick.rejected),
           "notes": tuned.notes, "sweep": sweep_times(sweep, random_pick.rejected)}
    if tuned.oracle is not None:
        row.update(oracle_report(tuned.oracle))
    if vendor:
        v = tuning.vendor_report(backend, op, matrix, feat, seed)
        row.update(vendor=v["name"], vendor_method=v["method"], vendor_ms=v["time_ms"])
    return row


PICKS = ("tune", "tune_oneshot", "tune_ranking", "tune_budget", "train_fixed", "random", "random_same_budget",
         "best_fixed")


def picks_of(rows: list[dict], space, *, top_k: int, seed: int) -> list[dict]:
    """Per matrix, {method: config or None} of every method in PICKS (see the module docstring)."""
    fixed = best_fixed_leave_one_out(rows)
    out = []
    for n, row in enumerate(rows):
        entries = row["sweep"]
        drawn = [entries[i] for i in budget_draw(np.random.default_rng([seed, n]), len(entries), top_k)]
        ran = [e for e in [entries[0], *drawn] if e[1]]
        same = min(ran, key=lambda e: e[1])[0] if ran else None
        picks = {"tune": row["tune_config"], "tune_oneshot": row.get("tune_oneshot_config"),
                 "tune_ranking": row.get("tune_ranking_config"), "tune_budget": row.get("tune_budget_config"),
                 "train_fixed": row.get("train_fixed_config"), "random": row["random_config"],
                 "random_same_budget": same, "best_fixed": fixed[n]}
        out.append({m: None if c is None else (space.config_from_json(c) if isinstance(c, str)
                                               else space.config_from_dict(c)) for m, c in picks.items()})
    return out


def retime(rows: list[dict], matrices: dict, *, backend, op, feat: int, top_k: int, seed: int,
           rounds: int = 5) -> list[dict]:
    """Each matrix's baseline and picks timed side by side in one call (outputs checked), `rounds` times
    with the order rotated: rows with ``<method>_ms`` and ``<method>_speedup`` (over the same call's
    baseline), each the median over rounds, and ``tune_vs_vendor``."""
    op = get_op(op)
    platform_space = space.create(backend.platform, op.name)
    baseline = platform_space.baseline()
    out = []
    for row, picks in zip(rows, picks_of(rows, platform_space, top_k=top_k, seed=seed)):
        configs = [baseline] + list(dict.fromkeys(c for c in picks.values() if c is not None and c != baseline))
        samples = {c: [] for c in configs}  # (time, baseline time of the same call) per round
        for results in measure_side_by_side(backend, op, matrices[row["matrix"]], configs, feat, rounds=rounds,
                                            seed=seed, check_first=True):
            times = {c: r.time_ms for c, r in results.items() if r.ok and r.correct is not False}
            for c in configs:
                samples[c].append((times.get(c), times.get(baseline)))
        final = {**row, "retime_rounds": rounds, "baseline_ms": _median([t for t, _ in samples[baseline]])}
        if row.get("oracle_ms"):
            final["baseline_oracle_fraction"] = _ratio(row["oracle_ms"], final["baseline_ms"])
        for method, config in picks.items():
            pairs = samples.get(config, []) if config is not None else []
            final[f"{method}_config"] = None if config is None else config.to_dict()
            final[f"{method}_ms"] = _median([t for t, _ in pairs])
            final[f"{method}_speedup"] = _median([_ratio(b, t) for t, b in pairs])
            if row.get("oracle_ms"):  # picks as fractions of the oracle sweep's best
                final[f"{method}_oracle_fraction"] = _ratio(row["oracle_ms"], final[f"{method}_ms"])
        final["tune_vs_vendor"] = _ratio(row.get("vendor_ms"), final["tune_ms"])
        out.append(final)
    return out


def _median(values) -> float | None:
    """Median of the values that exist; None if a value is missing (a failed or wrong run) or none exist."""
    values = list(values)
    return float(np.median(values)) if values and all(v is not None for v in values) else None


def sweep_times(sweep, rejected) -> list:
    """[[config json, time_ms or None], ...] of the random sweep, baseline first; a failed or
    wrong-output config has None."""
    wrong = {r.config for r in rejected}
    return [[r.config.to_json(), r.time_ms if r.ok and r.config not in wrong else None] for r in sweep]


def write_sweeps(rows: list[dict], path: Path) -> None:
    """The rows' random sweeps as one table (matrix, config json, time_ms): Parquet stores the
    repeated config strings a tenth as large as the rows' JSON does."""
    records = [(row["matrix"], config, time_ms) for row in rows for config, time_ms in row.get("sweep") or ()]
    frame = pd.DataFrame(records, columns=["matrix", "config", "time_ms"]).astype({"time_ms": float})
    frame.to_parquet(path, index=False)


def random_same_budget(rows: list[dict], k: int, *, draws: int = 1000, seed: int = 0) -> dict:
    """Geomean speedup of the baseline + `k` random configs of each sweep (the fastest kept), over
    seeded draws: median and the 10th-90th percentiles of the draws' geomeans."""
    rng = np.random.default_rng(seed)
    sweeps = [np.array([t if t else np.nan for _, t in r["sweep"]], dtype=float) for r in rows if r.get("sweep")]
    sweeps = [t for t in sweeps if np.isfinite(t[0])]
    if not sweeps:
        return {"median": None, "p10": None, "p90": None, "draws": 0}
    geomeans = []
    for _ in range(draws):
        logs = []
        for times in sweeps:
            pick = budget_draw(rng, len(times), k)
            logs.append(np.log(times[0] / np.nanmin(np.append(times[pick], times[0]))))
        geomeans.append(float(np.exp(np.mean(logs))))
    p10, median, p90 = np.percentile(geomeans, [10, 50, 90])
    return {"median": float(median), "p10": float(p10), "p90": float(p90), "draws": draws}


def best_fixed_leave_one_out(rows: list[dict]) -> list[str]:
    """Per matrix, the config (JSON) of the sweep that is best on the other matrices' sweeps
    (`baselines.best_fixed_leave_one_out`); the baseline when it failed on this one."""
    own = {n: dict(row["sweep"]) for n, row in enumerate(rows)}
    picks = baselines.best_fixed_leave_one_out(own)
    return [pick if own[n].get(pick) else row["sweep"][0][0] for (n, pick), row in zip(picks.items(), rows)]


def oracle_report(oracle) -> dict:
    """The oracle sweep's best (the picks' fractions of it come from the re-timing, `retime`)."""
    return {"oracle_ms": oracle.time_ms, "oracle_config": oracle.config.to_dict(),
            "oracle_whole_space": oracle.whole_space, "oracle_configs": oracle.configs_measured}


def _ratio(a, b):
    return a / b if a and b else None


def summarize(rows: list[dict], args) -> dict:
    """Geomeans of the re-timed `rows`; the spread of random with tune's budget comes from the sweeps."""
    speedups = {m: present_geomean(r[f"{m}_speedup"] for r in rows) for m in PICKS}
    same = random_same_budget(rows, args.top_k, seed=args.seed)
    return {"matrices": len(rows), "op": args.op, "target": args.target, "feat": args.feat, "top_k": args.top_k,
            "search": args.search,
            "budget": args.budget, "random_k": args.random, "fixed": args.fixed, "diversity": args.diversity,
            **{f"{m}_speedup_geomean": g for m, g in speedups.items()},
            "tune_fraction_of_random": _ratio(speedups["tune"], speedups["random"]),
            "tune_oneshot_fraction_of_random": _ratio(speedups["tune_oneshot"], speedups["random"]),
            "random_same_budget_sweep_median": same["median"], "random_same_budget_sweep_p10": same["p10"],
            "random_same_budget_sweep_p90": same["p90"],
            "tune_vs_vendor_geomean": present_geomean(r.get("tune_vs_vendor") for r in rows),
            "tune_measurements_max": max((r["tune_measurements"] for r in rows), default=None),
            "tune_budget_measurements_max": max((r.get("tune_budget_measurements") or 0 for r in rows), default=0)
            or None,
            **{f"{m}_oracle_fraction_geomean": present_geomean(r.get(f"{m}_oracle_fraction") for r in rows)
               for m in (*PICKS, "baseline")},
            "goal": "tune_fraction_of_random >= 1.0 with at most 8 measurements, ahead of best_fixed"}


def markdown(rows: list[dict], summary: dict) -> str:
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    k = summary["top_k"]
    lines = [f"# tune ({summary.get('search')}, budget {summary['budget']}, {k} measured after the baseline) vs "
             f"best of {summary['random_k']} random "
             f"({summary['op']}, {summary['target']}, N={summary['feat']})", "",
             "Speedups over the baseline config: all picks re-timed side by side in one call per matrix, "
             f"median of {rows[0].get('retime_rounds', 1) if rows else 1} rounds.", "",
             f"| matrix | rows | nnz | tune | tune, one-shot | tune, ranking only | tune --budget (meas.) | "
             f"training data's best fixed | best of {summary['random_k']} random | baseline + {k} random | "
             "best fixed (other matrices) | tune / vendor | tune meas. |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['matrix']} | {r['rows']} | {r['nnz']} | {f(r['tune_speedup'])}x | "
                     f"{f(r.get('tune_oneshot_speedup'))}x | "
                     f"{f(r.get('tune_ranking_speedup'))}x | {_budget_cell(r, f)} | "
                     f"{f(r.get('train_fixed_speedup'))}x | "
                     f"{f(r['random_speedup'])}x | {f(r['random_same_budget_speedup'])}x | "
                     f"{f(r['best_fixed_speedup'])}x | {f(r.get('tune_vs_vendor'))}x | {r['tune_measurements']} |")
    lines += ["", f"geomean: tune {f(summary['tune_speedup_geomean'])}x (--fixed {summary.get('fixed')}), "
              f"tune one-shot {f(summary.get('tune_oneshot_speedup_geomean'))}x "
              f"({f(summary.get('tune_oneshot_fraction_of_random'))} of random's), "
              f"tune with the ranking only {f(summary.get('tune_ranking_speedup_geomean'))}x, "
              f"tune --budget (at most {summary.get('tune_budget_measurements_max') or '-'} measurements) "
              f"{f(summary.get('tune_budget_speedup_geomean'))}x, the training data's "
              f"best fixed config {f(summary.get('train_fixed_speedup_geomean'))}x, best of random "
              f"{f(summary['random_speedup_geomean'])}x, baseline + {k} random "
              f"{f(summary['random_same_budget_speedup_geomean'])}x, best fixed config "
              f"{f(summary['best_fixed_speedup_geomean'])}x over the baseline; tune reaches "
              f"{f(summary['tune_fraction_of_random'])} of random's speedup; tune / vendor "
              f"{f(summary['tune_vs_vendor_geomean'])}x",
              "", f"baseline + {k} random over 1000 draws, from the sweeps' own times: median "
              f"{f(summary['random_same_budget_sweep_median'])}x (10-90%: "
              f"{f(summary['random_same_budget_sweep_p10'])}-{f(summary['random_same_budget_sweep_p90'])}x)"]
    if summary["tune_oracle_fraction_geomean"] is not None:
        lines += ["", "picked / oracle (geomean; 1.00 = the fastest config of the oracle sweep): tune "
                  f"{f(summary['tune_oracle_fraction_geomean'])}, best of random "
                  f"{f(summary['random_oracle_fraction_geomean'])}, baseline + {k} random "
                  f"{f(summary['random_same_budget_oracle_fraction_geomean'])}, best fixed "
                  f"{f(summary['best_fixed_oracle_fraction_geomean'])}, baseline "
                  f"{f(summary['baseline_oracle_fraction_geomean'])}",
                  "", f"| matrix | tune / oracle | random / oracle | baseline + {k} random / oracle | "
                  "best fixed / oracle | baseline / oracle | oracle configs |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['matrix']} | {f(r.get('tune_oracle_fraction'))} | {f(r.get('random_oracle_fraction'))} | "
                  f"{f(r.get('random_same_budget_oracle_fraction'))} | {f(r.get('best_fixed_oracle_fraction'))} | "
                  f"{f(r.get('baseline_oracle_fraction'))} | {r.get('oracle_configs', '-')} |" for r in rows]
    return "\n".join(lines) + "\n"


def _budget_cell(row: dict, f) -> str:
    """The --beside-budget run's speedup and how many configs it measured ("-" when it was not run)."""
    if not row.get("tune_budget_measurements"):
        return "-"
    return f"{f(row.get('tune_budget_speedup'))}x ({row['tune_budget_measurements']})"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.8), 4))
    labels = {"tune": "tune", "tune_oneshot": "tune, one-shot", "tune_ranking": "tune, ranking only",
              "tune_budget": "tune --budget",
              "train_fixed": "training data's best fixed", "random": "best of random",
              "random_same_budget": "baseline + k random", "best_fixed": "best fixed (other matrices)"}
    width = 0.8 / len(labels)
    for n, (method, text) in enumerate(labels.items()):
        ax.bar(x + (n - (len(labels) - 1) / 2) * width, [r.get(f"{method}_speedup") or 0 for r in rows], width,
               label=text)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(x, [r["matrix"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("speedup over the baseline config")
    ax.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=120)
    plt.close(fig)


def chosen_matrices(args) -> dict:
    """{name: matrix} to evaluate: --matrix-file, else --corpus, else the generated evaluation set."""
    if args.matrix_file:
        return {p.stem: load_matrix(p) for p in args.matrix_file}
    if args.corpus:
        entries = load_corpus(args.corpus, min_rows=args.min_rows, max_rows=args.max_rows)
        if args.split != "all":  # "test": the matrices no model trained on
            kept = set(split_part((e.name for e in entries), args.split, seed=args.split_seed))
            entries = [e for e in entries if e.name in kept]
        return {entry.name: entry.build() for entry in tqdm(entries, desc="building matrices")}
    return dict(eval_matrices(args.matrices, min_rows=args.min_rows, max_rows=args.max_rows, seed=EVAL_SEED))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--op", default="spmm", choices=["spmm", "sddmm"])
    parser.add_argument("--target", default="llvm")
    add_matrix_arguments(parser, matrices=10, min_rows=2000, max_rows=60000)
    parser.add_argument("--feat", type=int, default=128)
    parser.add_argument("--top-k", type=int, default=None,
                        help="configs tune measures after the baseline (default: the search strategy's)")
    parser.add_argument("--search", choices=tuple(STRATEGIES), default=DEFAULT_STRATEGY,
                        help="tune's search strategy; the one-shot search is run beside it as well")
    parser.add_argument("--matrix-file", type=Path, action="append", default=[],
                        help="a matrix file (.mtx, .npz) to evaluate instead of generated ones (repeatable)")
    parser.add_argument("--corpus", default=None,
                        help="evaluate the matrices of this corpus instead: 'realistic:N:SEED[:MIN-MAX]', "
                             "'synthetic:N:SEED[:MIN-MAX]' (a seed no training corpus used; without MIN-MAX, "
                             "--min-rows/--max-rows) or a folder of matrix files")
    parser.add_argument("--split", choices=("all",) + SPLITS, default="all",
                        help="with --corpus: only this part of the corpus's train / validation / test split "
                             "(the one benchmarks/pretrain.py makes; default: every matrix)")
    parser.add_argument("--split-seed", type=int, default=0, help="the split's seed (pretrain.py's --split-seed)")
    parser.add_argument("--fixed", type=int, default=tuning.DEFAULT_FIXED,
                        help="of the top-k, the model's best fixed configs (tune's --fixed)")
    parser.add_argument("--diversity", type=int, default=None,
                        help="tune's ranked picks differ pairwise in this many knobs (default: the platform's)")
    parser.add_argument("--budget", type=int, default=tuning.DEFAULT_BUDGET,
                        help="tune --budget: sampled configs measured to fine-tune the model before ranking")
    parser.add_argument("--beside-budget", type=int, default=8,
                        help="also run tune --budget N beside the default (N sampled configs measured and the "
                             "model fine-tuned on them before the search; 0: not run, nor with --budget)")
    parser.add_argument("--random", type=int, default=48, help="random configs measured (besides the baseline)")
    parser.add_argument("--threads", type=int, default=None, help="llvm: kernel threads (default: all cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--retime-rounds", type=int, default=5,
                        help="side-by-side re-timings of the picks per matrix (median kept)")
    parser.add_argument("--pretrained-dir", type=Path, default=None)
    parser.add_argument("--no-vendor", action="store_true", help="do not time the vendor library")
    parser.add_argument("--oracle", action="store_true",
                        help="also sweep the space (whole on spade) and report picks as fractions of its best")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.split != "all" and (args.corpus is None or args.matrix_file):
        parser.error("--split takes the matrices of --corpus (and no --matrix-file)")
    if args.beside_budget < 0:
        parser.error(f"--beside-budget must be >= 0, got {args.beside_budget}")
    setup_logging()
    args.out.mkdir(parents=True, exist_ok=True)
    options = {"num_threads": args.threads} if args.threads and args.target == "llvm" else {}
    backend = tuning.create_backend(args.target, **options)
    results_path = args.out / "results.jsonl"
    done = {}
    if results_path.is_file():
        done = {r["matrix"]: r for r in map(json.loads, results_path.read_text().splitlines()) if r}
    rows = []
    matrices = chosen_matrices(args)
    for name, matrix in matrices.items():
        if name in done:
            rows.append(done[name])
            continue
        log.info("%s: %dx%d, nnz %d", name, *matrix.shape, matrix.nnz)
        row = evaluate_matrix(name, matrix, op=args.op, backend=backend, feat=args.feat, top_k=args.top_k,
                              random_k=args.random, seed=args.seed, pretrained_root=args.pretrained_dir,
                              vendor=not args.no_vendor, oracle=args.oracle, budget=args.budget,
                              fixed=args.fixed, diversity=args.diversity, search=args.search,
                              beside_budget=args.beside_budget)
        with results_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        rows.append(row)
    # random with tune's budget: as many random configs as tune measured after the baseline
    args.top_k = max(r["tune_measurements"] for r in rows) - 1
    rows = retime(rows, matrices, backend=backend, op=args.op, feat=args.feat, top_k=args.top_k, seed=args.seed,
                  rounds=args.retime_rounds)
    summary = summarize(rows, args)
    write_sweeps(rows, args.out / "sweeps.parquet")
    public_rows = [{k: v for k, v in row.items() if k != "sweep"} for row in rows]
    (args.out / "summary.json").write_text(json.dumps({**summary, "rows": public_rows}, indent=1))
    (args.out / "summary.md").write_text(markdown(rows, summary))
    plot(rows, args.out / "tune_eval.png")
    print(markdown(rows, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
