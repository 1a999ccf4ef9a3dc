"""Collect a training dataset: measure sampled configs of many matrices on one target.

    python -m cognate_tvm.collect --target {llvm,spade,cuda} --op {spmm,sddmm}
        --corpus synthetic:N[:SEED]|DIR --configs-per-matrix C --out DIR
        [--seed S] [--feat N[,N...]] [--pool P | --stratify FIELD] [--chunk K] [--min-rows R] [--max-rows R]
        [--subset-min-rows R] [--subset-max-rows R] [--thread-candidates]
        [--threads T] [--repeats R] [--timeout S] [--arch sm_80|sm_90] [--check] [--quiet]
        [--executor {local,ray} [--ray-address ADDR] [--workers W]]
        [--rpc-tracker HOST:PORT --rpc-key KEY]

Each matrix gets its own seeded sample of C configs, plus the platform's
baseline config. With ``--pool P`` the samples are drawn from one seeded pool of
P configs that covers every value of every knob (`Space.sample_covering`), so a
compiled target (llvm) builds P kernels once instead of new ones for every
matrix; without it each matrix's sample covers every knob value on its own.
Several dense widths (``--feat 32,128``) are dealt to the matrices in turn, so
the data teaches how the best config moves with N. ``--subset-max-rows R``
measures only the corpus's matrices of at most R rows while keeping the corpus
itself (its names and sizes) that of --min-rows/--max-rows, so a second, costlier
pass (a wider N) over the smaller matrices shares names, and so the train /
validation / test split, with the first; ``--subset-min-rows R`` likewise measures only
its matrices of at least R rows (a pass at the target's size range over the larger ones).
``--thread-candidates`` samples only the
configs `tune` ranks for the backend's thread count (`Space.candidates`: on llvm
with 2+ threads, the parallel ones), for a multi-thread dataset.
Results go to a Parquet dataset (`cognate_tvm.data`): one part per chunk of K
configs, written atomically, so a run killed at any point (even with -9)
resumes where it stopped when started again with the same arguments, losing
and duplicating nothing. A failing config is recorded with its error and the
sweep goes on. `cognate_tvm.data.load_frame(DIR)` reads the result.

``--executor ray`` runs the tasks on a Ray cluster (`cognate_tvm.executors.RayExecutor`):
the one at ``--ray-address``, or a local one with ``--workers`` CPUs; this process
still writes every part, so resuming works the same. ``--rpc-tracker``/``--rpc-key``
(llvm, cuda) build kernels here and time them on a device behind a TVM RPC tracker
(`cognate_tvm.backends.rpc`).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence

import numpy as np

from . import backends, executors, space
from .backends.rpc_tracker import wants_rpc
from .cli import add_rpc_arguments, cli_call, make_backend
from .data import collect, load_frame
from .matrix.corpus import load_corpus
from .ops import OPS
from .space.sampling import config_sample

log = logging.getLogger(__name__)


def subset_by_rows(corpus: list, *, min_rows: int | None = None, max_rows: int | None = None) -> list:
    """The entries of a synthetic corpus with `min_rows` to `max_rows` rows (no bound where None)."""
    if max_rows is None and min_rows is None:
        return corpus
    if any(not hasattr(entry, "rows") for entry in corpus):
        # a file's row count is known only once it is read; filter such corpora by their files
        raise ValueError("--subset-min-rows / --subset-max-rows need a synthetic:N[:SEED] corpus")
    low, high = (0 if min_rows is None else min_rows), (np.inf if max_rows is None else max_rows)
    subset = [entry for entry in corpus if low <= entry.rows <= high]
    if not subset:
        raise ValueError(f"--subset-min-rows {min_rows} / --subset-max-rows {max_rows}: "
                         "no matrix of the corpus has a row count in that range")
    return subset


def parse_feats(text: str) -> list[int]:
    """'128' or '32,128' -> dense widths (each >= 1)."""
    try:
        feats = [int(part) for part in str(text).split(",")]
    except ValueError:
        raise ValueError(f"--feat must be N or N,N,... with integers, got {text!r}") from None
    if not feats or min(feats) < 1:
        raise ValueError(f"--feat widths must be >= 1, got {text!r}")
    return feats


def backend_options(args: argparse.Namespace) -> dict:
    """Timing options for the llvm target (other targets take none; --arch goes to `cli.make_backend`)."""
    if args.target != "llvm":
        return {}
    options = {"num_threads": args.threads, "repeats": args.repeats, "min_seconds": 0.002, "timeout_s": args.timeout}
    if not wants_rpc(args.rpc_tracker, args.rpc_key):
        # warmup 0: the backend's first (untimed) call already warms caches and pages (a remote device's
        # time_evaluator warms up itself)
        options["warmup"] = 0
    return options


def make_executor(args: argparse.Namespace) -> executors.Executor:
    """Where the tasks run: this process, or a Ray cluster."""
    if args.executor != "ray":
        if args.ray_address is not None or args.workers is not None:
            raise ValueError("--ray-address and --workers need --executor ray")
        return executors.create(args.executor)
    if args.target == "llvm" and args.threads is None:
        raise ValueError("--executor ray with --target llvm needs --threads T: each task reserves T CPUs "
                         "of its node, so tasks that share a node do not disturb each other's timing")
    return executors.create("ray", address=args.ray_address, workers=args.workers,
                            cpus_per_task=args.threads if args.target == "llvm" else 1)


def run(args: argparse.Namespace) -> dict:
    if args.configs_per_matrix < 1:
        raise ValueError(f"--configs-per-matrix must be >= 1, got {args.configs_per_matrix}")
    feats = parse_feats(args.feat)
    if args.pool < 0:
        raise ValueError(f"--pool must be >= 0 (0: no pool), got {args.pool}")
    corpus = subset_by_rows(load_corpus(args.corpus, min_rows=args.min_rows, max_rows=args.max_rows),
                            min_rows=args.subset_min_rows, max_rows=args.subset_max_rows)
    backend = make_backend(args, **backend_options(args))
    platform_space = space.create(backend.platform, args.op)
    # --thread-candidates: only what tune ranks for this thread count (on 2+ threads the parallel
    # configs), so a multi-thread dataset spends no time on kernels that leave cores idle
    candidates = platform_space.candidates(backend.kernel_threads()) if args.thread_candidates else None
    pool = platform_space.sample_covering(args.pool, seed=args.seed, configs=candidates) if args.pool else None
    if pool is not None and args.stratify:
        raise ValueError("--stratify samples each matrix's configs itself: it does not take --pool")
    configs = {entry.name: config_sample(platform_space, args.configs_per_matrix, args.seed, entry.name, pool,
                                         candidates, args.stratify)
               for entry in corpus}
    with make_executor(args) as executor:
        for n, feat in enumerate(feats):
            collect(backend, args.op, corpus[n::len(feats)], configs, args.out, feat=feat, check=args.check,
                    seed=args.seed, progress=not args.quiet, chunk=args.chunk, executor=executor)
    frame = load_frame(args.out)
    frame = frame[(frame["op"] == args.op) & (frame["platform"] == backend.platform)]
    return {"out": str(args.out), "matrices": int(frame["matrix"].nunique()), "rows": int(len(frame)),
            "failed": int(frame["time_ms"].isna().sum())}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cognate_tvm.collect", description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True, choices=backends.TARGETS)
    parser.add_argument("--op", required=True, choices=sorted(OPS))
    parser.add_argument("--corpus", required=True, help="synthetic:N[:SEED] or a directory of matrix files")
    parser.add_argument("--configs-per-matrix", type=int, required=True, help="sampled configs per matrix")
    parser.add_argument("--out", required=True, help="dataset directory (created; resumed if it exists)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the config samples and dense inputs")
    parser.add_argument("--feat", default="128", help="dense width N, or N,N,... dealt to the matrices in turn")
    parser.add_argument("--pool", type=int, default=0,
                        help="draw every matrix's configs from one knob-covering pool of P configs (0: none)")
    parser.add_argument("--stratify", default=None, metavar="FIELD",
                        help="an equal share of each matrix's sample for each value of this config field "
                             "(e.g. block_rows)")
    parser.add_argument("--chunk", type=int, default=25, help="configs per Parquet part (default 25)")
    parser.add_argument("--min-rows", type=int, default=1000, help="synthetic corpus: smallest matrix")
    parser.add_argument("--max-rows", type=int, default=1_000_000, help="synthetic corpus: largest matrix")
    parser.add_argument("--subset-min-rows", type=int, default=None,
                        help="synthetic corpus: measure only its matrices of at least this many rows")
    parser.add_argument("--subset-max-rows", type=int, default=None,
                        help="synthetic corpus: measure only its matrices of at most this many rows")
    parser.add_argument("--threads", type=int, default=None, help="llvm: threads (default: all cores)")
    parser.add_argument("--thread-candidates", action="store_true",
                        help="sample only the configs tune ranks for the thread count (llvm 2+ threads: parallel)")
    parser.add_argument("--repeats", type=int, default=3, help="llvm: timed repeats per config (median)")
    parser.add_argument("--timeout", type=float, default=5.0, help="llvm: seconds one kernel call may take")
    parser.add_argument("--arch", default=None, choices=("sm_80", "sm_90"),
                        help="cuda: the GPU architecture the kernels are built for (default: the backend's, sm_80)")
    parser.add_argument("--check", action="store_true", help="compare each output with scipy")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--executor", choices=executors.KINDS, default="local",
                        help="where tasks run: this process, or a Ray cluster (needs the [distributed] extra)")
    parser.add_argument("--ray-address", default=None,
                        help="--executor ray: the cluster to join (default: start a local one)")
    parser.add_argument("--workers", type=int, default=None,
                        help="--executor ray without --ray-address: CPUs of the local cluster (default: all)")
    add_rpc_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args, status, report = cli_call(run, make_parser(), argv)
    if status:
        return status
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
