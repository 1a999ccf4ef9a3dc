"""Collection throughput: measurements per second of each executor, on SPADE and on llvm.

    python benchmarks/collect_throughput.py --out benchmarks/results/collect_throughput

For every target (``spade``: the C++ simulator; ``llvm``: TVM-compiled kernels run
here) the same collection — a generated corpus, each matrix's seeded config sample
(the `collect` CLI's), in Parquet parts of ``--chunk`` configs — is run into a
fresh dataset by the local executor (this process) and by a local Ray cluster of
1 and 2 workers. Reported per run: rows written, wall seconds of the collection
(start-up is timed apart, as a long collection pays it once: the Ray cluster's
start and two tiny tasks per worker, so that every worker process has imported
the package and TVM),
measurements/s, and the speed-up over the local executor. Every executor runs
``--rounds`` times, in turn (local, Ray 1, Ray 2, local, ...), and the table gives
the median and the range over the rounds, as the load of a shared machine changes
from one minute to the next.

Every measurement process uses one thread (``--threads``): W Ray workers are W
measurements at a time. On llvm each run starts with an empty kernel cache
directory, so compiling is part of the cost (each run compiles every kernel it
needs once per process, or loads it from the directory when another process of
the run compiled it first); ``--warm`` instead compiles every kernel once, into
one directory that every run loads from, which isolates measuring.

The machine's load average (1 min) is recorded before and after every run: on a
shared machine another job's work slows every run, so compare runs made side
by side. Writes ``OUT/results.json`` and ``OUT/results.md``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from cognate_tvm import backends, executors, space
from cognate_tvm.space.sampling import config_sample
from cognate_tvm.data import collect, load_frame
from cognate_tvm.matrix import generate
from cognate_tvm.matrix.corpus import load_corpus
from common import setup_logging

log = logging.getLogger("collect_throughput")


def make_backend(target: str, args: argparse.Namespace, cache_dir: Path):
    """The target's backend with one thread, timed as the collect CLI times it."""
    if target == "llvm":
        return backends.create("llvm", num_threads=args.threads, cache_dir=cache_dir, warmup=0,
                               repeats=args.repeats, min_seconds=0.002, timeout_s=5.0)
    if target == "spade":
        return backends.create("spade", workers=args.threads)
    return backends.create(target)


def plan(target: str, args: argparse.Namespace):
    """(corpus, configs per matrix): the same sample the collect CLI draws."""
    corpus = load_corpus(f"synthetic:{args.matrices}:{args.seed}", min_rows=args.min_rows, max_rows=args.max_rows)
    platform_space = space.create(make_backend(target, args, None).platform, args.op)
    pool = platform_space.sample_covering(args.pool, seed=args.seed) if args.pool else None
    configs = {e.name: config_sample(platform_space, args.configs, args.seed, e.name, pool) for e in corpus}
    return corpus, configs


def warm_kernels(target: str, args: argparse.Namespace, configs: dict, cache_dir: Path) -> float:
    """Compile every kernel of the run into `cache_dir` (llvm); the seconds it took."""
    if target != "llvm":
        return 0.0
    backend = make_backend(target, args, cache_dir)
    start = time.perf_counter()
    for config in {c for chosen in configs.values() for c in chosen}:
        backend.kernel(args.op, config, args.feat)
    return time.perf_counter() - start


def warm_up(target: str, args: argparse.Namespace, executor, workers: int, scratch: Path) -> None:
    """Two tiny tasks per worker (the baseline config on a 200-row matrix), so every worker
    process has imported the package and TVM before timing: a long collection pays that once."""
    tiny = {f"warm{n}": generate("banded", 200, seed=n) for n in range(2 * workers)}
    backend = make_backend(target, args, scratch / "kernels")
    baseline = space.create(backend.platform, args.op).baseline()
    collect(backend, args.op, tiny, [baseline], scratch / "ds", feat=args.feat, progress=False, executor=executor)


def one_run(target: str, kind: str, workers: int, args: argparse.Namespace, scratch: Path,
            round_: int) -> dict:
    corpus, configs = plan(target, args)
    run_dir = scratch / f"{target}-{kind}-{workers}-{round_}"
    # cold: a new cache per run; warm: one cache for all runs, compiled before the first
    cache_dir = scratch / f"{target}-kernels" if args.warm else run_dir / "kernels"
    warm_s = warm_kernels(target, args, configs, cache_dir) if args.warm else 0.0
    backend = make_backend(target, args, cache_dir)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    executor = executors.create("ray", workers=workers) if kind == "ray" else executors.create("local")
    warm_up(target, args, executor, workers, run_dir / "warm-up")
    startup_s = time.perf_counter() - start
    try:
        start = time.perf_counter()
        collect(backend, args.op, corpus, configs, run_dir / "ds", feat=args.feat, seed=args.seed,
                progress=False, chunk=args.chunk, executor=executor)
        wall_s = time.perf_counter() - start
    finally:
        executor.close()
    frame = load_frame(run_dir / "ds")
    rows = len(frame)
    record = {"target": target, "executor": kind, "workers": workers, "round": round_, "rows": rows,
              "failed": int(frame["time_ms"].isna().sum()), "tasks": len(list((run_dir / "ds").glob("*.parquet"))),
              "startup_s": round(startup_s, 2), "wall_s": round(wall_s, 2),
              "per_s": round(rows / wall_s, 2), "warm_compile_s": round(warm_s, 2),
              "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}
    shutil.rmtree(run_dir, ignore_errors=True)
    log.warning("%s", record)
    return record


def markdown(report: dict) -> str:
    s = report["settings"]
    cache = f", {'warm' if s['warm'] else 'cold'} kernel cache (llvm)" if "llvm" in s["targets"] else ""
    lines = [f"Collection throughput, {s['op']} N={s['feat']}: {s['matrices']} generated matrices "
             f"({s['min_rows']}-{s['max_rows']} rows), {s['configs']} configs each + baseline, "
             f"chunks of {s['chunk']}, {s['threads']} thread per measuring process{cache}; "
             f"{report['machine']['cpus']} CPUs; {s['rounds']} rounds, each running every executor in turn.",
             "",
             "| target | executor | measurements/s, median (min-max) | vs local (median) | start-up s | "
             "load avg (1 min) |",
             "|---|---|---|---|---|---|"]
    for (target, kind, workers), runs in _by_executor(report["runs"]).items():
        per_s = [r["per_s"] for r in runs]
        local = statistics.median(r["per_s"] for r in report["runs"]
                                  if r["target"] == target and r["executor"] == "local")
        name = "local" if kind == "local" else f"ray, {workers} worker{'s' * (workers > 1)}"
        loads = [r["load_before"] for r in runs] + [r["load_after"] for r in runs]
        lines.append(f"| {target} | {name} | {statistics.median(per_s):.1f} ({min(per_s):.1f}-{max(per_s):.1f}) | "
                     f"{statistics.median(per_s) / local:.2f}x | "
                     f"{statistics.median(r['startup_s'] for r in runs):.1f} | "
                     f"{min(loads):.1f}-{max(loads):.1f} |")
    return "\n".join(lines) + "\n"


def _by_executor(runs: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in runs:
        out.setdefault((r["target"], r["executor"], r["workers"]), []).append(r)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--targets", nargs="+", default=["spade", "llvm"], choices=backends.TARGETS)
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2], help="Ray cluster sizes to run")
    parser.add_argument("--op", default="spmm")
    parser.add_argument("--matrices", type=int, default=8)
    parser.add_argument("--configs", type=int, default=24, help="sampled configs per matrix")
    parser.add_argument("--pool", type=int, default=40, help="draw configs from one covering pool (as --pool)")
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--feat", type=int, default=32)
    parser.add_argument("--min-rows", type=int, default=1000)
    parser.add_argument("--max-rows", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm", action="store_true", help="llvm: compile every kernel before timing")
    parser.add_argument("--rounds", type=int, default=3, help="times every executor runs (in turn)")
    args = parser.parse_args()
    setup_logging(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="collect_throughput_") as scratch:
        for target in args.targets:
            for round_ in range(args.rounds):  # in turn, so a change of the machine's load hits all alike
                runs.append(one_run(target, "local", 1, args, Path(scratch), round_))
                for workers in args.workers:
                    runs.append(one_run(target, "ray", workers, args, Path(scratch), round_))
    report = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "machine": {"cpus": os.cpu_count(), "processor": platform.processor(), "node": platform.node()},
              "runs": runs}
    (args.out / "results.json").write_text(json.dumps(report, indent=1))
    (args.out / "results.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
