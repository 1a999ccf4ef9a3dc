"""MetaSchedule on sparse workloads: CognateModel() against MetaSchedule's XGBoost cost model and random search.

For each of `--matrices` generated matrices (families in turn, rows in
[--min-rows, --max-rows], seeds from 9,100,000 on, unseen by the shipped
model) and each cost model (`--methods`: ``cognate`` = ``CognateModel()`` with
the shipped CPU model, fine-tuned on the search's own measurements; ``xgb`` =
MetaSchedule's default XGBoost model; ``random``; and, only when asked,
``cognate_tune_kernels`` = ``CognateModel(platform="cpu")``, the model of tune's
kernels where ``cognate`` loads the one fine-tuned on MetaSchedule's, where it ships),
`cognate_tvm.metaschedule.tune_sparse` runs one search of the largest of
`--trials` (default 8 16 32) in its own work dir, and the best after each
trial count is read from the search's measurements in the order it made them
(batches of 8: a search's first 8 trials are what an 8-trial search of the same
seed measures), so every method's curve is one search, as a tuner's user sees it.

Three scores per (method, trials), geomeans over matrices:
- record: the search's own record of its best, against the best any search recorded
  on that matrix;
- re-timed: each search's `--finalists` (8, as `tune_sparse`) fastest records at every trial count are
  built once per matrix, their outputs checked against scipy, and timed in
  `--retime-rounds` (5) rounds with the order rotated each round; the record's pick at
  its median over rounds, against the best median of that matrix;
- confirmed: the fastest finalist's median, the same way (what `tune_sparse` returns:
  it re-times its own finalists). Searches run minutes apart on a noisy machine record
  the same config with up to 1.8x drift; the rounds time all picks side by side.
Beside them, the best fixed config, leave one out: on each matrix, the re-timed config
with the best geomean on the other matrices (a pick that fails here scores 0 and counts
as failed). With `--per-matrix-pool` (each matrix re-times only its own searches' picks, so
there is no cross-matrix pool to choose from) it is instead the best fixed config that the
model `CognateModel()` loads keeps from its own training matrices, re-timed on every matrix. Goal: CognateModel reaches 0.95 within 8 trials, where
XGBoost needs at least 4x more trials. Outputs in --out: ``results.jsonl`` (one object
per search; a rerun skips the searches already there), ``retimed.jsonl`` (per matrix and
config, resumed the same way), ``runs.parquet`` (per search and trial count: its pick,
finalists and fractions), ``summary.json`` (the rest), ``summary.md`` and
``metaschedule_compare.png``.

    python benchmarks/metaschedule_compare.py --out benchmarks/results/ms_compare          # full: 5 matrices
    python benchmarks/metaschedule_compare.py --matrices 2 --trials 8 16 --min-rows 1000 --max-rows 1000 \\
        --feat 32 --retime-rounds 2 --out /tmp/ms_compare                                   # test-sized

Runs take ~10 s of TVM start-up once per process, then ~1-2 s per trial on an
idle 2-core machine. A search that fails is recorded with its error, never fatal.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from cognate_tvm import baselines
from cognate_tvm.space import create as create_space
from common import add_matrix_arguments, eval_matrices, present_geomean, quantiles, save_png, setup_logging

EVAL_SEED = 9_100_000
METHODS = ("cognate", "xgb", "random", "cognate_tune_kernels")
DEFAULT_METHODS = METHODS[:3]
GOAL_FRACTION = 0.95
LOO_FIXED = "chosen on the other matrices among the runs' best configs"
log = logging.getLogger("metaschedule_compare")


def cost_model(method: str, pretrained_root):
    from cognate_tvm.metaschedule import CognateModel

    if method == "cognate":
        return CognateModel(pretrained_root=pretrained_root)
    if method == "cognate_tune_kernels":  # the CPU model of tune's kernels, not fine-tuned on MetaSchedule's
        return CognateModel(pretrained_root=pretrained_root, platform="cpu")
    if method in ("xgb", "random"):
        return method
    raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHODS)}")


def run_one(name, matrix, *, op, method, trials, feat, threads, seed, pretrained_root) -> dict:
    """One search of `trials` trials; its measurements in search order (``trials_log``: [config, ms])."""
    from cognate_tvm.metaschedule import tune_sparse

    row = {"matrix": name, "rows": matrix.shape[0], "nnz": int(matrix.nnz), "op": op, "method": method,
           "max_trials": trials, "feat": feat}
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as work_dir:
            result = tune_sparse(op, matrix, feat=feat, max_trials=trials, cost_model=cost_model(method,
                                 pretrained_root), work_dir=work_dir, num_threads=threads, seed=seed)
        row.update(best_ms=result.time_ms, config=result.config.to_dict(), records=result.records,
                   rejected=[c.to_json() for c, _ in result.rejected],
                   trials_log=[[c.to_json(), t] for c, t in result.trials], error=None)
    except Exception as exc:  # a failing search is a result
        log.warning("%s %s %d trials failed: %s", name, method, trials, exc)
        row.update(best_ms=None, config=None, records=0, rejected=[], trials_log=[],
                   error=f"{type(exc).__name__}: {exc}")
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def at_trials(row: dict, trials: int, finalists: int = 1) -> dict:
    """The search `row` as it stood after its first `trials` measurements: its fastest one
    (``best_ms``, ``config``: a config JSON; None when none succeeded) and its `finalists` fastest
    distinct configs (``finalists``, by their best record), leaving out the configs whose output the
    search found wrong."""
    wrong = set(row.get("rejected", ()))
    record: dict[str, float] = {}
    for config, ms in row["trials_log"][:trials]:
        if ms is not None and config not in wrong:
            record[config] = min(ms, record.get(config, np.inf))
    ranked = sorted(record, key=record.get)
    return {"matrix": row["matrix"], "method": row["method"], "trials": trials,
            "best_ms": record[ranked[0]] if ranked else None, "config": ranked[0] if ranked else None,
            "finalists": ranked[:finalists], "error": row.get("error")}


def picked(views: list[dict]) -> list[str]:
    """Every config the views picked (their finalists), sorted."""
    return sorted({c for v in views for c in v.get("finalists") or [v["config"]] if c})


def shipped_fixed_config(op: str, feat: int, threads: int, pretrained_root) -> str | None:
    """The best fixed config (JSON) of the model `CognateModel()` loads, over that model's training
    matrices, among the configs the searches can measure; None when it keeps none."""
    from cognate_tvm.metaschedule import reachable_configs, shipped_platform
    from cognate_tvm.model.loading import load_shipped_model

    space = create_space("cpu", op)
    model, _, _ = load_shipped_model(op, shipped_platform(op, threads, root=pretrained_root),
                                     root=pretrained_root, threads=threads)
    allowed = set(reachable_configs(op, feat)) & set(space.candidates(threads))
    return next((c.to_json() for c in model.fixed_configs(space) if c in allowed), None)


def fixed_fractions(times: dict, config: str) -> dict:
    """{matrix: best-of-pool time / `config`'s time; 0.0 where it failed}."""
    out = {}
    for name, own in times.items():
        best = best_retimed_ms(times, name)
        out[name] = None if best is None else (best / own[config] if own.get(config) else 0.0)
    return out


def retime_configs(views: list[dict], matrices, *, op, feat, threads, rounds: int, path: Path,
                   per_matrix: bool = False, always: tuple = ()) -> dict:
    """{matrix: {config JSON: median ms over `rounds`, or None}}: every config the views picked (with
    `per_matrix`, only those picked on that matrix) and the configs `always`, built once per matrix, checked against scipy, then
    timed in rounds, the order rotated each round (so no config always runs first while the machine
    drifts). Resumes per matrix from `path`."""
    from cognate_tvm.kernels.cpu import cpu_target
    from cognate_tvm.metaschedule import BuiltKernel, device_inputs, schedule_config, time_side_by_side

    space = create_space("cpu", op)
    pool = picked(views)
    times: dict = {}
    if path.is_file():
        for r in map(json.loads, path.read_text().splitlines()):
            times.setdefault(r["matrix"], {})[r["config"]] = r["time_ms"]
    target = cpu_target(threads)
    for name, matrix in tqdm(matrices, desc="re-timing", disable=None):
        if per_matrix:
            pool = picked([v for v in views if v["matrix"] == name])
        pool = sorted(set(pool) | set(always))
        todo = [c for c in pool if c not in times.get(name, {})]
        if not todo:
            continue
        kernels, errors, samples = {}, {}, {c: [] for c in todo}
        matrix = matrix.astype(np.float32)  # one copy, which every kernel below shares, with its inputs
        inputs = device_inputs(op, matrix, feat)
        for config in todo:
            try:
                kernel = BuiltKernel(op, schedule_config(op, matrix, feat, space.config_from_json(config),
                                                         workers=threads), matrix, feat, target, inputs=inputs)
                if kernel.correct():
                    kernels[config] = kernel
                else:
                    errors[config] = "wrong output"
            except Exception as exc:  # a failing config is a result
                errors[config] = f"{type(exc).__name__}: {exc}"
        ready = list(kernels)
        samples.update(zip(ready, time_side_by_side([kernels[c] for c in ready], rounds)))
        with path.open("a") as f:
            for config in todo:
                median = float(np.median(samples[config])) if samples[config] else None
                times.setdefault(name, {})[config] = median
                f.write(json.dumps({"matrix": name, "config": config, "time_ms": median,
                                    "times_ms": samples[config], "error": errors.get(config)}) + "\n")
    return times


def best_retimed_ms(times: dict, name: str) -> float | None:
    """The fastest re-timed config's time on matrix `name` (None if none ran)."""
    own = [t for t in times.get(name, {}).values() if t]
    return min(own) if own else None


def best_fixed_leave_one_out(times: dict) -> dict:
    """{matrix: best-of-pool time / the time of the best fixed config of the other matrices
    (`baselines.best_fixed_leave_one_out`); 0.0 when it failed here, None with no pick}."""
    out = {}
    for name, pick in baselines.best_fixed_leave_one_out(times).items():
        best = best_retimed_ms(times, name)
        if pick is None or best is None:
            out[name] = None
        else:
            out[name] = best / times[name][pick] if times[name].get(pick) else 0.0
    return out


def add_retimed(views: list[dict], times: dict) -> None:
    """Each view's best record re-timed on its matrix (``retimed_ms``, from `retime_configs`'s `times`),
    its finalists' fastest re-timed config (``confirmed_ms``, ``confirmed_config``: what a tuner that
    re-times its top records side by side before choosing would pick), and the best re-timed config of
    that matrix (``retimed_best_ms``)."""
    for v in views:
        own = times.get(v["matrix"], {})
        v["retimed_ms"] = own.get(v["config"]) if v.get("config") else None
        timed = [(own[c], c) for c in v.get("finalists") or [] if own.get(c)]
        v["confirmed_ms"], v["confirmed_config"] = min(timed) if timed else (None, None)
        v["retimed_best_ms"] = best_retimed_ms(times, v["matrix"])


def record_drift(searches: list[dict], times: dict, methods) -> dict:
    """{method: how its searches' records compare with the re-timing: the ratio of each logged record
    to its config's re-timed median on that matrix (``n``, ``median``, ``p10``, ``p90``; None with no
    re-timed config)}. Above 1: the runner recorded the config slower than the side-by-side re-timing."""
    out = {}
    for method in methods:
        ratios = [ms / times[r["matrix"]][config] for r in searches if r["method"] == method
                  for config, ms in r.get("trials_log", ()) if ms and times.get(r["matrix"], {}).get(config)]
        out[method] = quantiles(ratios) if ratios else None
    return out


def fractions_table(rows: list[dict], methods, trials, key: str) -> dict:
    """{method@trials: geomean of the rows' `key` fractions, runs, failed}."""
    table = {}
    for method in methods:
        for t in trials:
            fractions = [r.get(key) for r in rows if r["method"] == method and r["trials"] == t]
            ok = [f for f in fractions if f]
            table[f"{method}@{t}"] = {"geomean_fraction": present_geomean(ok),
                                     "runs": len(fractions), "failed": len(fractions) - len(ok)}
    return table


def summarize(rows: list[dict], methods, trials, fixed: dict | None = None) -> dict:
    """Two scores per run: its search's own best time against the best any search recorded
    (``fraction``), and, when the runs' configs were re-timed, its config's re-timed time against
    the best re-timed config (``retimed_fraction``: one timing source, as for the best fixed config)."""
    best = {}
    for r in rows:
        if r["best_ms"]:
            best[r["matrix"]] = min(best.get(r["matrix"], np.inf), r["best_ms"])
    for r in rows:
        r["fraction"] = best[r["matrix"]] / r["best_ms"] if r["best_ms"] and r["matrix"] in best else None
        if r.get("retimed_best_ms"):
            r["retimed_fraction"] = r["retimed_best_ms"] / r["retimed_ms"] if r.get("retimed_ms") else None
            r["confirmed_fraction"] = r["retimed_best_ms"] / r["confirmed_ms"] if r.get("confirmed_ms") else None
    table = fractions_table(rows, methods, trials, "fraction")
    retimed = fractions_table(rows, methods, trials, "retimed_fraction") \
        if any("retimed_fraction" in r for r in rows) else None
    confirmed = fractions_table(rows, methods, trials, "confirmed_fraction") \
        if any("confirmed_fraction" in r for r in rows) else None

    def first_reaching(method, scores=table):
        for t in trials:
            g = scores[f"{method}@{t}"]["geomean_fraction"]
            if g is not None and g >= GOAL_FRACTION:
                return t
        return None

    fixed_ok = [f for f in (fixed or {}).values() if f]
    best_fixed = {"geomean_fraction": present_geomean(fixed_ok),
                  "matrices": len(fixed or {}), "failed": len(fixed or {}) - len(fixed_ok), "per_matrix": fixed}
    return {"table": table, "retimed_table": retimed, "confirmed_table": confirmed, "best_fixed": best_fixed,
            "matrices": len(best), "goal_fraction": GOAL_FRACTION,
            "trials_to_goal": {m: first_reaching(m) for m in methods},
            "trials_to_goal_retimed": {m: first_reaching(m, retimed) for m in methods} if retimed else None,
            "trials_to_goal_confirmed": {m: first_reaching(m, confirmed) for m in methods} if confirmed else None,
            "goal": f"cognate >= {GOAL_FRACTION} within {min(trials)} trials; xgb needs >= 4x more"}


def table_lines(table: dict, methods, trials) -> list[str]:
    lines = ["| cost model | " + " | ".join(f"{t} trials" for t in trials) + " |", "|---|" + "---|" * len(trials)]
    for m in methods:
        cells = []
        for t in trials:
            cell = table[f"{m}@{t}"]
            g = cell["geomean_fraction"]
            cells.append(("-" if g is None else f"{g:.3f}") + (f" ({cell['failed']} failed)" if cell["failed"] else ""))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def markdown(summary: dict, methods, trials) -> str:
    lines = ["# MetaSchedule: best time found / best of all runs (geomean over matrices)", "",
             "One search per method and matrix; its best after the first t trials. "
             "Each search's own record of its best:", ""] + table_lines(summary["table"], methods, trials)
    if summary.get("retimed_table"):
        lines += ["", f"Each search's best config re-timed side by side with every other pick of the matrix "
                  f"({summary.get('retime_rounds')} rounds, order rotated, medians), against the best re-timed "
                  "config of the matrix:", ""] + table_lines(summary["retimed_table"], methods, trials)
    if summary.get("confirmed_table"):
        lines += ["", f"Each search's {summary.get('finalists')} fastest records re-timed the same way and the "
                  "fastest kept (a tuner that confirms its finalists before choosing):", ""]
        lines += table_lines(summary["confirmed_table"], methods, trials)
    fixed = summary.get("best_fixed") or {}
    if fixed.get("geomean_fraction") is not None:
        lines += ["", f"best fixed config ({fixed.get('chosen') or LOO_FIXED}, re-timed with the picks): "
                  f"{fixed['geomean_fraction']:.3f} of the best re-timed config, 0 measurements"
                  + (f" ({fixed['failed']} failed)" if fixed["failed"] else "")]
    def reach(trials_to_goal):
        return ", ".join(f"{m}: {t if t is not None else 'not reached'}" for m, t in trials_to_goal.items())

    lines += ["", f"{summary['matrices']} matrices; trials to reach {summary['goal_fraction']}: records: "
              + reach(summary["trials_to_goal"])
              + (f"; re-timed: {reach(summary['trials_to_goal_retimed'])}" if summary.get("trials_to_goal_retimed")
                 else "")
              + (f"; finalists confirmed: {reach(summary['trials_to_goal_confirmed'])}"
                 if summary.get("trials_to_goal_confirmed") else "")]
    drift = {m: d for m, d in (summary.get("record_drift") or {}).items() if d}
    if drift:
        lines += ["", "Each logged record / its config's re-timed median on that matrix (median [p10, p90], "
                  "records): " + "; ".join(f"{m}: {d['median']:.2f} [{d['p10']:.2f}, {d['p90']:.2f}], {d['n']}"
                                           for m, d in drift.items())]
    return "\n".join(lines) + "\n"


def plot(summary: dict, methods, trials, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the confirmed picks when re-timed (what tune_sparse returns: its finalists re-timed side by side),
    # else the records
    table = summary.get("confirmed_table") or summary["table"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for m in methods:
        ys = [table[f"{m}@{t}"]["geomean_fraction"] for t in trials]
        ax.plot(trials, [np.nan if y is None else y for y in ys], marker="o", label=m)
    fixed = (summary.get("best_fixed") or {}).get("geomean_fraction")
    if fixed is not None:
        ax.axhline(fixed, color="black", ls=":", lw=1.0, label="best fixed config")
    ax.axhline(summary["goal_fraction"], color="grey", ls="--", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(trials, [str(t) for t in trials])
    ax.set_xlabel("trials")
    ax.set_ylabel("best of all picks / pick" + (" (re-timed)" if summary.get("confirmed_table") else ""))
    ax.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=120)
    plt.close(fig)


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The op and the matrix set (`eval_matrices`), shared with runner_drift.py so both see the same matrices."""
    parser.add_argument("--op", default="spmm", choices=["spmm", "sddmm"])
    add_matrix_arguments(parser, matrices=5, min_rows=4000, max_rows=30000)
    parser.add_argument("--feat", type=int, default=128)


def write_runs(views: list[dict], path: Path) -> None:
    """One row per search and trial count (its picks, finalists and fractions) as a table: Parquet
    stores the repeated config strings a fraction as large as the summary's JSON does."""
    pd.DataFrame(views).to_parquet(path, index=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_workload_arguments(parser)
    parser.add_argument("--trials", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=METHODS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1, help="search seed (>= 1)")
    parser.add_argument("--pretrained-dir", type=Path, default=None)
    parser.add_argument("--finalists", type=int, default=8,
                        help="each search's fastest records re-timed; the fastest of them is its confirmed pick")
    parser.add_argument("--retime-rounds", type=int, default=5,
                        help="rounds of re-timing every pick side by side (0: none, no best fixed config)")
    parser.add_argument("--per-matrix-pool", action="store_true",
                        help="re-time on each matrix only the picks of its own searches (fewer kernels to time "
                             "with many --finalists; the best fixed config is then the shipped model's)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    # the re-timing runs in this process: size TVM's thread pool as the searches' runners do
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    setup_logging()
    args.out.mkdir(parents=True, exist_ok=True)
    trials = sorted(set(args.trials))
    if trials[0] < 1 or args.retime_rounds < 0 or args.finalists < 1:
        parser.error("--trials and --finalists must be >= 1, --retime-rounds >= 0")
    results_path = args.out / "results.jsonl"
    done = {}
    if results_path.is_file():
        done = {(r["matrix"], r["method"], r.get("max_trials")): r
                for r in map(json.loads, results_path.read_text().splitlines()) if r}
    searches = []
    matrices = eval_matrices(args.matrices, min_rows=args.min_rows, max_rows=args.max_rows, seed=EVAL_SEED)
    for name, matrix in matrices:
        for method in args.methods:
            key = (name, method, trials[-1])
            if key in done:
                searches.append(done[key])
                continue
            log.info("%s (%dx%d, nnz %d): %s, %d trials", name, *matrix.shape, matrix.nnz, method, trials[-1])
            row = run_one(name, matrix, op=args.op, method=method, trials=trials[-1], feat=args.feat,
                          threads=args.threads, seed=args.seed, pretrained_root=args.pretrained_dir)
            with results_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            searches.append(row)
    views = [at_trials(row, t, args.finalists) for row in searches for t in trials]
    fixed, fixed_chosen = None, None
    if args.retime_rounds:
        # one pool per matrix holds no pick of the others to choose a fixed config from: the fixed config
        # is the one the shipped model keeps from its own training matrices, timed on every matrix
        shipped_fixed = shipped_fixed_config(args.op, args.feat, args.threads, args.pretrained_dir) \
            if args.per_matrix_pool else None
        times = retime_configs(views, matrices, op=args.op, feat=args.feat, threads=args.threads,
                               rounds=args.retime_rounds, path=args.out / "retimed.jsonl",
                               per_matrix=args.per_matrix_pool, always=(shipped_fixed,) if shipped_fixed else ())
        if shipped_fixed:
            fixed, fixed_chosen = fixed_fractions(times, shipped_fixed), f"the shipped model's, {shipped_fixed}"
        elif not args.per_matrix_pool:
            fixed, fixed_chosen = best_fixed_leave_one_out(times), LOO_FIXED
        add_retimed(views, times)
    summary = summarize(views, args.methods, trials, fixed)
    summary["best_fixed"]["chosen"] = fixed_chosen
    summary.update(retime_rounds=args.retime_rounds, finalists=args.finalists, runs=views,
                   record_drift=record_drift(searches, times, args.methods) if args.retime_rounds else None)
    write_runs(views, args.out / "runs.parquet")
    (args.out / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    (args.out / "summary.md").write_text(markdown(summary, args.methods, trials))
    plot(summary, args.methods, trials, args.out / "metaschedule_compare.png")
    print(markdown(summary, args.methods, trials))
    return 0


if __name__ == "__main__":
    sys.exit(main())
