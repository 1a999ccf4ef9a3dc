"""How good and how wide the CPU space is, against MKL and scipy.

On a generated corpus (all families, `cognate_tvm.matrix.generate_corpus`), for
each op and matrix: the baseline config's time, the best and the worst time
over the measured configs (the whole space or a seeded sample, the same for
every matrix, baseline included), and the vendor times (MKL's SpMM through
sparse_dot_mkl when it is installed, scipy; for SDDMM both use the numpy
gather-dot, see `cognate_tvm.backends.vendor`), timed in a separate worker
process that does not load TVM (see `vendor_times`). Reports geomeans of
MKL / best (speedup of the best config over MKL), baseline / best and
worst / best, as a markdown table, a CSV and a PNG.

The best config is the fastest one whose output, checked once against scipy
after the sweep, is right; a wrong one is recorded (`wrong_configs`) and the
next best is checked. The winner's check runs beside the baseline's, and
those two side-by-side times are the ones reported, so the winner's time is
not the luckiest of many noisy samples.

    python benchmarks/cpu_space.py --out benchmarks/results/cpu_space            # full
    python benchmarks/cpu_space.py --small --out /tmp/cpu_space_ci                # CI-sized

Each finished matrix is appended to OUT/<op>_results.jsonl; a rerun skips the
matrices already there (delete the file to recompute), so the run survives
being killed. Failing configs are recorded (counted per matrix), never fatal.
Timings on a shared machine are noisy: read them as such.
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from common import figure, present_geomean, setup_logging

log = logging.getLogger("cpu_space")

SETTINGS = {  # corpus and timing per mode
    "full": {"count": 30, "min_rows": 2000, "max_rows": 60_000, "configs": 256, "feat": 128,
             "warmup": 1, "repeats": 5, "min_seconds": 0.005},
    "small": {"count": 30, "min_rows": 300, "max_rows": 2000, "configs": 16, "feat": 32,
              "warmup": 1, "repeats": 3, "min_seconds": 0.0},
}


def load_done(path: Path) -> dict[str, dict]:
    """Finished matrices of a results file (a torn last line from a kill is ignored)."""
    done = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                log.warning("skipping a torn line in %s", path)
                continue
            done[row["name"]] = row
    return done


def append_row(path: Path, row: dict) -> None:
    """Append one JSON line (after a newline if a killed run left a torn last line)."""
    torn = path.is_file() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with open(path, "a") as f:
        f.write(("\n" if torn else "") + json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def vendor_times(entry, op: str, feat: int, seed: int, threads: int, use_mkl: bool) -> dict:
    """Vendor times of one matrix; runs in a worker process that never loads TVM.

    In the measuring process, TVM's thread pool (spinning workers) and MKL's
    OpenMP threads compete for the same cores, which made MKL look several
    times slower than it is; a separate process keeps the reference clean.
    """
    from cognate_tvm.backends.vendor import MKLLibrary, ScipyLibrary

    libraries = [ScipyLibrary()] + ([MKLLibrary(num_threads=threads)] if use_mkl else [])
    matrix = entry.build()
    out = {}
    for library in libraries:
        try:
            out[f"{library.name}_ms"] = library.time_ms(op, matrix, feat, seed=seed)
        except Exception as exc:  # a vendor failure is a gap in the table, not a crash
            out[f"{library.name}_ms"] = None
            out[f"{library.name}_error"] = f"{type(exc).__name__}: {exc}"
    return out


def measure_matrix(entry, op, backend, configs, feat: int, seed: int, vendor_pool, vendor_args) -> dict:
    """Every config of one matrix (in this process) and the vendors (in `vendor_pool`), in turn.

    The sweep times configs without checking them. The winner is the fastest
    config whose output, checked once against scipy, is right (`pick_checked`):
    a wrong one is listed in `wrong_configs` and the next best is tried. Its
    check runs beside the baseline's, and those two fresh, side-by-side times
    are the ones reported (the sweep's minimum is the luckiest of many noisy
    timings).
    """
    from cognate_tvm.backends.base import pick_checked

    matrix = entry.build()
    results = backend.measure(op, matrix, configs, feat, seed=seed)
    times = [r.time_ms for r in results]
    row = {"name": entry.name, "family": entry.family, "permuted": entry.permuted, "op": op,
           "feat": feat, "rows": matrix.shape[0], "cols": matrix.shape[1], "nnz": int(matrix.nnz),
           "times_ms": times, "errors": sum(r.error is not None for r in results),
           "first_error": next((r.error for r in results if r.error), None),
           "baseline_ms": times[0], "wrong_configs": []}
    pick = pick_checked(backend, op, matrix, results, feat, seed=seed, beside=configs[0])
    index = {config: n for n, config in enumerate(configs)}
    row["wrong_configs"] = [{"index": index[r.config], "error": r.error} for r in pick.rejected]
    for r in pick.rejected:
        log.warning("%s: config %d rejected as the winner: %s", entry.name, index[r.config], r.error)
    if pick.best is not None:
        row.update(best_ms=pick.best.time_ms, best_sweep_ms=times[index[pick.best.config]],
                   best_config=pick.best.config.to_dict(), best_correct=pick.best.correct,
                   baseline_ms=pick.beside.time_ms if pick.beside.time_ms is not None else times[0],
                   baseline_correct=pick.beside.correct)
        if pick.beside.correct is False:
            log.warning("%s: the baseline config's output is wrong; its ratios are left out", entry.name)
        rejected = {r.config for r in pick.rejected}
        ok = [(r.time_ms, n) for n, r in enumerate(results) if r.ok and r.config not in rejected]
        worst = max(ok)
        row.update(worst_ms=worst[0], worst_config=configs[worst[1]].to_dict())
    if vendor_pool is not None:
        row.update(vendor_pool.submit(vendor_times, entry, op, feat, seed, *vendor_args).result())
    return row


def summarize(rows: list[dict], vendor_names: list[str]) -> dict:
    ratios = {"baseline / best": [r["baseline_ms"] / r["best_ms"] for r in rows
                                  if r.get("best_ms") and r.get("baseline_ms")
                                  and r.get("baseline_correct") is not False],
              "worst / best": [r["worst_ms"] / r["best_ms"] for r in rows if r.get("best_ms")]}
    for name in vendor_names:
        ratios[f"{name} / best"] = [r[f"{name}_ms"] / r["best_ms"] for r in rows
                                    if r.get("best_ms") and r.get(f"{name}_ms")]
        ratios[f"{name} / baseline"] = [r[f"{name}_ms"] / r["baseline_ms"] for r in rows
                                        if r.get("baseline_ms") and r.get(f"{name}_ms")
                                        and r.get("baseline_correct") is not False]
    return {key: {"geomean": present_geomean(v, empty=np.nan), "min": float(np.min(v)) if v else None,
                  "max": float(np.max(v)) if v else None, "matrices": len(v)}
            for key, v in ratios.items()}


def write_reports(out: Path, op: str, rows: list[dict], vendor_names: list[str], meta: dict) -> dict:
    summary = summarize(rows, vendor_names)
    columns = ["name", "family", "rows", "nnz", "baseline_ms", "best_ms", "worst_ms"] + \
        [f"{n}_ms" for n in vendor_names] + ["errors", "wrong"]
    rows = [{**r, "wrong": len(r.get("wrong_configs", []))} for r in rows]
    with open(out / f"{op}_table.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)

    def cell(value):
        return "-" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))

    lines = [f"# CPU space, {op}: {len(rows)} matrices", "",
             "Ratios > 1 mean the best config in the space is faster.", "",
             "| ratio | geomean | min | max | matrices |", "|---|---|---|---|---|"]
    for key, s in summary.items():
        lines.append(f"| {key} | {cell(s['geomean'])} | {cell(s['min'])} | {cell(s['max'])} | {s['matrices']} |")
    lines += [""] + [f"- `{name}` = {method}" for name, method in meta.get("vendors", {}).items()]
    lines += ["", "Settings: " + json.dumps(meta, sort_keys=True), "",
              "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    (out / f"{op}_summary.md").write_text("\n".join(lines) + "\n")
    (out / f"{op}_summary.json").write_text(json.dumps({"summary": summary, "settings": meta}, indent=1))
    plot(out / f"{op}_space.png", op, rows, vendor_names)
    return summary


def plot(path: Path, op: str, rows: list[dict], vendor_names: list[str]) -> None:
    rows = [r for r in rows if r.get("best_ms")]
    rows.sort(key=lambda r: r["nnz"])
    x = np.arange(len(rows))
    series = [("baseline", "baseline_ms"), ("worst", "worst_ms")] + [(n, f"{n}_ms") for n in vendor_names]
    with figure(path, figsize=(max(8, 0.35 * len(rows)), 5)) as (_, ax):
        for label, key in series:
            ys = [r[key] / r["best_ms"] if r.get(key) else np.nan for r in rows]
            ax.plot(x, ys, "o", label=f"{label} / best (geomean {present_geomean(ys, empty=np.nan):.2f})")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(x, [r["name"] for r in rows], rotation=90, fontsize=6)
        ax.set_ylabel("time / best-in-space time")
        ax.set_title(f"CPU space, {op}: time relative to the best measured config (matrices by nnz)")
        ax.legend(fontsize=8)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cpu_space"))
    parser.add_argument("--small", action="store_true", help="CI-sized: small matrices, 16 configs")
    parser.add_argument("--ops", nargs="+", default=["spmm"], choices=["spmm", "sddmm"])
    parser.add_argument("--count", type=int, help="matrices (default 30)")
    parser.add_argument("--configs", help="'all' or the sample size (default 256; 16 with --small)")
    parser.add_argument("--feat", type=int, help="dense width (default 128; 32 with --small)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, default=None, help="kernel cache (default: user cache)")
    parser.add_argument("--no-vendor", action="store_true", help="skip MKL and scipy")
    args = parser.parse_args(argv)
    setup_logging()

    settings = dict(SETTINGS["small" if args.small else "full"])
    for key in ("count", "feat"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    if args.configs is not None:
        settings["configs"] = args.configs

    from cognate_tvm.backends.cpu import LLVMBackend
    from cognate_tvm.backends.vendor import MKLLibrary, ScipyLibrary, mkl_available
    from cognate_tvm.kernels.cache import DEFAULT_CACHE_DIR
    from cognate_tvm.matrix import generate_corpus
    from cognate_tvm.space.cpu import CPUSpace

    backend = LLVMBackend(num_threads=args.threads, cache_dir=args.cache_dir or DEFAULT_CACHE_DIR,
                          warmup=settings["warmup"], repeats=settings["repeats"],
                          min_seconds=settings["min_seconds"])
    vendors = [] if args.no_vendor else [ScipyLibrary()]
    if not args.no_vendor and mkl_available():
        vendors.append(MKLLibrary(num_threads=args.threads))
    vendor_names = [v.name for v in vendors]
    vendor_pool = None if args.no_vendor else ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    vendor_args = (args.threads, "mkl" in vendor_names)
    corpus = generate_corpus(settings["count"], seed=args.seed, min_rows=settings["min_rows"],
                             max_rows=settings["max_rows"])
    args.out.mkdir(parents=True, exist_ok=True)
    for op in args.ops:
        space = CPUSpace(op)
        spec = settings["configs"]
        sample = space.configs() if str(spec) == "all" else space.sample(int(spec), seed=args.seed)
        configs = [space.baseline()] + [c for c in sample if c != space.baseline()]
        # Libraries that run the same routine for this op (SDDMM: all use numpy) are reported once.
        methods = {}
        for library in vendors:
            methods.setdefault(library.method(op), library.name)
        op_vendors = list(methods.values())
        meta = {**settings, "op": op, "threads": args.threads, "seed": args.seed,
                "measured_configs": len(configs), "space_size": len(space),
                "vendors": {name: method for method, name in methods.items()},
                "machine": backend.metadata()}
        (args.out / f"{op}_configs.json").write_text(json.dumps([c.to_dict() for c in configs]))
        results_path = args.out / f"{op}_results.jsonl"
        done = load_done(results_path)
        unchecked = [n for n, r in done.items() if "wrong_configs" not in r]
        if unchecked:  # rows written before winners were checked against scipy: measure again
            log.info("%s: %d matrices were picked without checking the winner; measuring them again",
                     op, len(unchecked))
            done = {n: r for n, r in done.items() if n not in unchecked}
        stale = [n for n, r in done.items() if r.get("feat") != settings["feat"]
                 or len(r.get("times_ms", [])) != len(configs)]
        if stale:
            parser.error(f"{results_path} holds results of other settings ({stale[0]}...); "
                         f"use another --out or delete it")
        todo = [e for e in corpus if e.name not in done]
        log.info("%s: %d matrices done, %d to go, %d configs each", op, len(done), len(todo), len(configs))
        start = time.time()
        for entry in tqdm(todo, desc=f"{op} matrices", unit="matrix", file=sys.stderr):
            row = measure_matrix(entry, op, backend, configs, settings["feat"], args.seed, vendor_pool,
                                 vendor_args)
            append_row(results_path, row)
            done[entry.name] = row
        rows = [done[e.name] for e in corpus if e.name in done]
        summary = write_reports(args.out, op, rows, op_vendors, meta)
        log.info("%s finished in %.0f s", op, time.time() - start)
        for key, s in summary.items():
            print(f"{op}: {key}: geomean {s['geomean']:.3f} over {s['matrices']} matrices")
    if vendor_pool is not None:
        vendor_pool.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
