"""MKL's SpMM against the CPU space's kernels and the memory-bandwidth floor, all on the same threads.

For each matrix of a fixed set (below; `--matrices` picks some by name, `--scale` multiplies their
row counts), SpMM C = A @ B with B dense K x N (N = `--feat`, 128), every kernel on `--threads` (2)
threads:

- MKL, preallocated output: ``sparse_dot_mkl.dot_product_mkl(A, B, out=C, out_scalar=0.0)`` into one
  C made before timing (``out_scalar=0.0`` overwrites C; without it MKL adds to it), and MKL
  allocating C per call (``dot_product_mkl(A, B)``, the project's usual vendor point):
  `MKLLibrary(preallocated=...)`, each timed in a fresh worker process that never loads TVM, in
  `--rounds` rounds (the two alternating), median kept; each output checked against scipy once (after
  two calls into the same C, so an accumulating output fails).
- the memory-bandwidth floor: the copy bandwidth of this machine on the same threads, the faster of two
  copies of a `--bandwidth-mb` (256) MB float32 array: torch's ``dst.copy_(src)`` with
  ``torch.set_num_threads(threads)``, and a TVM kernel that copies with the streaming stores of the
  `stream` knob (which skip the read of each line written, as the kernels may); read and write bytes
  counted: 2 x 256 MB per copy; median of 10 copies, each copy in its own worker process, measured
  before and after the matrices; the higher of the two is used), and per matrix

      floor_ms = minimal bytes / bandwidth,
      minimal bytes = 4 (M + 1) + 8 nnz   (A's CSR arrays: int32 row pointers; int32 index + float32 value
                                           per nonzero)
                    + 4 K N                (B read once)
                    + 4 M N                (C written once).

  Each kernel's "fraction of the floor" is floor_ms / its time (1.0: it moves no more than the minimal
  bytes at copy bandwidth; caches can in principle let a kernel exceed it slightly).
- the roofline floor: where SpMM has more arithmetic than bytes (many nonzeros per row), no kernel
  reaches the bandwidth floor, because the multiply-adds take longer than the traffic. So beside it:
  the dense GEMM rate on the same threads (``torch.mm`` of two `--gemm-size` (2048) square float32
  matrices, 2 n^3 flops, median of 5, in the same worker and at the same times as the copy; the higher
  reading used) and per matrix

      compute floor_ms = 2 nnz N / GEMM rate,      roofline floor_ms = max(floor_ms, compute floor_ms),

  a kernel's "fraction of the roofline" being roofline floor_ms / its time. GEMM reuses each loaded value
  many times, which SpMM cannot, so this floor too is below what any SpMM kernel reaches. The bfloat16
  kernel's roofline uses its own bandwidth floor (B in 2 bytes) and the same float32 compute floor (it
  multiplies in float32).
- the CPU space (`space.create("cpu", "spmm")`, `backends.create("llvm", num_threads=threads)`): the
  baseline config, and the best of a sample: the baseline and `--sample` (48) candidates
  (`space.candidates(threads)`) drawn with seed `--seed` + 1, plus every candidate that differs from
  the fastest of those only in the knobs `block_rows` / `balanced` / `stream` (where the config has them), all
  measured with ``check=True``, only correct results kept. The `--finalists` (3) fastest of that sweep
  are timed again below and the fastest there is "best of the sample".
- tune's pick: `cognate_tvm.tuning.tune` as ``python -m cognate_tvm.tune`` runs it by default (the
  adaptive search, the baseline + 7 measured, the winner checked).
- beside tune, with no more knowledge of the matrix: the best fixed config (the first of the model's
  best fixed configs, chosen on its training data, that the space offers on these threads) and random
  search with tune's number of measurements (the baseline and that many - 1 configs drawn, seed
  `--seed` + 2, from the sweep's sample; the fastest correct by the sweep's own times).
- side by side: the baseline, the finalists, tune's pick, the best fixed config and random search's
  pick are timed again in one
  `backends.base.measure_side_by_side` call per matrix, `--rounds` (5) rounds with the order
  rotated, outputs checked in the first; each time is the median over rounds. "best of the sample" is
  the finalist (the baseline is one) with the lowest median, so it is <= the baseline; "best of space
  found" ("best") is the fastest of every config timed there: all are points of the space, and a
  sample of 49 can miss the region that tune's search finds, so best <= tune's pick too.
- bfloat16 (when the llvm backend takes ``dtype``: a `measure` keyword, or a constructor option): the
  same sweep with B stored in bfloat16 (float32 accumulation and output), then `tune` measuring in
  bfloat16 (where the backend's constructor takes the dtype); the sweep's best, the float32 best (the
  same config in bfloat16 too) and bfloat16 tune's pick timed again beside the float32 best and float32
  tune's pick, `--rounds` rounds alternating the dtypes; bf16 / fp32 = float32 best's median / the
  fastest bfloat16 median (> 1: bfloat16 is faster), tune bf16 / fp32 = float32 tune's pick's median /
  bfloat16 tune's pick's median. Skipped with a note otherwise.

Ratios to MKL are speedups: MKL (preallocated) ms / kernel ms, > 1 when the kernel is faster.
Geomeans are over the matrices that have both times.

Matrices (deterministic; at --scale 1 each has >= 200k nonzeros): realistic families
(`matrix.realistic.generate_realistic(family, rows, seed=7)`) fem_scalar 120000 rows, fem_elasticity
40000, fem_blocks 150000, community 150000, dense_rows 50000; poisson3d, pyamg's 7-point Poisson
matrix on a 50^3 grid (side 50 * scale^(1/3)); generated families (`matrix.generators.generate(family,
rows, 7)`) road 400000, rmat 131072, uniform 100000.

Outputs in --out (default benchmarks/results/cpu_vendor): ``results.json`` (per matrix: times, ratios,
configs; the bandwidth, the floor's definition, the command line, the machine; rewritten after each
matrix), ``summary.md`` (the table and geomeans) and ``cpu_vendor.png`` (fractions of the floor).

    python benchmarks/cpu_vendor.py                                          # full: 9 matrices, 2 threads
    python benchmarks/cpu_vendor.py --matrices rmat road --threads 1 --out OUT
    python benchmarks/cpu_vendor.py --scale 0.005 --matrices rmat --sample 3 --rounds 1 --feat 32 \\
        --out /tmp/cpu_vendor                                                # test-sized
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import logging
import multiprocessing
import os
import platform
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from cognate_tvm import backends, space, tuning
from cognate_tvm.backends.base import measure_side_by_side, rotated_order
from cognate_tvm.backends.vendor import MKLLibrary, mkl_available
from cognate_tvm.matrix import as_csr
from cognate_tvm.ops import SPMM
from common import budget_draw, figure, present_geomean, setup_logging, write_outputs

log = logging.getLogger("cpu_vendor")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "cpu_vendor"
SEED = 7  # of every matrix
# name: (how it is built, family, rows at --scale 1)
MATRICES = {
    "fem_scalar": ("realistic", "fem_scalar", 120_000),
    "fem_elasticity": ("realistic", "fem_elasticity", 40_000),
    "fem_blocks": ("realistic", "fem_blocks", 150_000),
    "community": ("realistic", "community", 150_000),
    "dense_rows": ("realistic", "dense_rows", 50_000),
    "poisson3d": ("poisson", None, 50 ** 3),
    "road": ("generated", "road", 400_000),
    "rmat": ("generated", "rmat", 131_072),
    "uniform": ("generated", "uniform", 100_000),
}
MIN_ROWS = 64  # scaled row counts stop here
NEW_KNOBS = ("block_rows", "balanced", "stream")  # the knobs whose every variant of the sample's best is measured
FLOOR_DEFINITION = ("floor_ms = minimal bytes / copy bandwidth; minimal bytes = 4 (M + 1) + 8 nnz (A's CSR "
                    "arrays) + 4 K N (B read once) + 4 M N (C written once); copy bandwidth = (read + write "
                    "bytes) / time of a copy of a large float32 array on the same threads, the faster of torch "
                    "dst.copy_(src) and a TVM copy kernel with streaming stores (the kernels' own stores). "
                    "Roofline floor_ms = max(floor_ms, 2 nnz N / GEMM rate), the GEMM rate being torch.mm's "
                    "float32 flops on the same threads")
KERNELS = {"mkl_prealloc": "MKL, preallocated C", "mkl_alloc": "MKL, allocating C", "baseline": "baseline config",
           "sample_best": "best of the sample", "best": "best of space found", "tune": "tune's pick",
           "fixed": "best fixed config",
           "random_same": "random, tune's measurements", "bf16": "best, bfloat16 B"}


# -- matrices --------------------------------------------------------------------------------------------

def build_matrix(name: str, scale: float = 1.0):
    """The matrix `name` of MATRICES with its row count times `scale` (canonical CSR)."""
    kind, family, rows = MATRICES[name]
    if kind == "poisson":
        from pyamg.gallery import poisson

        side = max(4, round(50 * scale ** (1 / 3)))
        return as_csr(poisson((side, side, side), format="csr"), name=name)
    rows = max(MIN_ROWS, round(rows * scale))
    if kind == "realistic":
        from cognate_tvm.matrix.realistic import generate_realistic

        return generate_realistic(family, rows, seed=SEED)
    from cognate_tvm.matrix.generators import generate

    return generate(family, rows, SEED)


def minimal_bytes(matrix, feat: int, *, dense_bytes: int = 4) -> int:
    """SpMM's minimal traffic (module docstring): A's CSR arrays, B read once, C (float32) written once."""
    rows, cols = matrix.shape
    return 4 * (rows + 1) + 8 * int(matrix.nnz) + dense_bytes * cols * feat + 4 * rows * feat


def add_picks_arguments(parser: argparse.ArgumentParser, *, results_help: str) -> None:
    """The options of the benchmarks that re-time a cpu_vendor run's picks on its matrices (cpu_stream.py,
    cpu_gather.py): --matrices, --results, --scale, --threads, --feat, --rounds."""
    parser.add_argument("--matrices", nargs="+", choices=sorted(MATRICES), default=list(MATRICES))
    parser.add_argument("--results", type=Path, help=results_help)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the matrices' row counts")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--feat", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the side-by-side timing (medians kept)")


# -- timing helpers ----------------------------------------------------------------------------------------

def call_seconds(call, repeats: int) -> list[float]:
    """Wall seconds of each of `repeats` calls of `call()` (warm it up first)."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return seconds


def in_worker(function, *args):
    """`function(*args)` in a fresh spawned process: what it times shares no thread pool and no loaded
    library (TVM, MKL) with this process."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def build_tvm_kernel(source: str, threads: int):
    """The ``main`` of TVMScript `source`, built for this CPU and run on `threads` TVM threads. Call it in a
    worker (`in_worker`): it sets TVM_NUM_THREADS, which TVM reads when it loads."""
    import os

    os.environ["TVM_NUM_THREADS"] = str(threads)
    import tvm

    from cognate_tvm.kernels.cpu import cpu_target

    return tvm.tirx.build(tvm.script.from_source(source), target=cpu_target(threads))["main"]


# -- the bandwidth floor -----------------------------------------------------------------------------------

def _gemm_rate(size: int, repeats: int = 5) -> float:
    """torch.mm's float32 GFLOP/s on two `size` x `size` matrices (median of `repeats`), on torch's threads."""
    import torch

    a = torch.rand(size, size, generator=torch.Generator().manual_seed(0))
    b = torch.rand(size, size, generator=torch.Generator().manual_seed(1))
    out = torch.empty(size, size)
    torch.mm(a, b, out=out)  # warm-up
    seconds = call_seconds(lambda: torch.mm(a, b, out=out), repeats)
    return 2 * size ** 3 / float(np.median(seconds)) / 1e9


def _copy_bandwidth_worker(threads: int, megabytes: int, repeats: int, gemm_size: int = 2048) -> dict:
    import torch

    torch.set_num_threads(threads)
    gemm_gflops = _gemm_rate(gemm_size)
    src = torch.ones(megabytes * (1 << 20) // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    for _ in range(2):  # first touch and warm-up
        dst.copy_(src)
    seconds = call_seconds(lambda: dst.copy_(src), repeats)
    moved = 2 * src.numel() * 4  # read + write
    return {"bytes_per_copy": moved, "copies": repeats, "threads": threads, "torch_threads": torch.get_num_threads(),
            "median_s": float(np.median(seconds)), "gb_per_s": moved / float(np.median(seconds)) / 1e9,
            "best_gb_per_s": moved / min(seconds) / 1e9, "gemm_size": gemm_size, "gemm_gflops": gemm_gflops}


STREAM_COPY_LANES = 16  # float32 lanes per streaming store of the copy (one 64-byte line)


def _stream_copy_source(lanes: int = STREAM_COPY_LANES) -> str:
    """TVMScript of a parallel float32 copy whose stores are the kernels' streaming stores."""
    from cognate_tvm.kernels.cpu_stream import PRAGMA, store_function_ir, store_statement

    store = store_statement(f"T.address_of(dst[v * {lanes}])", f"src[T.ramp(v * {lanes}, 1, {lanes})]", lanes)
    return ("@T.prim_func\n"
            "def main(n: T.int32, src_h: T.handle, dst_h: T.handle):\n"
            '    T.func_attr({"global_symbol": "main", "tirx.noalias": True})\n'
            f'    src = T.match_buffer(src_h, (n * {lanes},), "float32")\n'
            f'    dst = T.match_buffer(dst_h, (n * {lanes},), "float32")\n'
            f"    with T.attr(0, {PRAGMA!r}, {store_function_ir(lanes)!r}):\n"
            "        for v in T.parallel(n):\n"
            f"            {store}\n")


def _stream_copy_worker(threads: int, megabytes: int, repeats: int) -> dict:
    """The streaming-store copy's bandwidth (read + write bytes per second) on `threads` TVM threads."""
    copy = build_tvm_kernel(_stream_copy_source(), threads)  # before TVM loads: it sets the thread count
    import tvm

    src = tvm.runtime.tensor(np.ones(megabytes * (1 << 20) // 4, dtype=np.float32))
    dst = tvm.runtime.tensor(np.zeros(megabytes * (1 << 20) // 4, dtype=np.float32))
    vectors = src.shape[0] // STREAM_COPY_LANES
    for _ in range(2):
        copy(vectors, src, dst)
    seconds = call_seconds(lambda: copy(vectors, src, dst), repeats)
    return {"stream_copy_gb_per_s": 2 * vectors * STREAM_COPY_LANES * 4 / float(np.median(seconds)) / 1e9}


def copy_bandwidth(threads: int, megabytes: int = 256, repeats: int = 10, gemm_size: int = 2048) -> dict:
    """Copy bandwidth and the GEMM rate on `threads` threads, each measured in a fresh worker process (no
    MKL there; TVM only in the streaming copy's). ``gb_per_s`` is the faster copy's: torch's
    (``torch_copy_gb_per_s``) or the streaming one (``stream_copy_gb_per_s``)."""
    out = in_worker(_copy_bandwidth_worker, threads, megabytes, repeats, gemm_size)
    out.update(in_worker(_stream_copy_worker, threads, megabytes, repeats))
    out["torch_copy_gb_per_s"] = out["gb_per_s"]
    out["gb_per_s"] = max(out["gb_per_s"], out["stream_copy_gb_per_s"])
    return out


# -- MKL ----------------------------------------------------------------------------------------------------

def mkl_times(matrix, *, threads: int, feat: int, seed: int, rounds: int) -> dict:
    """MKL's SpMM with a preallocated and an allocated output: medians over `rounds` isolated timings (the
    two alternating which goes first), and each output's check against scipy."""
    libraries = {"mkl_prealloc": MKLLibrary(num_threads=threads, isolated=True, preallocated=True),
                 "mkl_alloc": MKLLibrary(num_threads=threads, isolated=True)}
    out = {f"{key}_method": lib.method(SPMM) for key, lib in libraries.items()}
    for key, library in libraries.items():
        out[f"{key}_correct"] = library.check(SPMM, matrix, feat, seed=seed)
    samples = {key: [] for key in libraries}
    keys = list(libraries)
    for n in range(rounds):
        for i in rotated_order(len(keys), n):
            samples[keys[i]].append(libraries[keys[i]].time_ms(SPMM, matrix, feat, seed=seed))
    for key, times in samples.items():
        out[f"{key}_samples_ms"] = times
        out[f"{key}_ms"] = float(np.median(times)) if out[f"{key}_correct"] else None
    return out


# -- the CPU space --------------------------------------------------------------------------------------------

def sample_configs(cpu_space, candidates: list, count: int, seed: int) -> list:
    """The baseline and `count` distinct other candidates drawn with `seed` (in the candidates' order)."""
    baseline = cpu_space.baseline()
    pool = [c for c in candidates if c != baseline]
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(pool), size=min(count, len(pool)), replace=False)) if pool else []
    return [baseline] + [pool[i] for i in picked]


def new_knobs(config) -> list[str]:
    """Those of NEW_KNOBS that `config` has."""
    names = {f.name for f in dataclasses.fields(config)}
    return [k for k in NEW_KNOBS if k in names]


def knob_variants(best, candidates: list) -> list:
    """The candidates that differ from `best` in NEW_KNOBS only (none when the config has none of them)."""
    knobs = new_knobs(best)
    if not knobs:
        return []
    others = [f.name for f in dataclasses.fields(best) if f.name not in knobs]
    key = tuple(getattr(best, f) for f in others)
    return [c for c in candidates if c != best and tuple(getattr(c, f) for f in others) == key]


def correct(results) -> list:
    """The results that ran and whose output matched scipy."""
    return [r for r in results if r.ok and r.correct is True]


def sweep(measure, cpu_space, candidates: list, *, count: int, seed: int, desc: str) -> tuple[list, int]:
    """(results, configs in the sample): the sample (`sample_configs`) and then the NEW_KNOBS variants of its
    fastest correct config, measured with ``check=True`` by `measure(configs, check)`, in batches."""
    configs = sample_configs(cpu_space, candidates, count, seed)
    results = _batched(measure, configs, desc=desc)
    good = correct(results)
    if good:
        best = min(good, key=lambda r: r.time_ms).config
        done = set(configs)
        variants = [c for c in knob_variants(best, candidates) if c not in done]
        if variants:
            results += _batched(measure, variants, desc=f"{desc}, knob variants")
    return results, len(configs)


def _batched(measure, configs: list, *, desc: str) -> list:
    results = []
    with tqdm(total=len(configs), desc=desc, unit="config", file=sys.stderr, leave=False) as bar:
        for start in range(0, len(configs), tuning.BATCH):
            batch = configs[start:start + tuning.BATCH]
            results += measure(batch, True)
            bar.update(len(batch))
    for r in results:
        if not (r.ok and r.correct is True):
            log.info("config %s left out: %s", r.config.to_json(), r.error or f"correct={r.correct}")
    return results


def finalists(results: list, baseline, count: int) -> list:
    """The baseline and the `count` fastest correct configs of a sweep."""
    fastest = sorted(correct(results), key=lambda r: r.time_ms)[:count]
    return list(dict.fromkeys([baseline] + [r.config for r in fastest]))


def random_same_pick(results: list, sampled: int, measurements: int, seed: int):
    """Random search with `measurements` measurements, from the sweep's own times: the baseline (the
    sample's first) and `measurements` - 1 of the sample's other configs drawn with `seed`; its
    fastest correct config (None when none of them ran correctly)."""
    others = budget_draw(np.random.default_rng(seed), sampled, max(measurements - 1, 0))
    drawn = correct([results[0]] + [results[i] for i in sorted(others)])
    return min(drawn, key=lambda r: r.time_ms).config if drawn else None


def fastest(medians: dict, configs: list):
    """The config of `configs` with the lowest median in `medians` (None where none has one)."""
    timed = [c for c in configs if medians[c] is not None]
    return min(timed, key=medians.get) if timed else None


def _median(values) -> float | None:
    """Median of a config's round times; None when a round has none (failed, or a wrong output)."""
    values = list(values)
    return float(np.median(values)) if values and all(v is not None for v in values) else None


def retime(backend, matrix, configs: list, *, feat: int, seed: int, rounds: int) -> dict:
    """{config: median ms or None}: `configs` timed side by side (`measure_side_by_side`), `rounds` rounds with
    the order rotated, outputs checked in the first (a wrong or failed config gets None)."""
    per_round = measure_side_by_side(backend, SPMM, matrix, configs, feat, rounds=rounds, seed=seed,
                                     check_first=True)
    times = {c: [] for c in configs}
    for n, results in enumerate(per_round):
        for c in configs:
            r = results.get(c)
            fine = r is not None and r.ok and (r.correct is True or n > 0)
            times[c].append(r.time_ms if fine else None)
    return {c: _median(t) for c, t in times.items()}


# -- bfloat16 -------------------------------------------------------------------------------------------------

def bf16_support(backend, threads: int) -> tuple[str | None, object, str]:
    """(how, backend, what): how bfloat16 kernels are measured here: ``"keyword"`` (the llvm backend's
    `measure` takes ``dtype=``), ``"backend"`` (it does not, but its constructor does: a second backend
    made with ``dtype="bfloat16"``, returned) or None (neither: skipped, `what` says so)."""
    if "dtype" in inspect.signature(backend.measure).parameters:
        return "keyword", backend, "bfloat16 through LLVMBackend.measure(..., dtype='bfloat16')"
    if "dtype" in inspect.signature(type(backend).__init__).parameters:
        return ("backend", backends.create("llvm", num_threads=threads, dtype="bfloat16"),
                "bfloat16 through LLVMBackend(dtype='bfloat16')")
    return None, None, "skipped: the llvm backend takes no dtype (neither measure(dtype=) nor LLVMBackend(dtype=))"


def dtype_measurers(backend, support: tuple, *, matrix, feat: int, seed: int) -> dict | None:
    """{"float32": measure, "bfloat16": measure}, each measure(configs, check) -> results on `matrix`, or None
    when bfloat16 is not supported (`bf16_support`)."""
    how, other, _ = support

    def measurer(b, **kw):
        return lambda configs, check: b.measure(SPMM, matrix, configs, feat, check=check, seed=seed, **kw)

    if how == "keyword":
        return {"float32": measurer(backend, dtype="float32"), "bfloat16": measurer(backend, dtype="bfloat16")}
    if how == "backend":
        return {"float32": measurer(backend), "bfloat16": measurer(other)}
    return None


def retime_dtypes(measurers: dict, configs: dict, rounds: int) -> dict:
    """{(dtype, config): median ms or None}: per round, one call per dtype measuring its `configs[dtype]`,
    the dtypes' order and each call's order rotated every round, outputs checked in the first round."""
    dtypes = list(configs)
    times = {(d, c): [] for d in dtypes for c in configs[d]}
    for n in range(rounds):
        for i in rotated_order(len(dtypes), n):
            d = dtypes[i]
            order = [configs[d][j] for j in rotated_order(len(configs[d]), n)]
            by_config = {r.config: r for r in measurers[d](order, n == 0)}
            for c in configs[d]:
                r = by_config.get(c)
                fine = r is not None and r.ok and (r.correct is True or n > 0)
                times[(d, c)].append(r.time_ms if fine else None)
    return {key: _median(t) for key, t in times.items()}


def bf16_row(measurers: dict, cpu_space, candidates: list, best_fp32, *, count: int, seed: int,
             rounds: int, name: str, tune_fp32=None, tune_bf16=None) -> dict:
    """The bfloat16 sweep (the same sample as float32, and its best's knob variants) and its best, the
    float32 best in bfloat16 and `tune_bf16()`'s pick (tune measuring in bfloat16; when given) timed again
    beside the float32 best and float32 tune's pick `tune_fp32` (`retime_dtypes`)."""
    results, _ = sweep(measurers["bfloat16"], cpu_space, candidates, count=count, seed=seed,
                       desc=f"{name}: bfloat16")
    good = correct(results)
    out = {"bf16_measured": len(results), "bf16_correct": len(good)}
    if not good:
        out["bf16_note"] = "no bfloat16 config ran correctly"
        return out
    best_sweep = min(good, key=lambda r: r.time_ms).config
    tuned = tune_bf16() if tune_bf16 is not None else None
    in_bf16 = list(dict.fromkeys([best_fp32, best_sweep] + ([tuned] if tuned is not None else [])))
    in_fp32 = list(dict.fromkeys([best_fp32] + ([tune_fp32] if tune_fp32 is not None else [])))
    medians = retime_dtypes(measurers, {"float32": in_fp32, "bfloat16": in_bf16}, rounds)
    fp32_ms = medians[("float32", best_fp32)]
    if tuned is not None and tune_fp32 is not None:
        tune_ms = {"bf16_tune_ms": medians[("bfloat16", tuned)], "bf16_tune_fp32_ms": medians[("float32", tune_fp32)]}
        out.update(bf16_tune_config=tuned.to_dict(), **tune_ms,
                   bf16_tune_speedup=_ratio(tune_ms["bf16_tune_fp32_ms"], tune_ms["bf16_tune_ms"]))
    bf16_ms = {c: medians[("bfloat16", c)] for c in in_bf16}
    best = fastest(bf16_ms, in_bf16)
    best_ms = None if best is None else bf16_ms[best]
    same = bf16_ms[best_fp32]
    out.update(bf16_sweep_best_config=best_sweep.to_dict(), bf16_config=None if best is None else best.to_dict(),
               bf16_ms=best_ms, bf16_fp32_ms=fp32_ms, bf16_same_config_ms=same,
               bf16_speedup=_ratio(fp32_ms, best_ms), bf16_same_config_speedup=_ratio(fp32_ms, same))
    return out


def set_floor(row: dict, gb_per_s: float, gemm_gflops: float) -> None:
    """`row`'s floors at copy bandwidth `gb_per_s` and GEMM rate `gemm_gflops` (module docstring) and every
    kernel's fraction of them: the bandwidth floor (``floor_ms``; ``bf16_floor_ms`` with B in bfloat16;
    ``<kernel>_floor_fraction``, the bfloat16 kernel's of its own floor: ``bf16_own_floor_fraction``) and
    the roofline (``roofline_ms``, ``bf16_roofline_ms``, ``<kernel>_roofline_fraction``, the bfloat16
    kernel's of its own roofline)."""
    row["floor_ms"] = row["minimal_bytes"] / (gb_per_s * 1e9) * 1e3
    row["bf16_floor_ms"] = row["bf16_minimal_bytes"] / (gb_per_s * 1e9) * 1e3
    row["compute_floor_ms"] = 2 * row["nnz"] * row["feat"] / (gemm_gflops * 1e9) * 1e3
    row["roofline_ms"] = max(row["floor_ms"], row["compute_floor_ms"])
    row["bf16_roofline_ms"] = max(row["bf16_floor_ms"], row["compute_floor_ms"])
    for kernel in KERNELS:
        row[f"{kernel}_floor_fraction"] = _ratio(row["floor_ms"], row.get(f"{kernel}_ms"))
        own = "bf16_roofline_ms" if kernel == "bf16" else "roofline_ms"
        row[f"{kernel}_roofline_fraction"] = _ratio(row[own], row.get(f"{kernel}_ms"))
    row["bf16_own_floor_fraction"] = _ratio(row["bf16_floor_ms"], row.get("bf16_ms"))


# -- one matrix ------------------------------------------------------------------------------------------------

def _ratio(a, b):
    return a / b if a and b else None


def evaluate(name: str, matrix, *, backend, cpu_space, candidates: list, args, rates: dict,
             measurers: dict | None, bf16_backend=None) -> dict:
    feat, seed, threads = args.feat, args.seed, args.threads
    row = {"matrix": name, "rows": matrix.shape[0], "cols": matrix.shape[1], "nnz": int(matrix.nnz), "feat": feat,
           "threads": threads}
    start = time.perf_counter()
    row.update(mkl_times(matrix, threads=threads, feat=feat, seed=seed, rounds=args.rounds))
    if not (row["mkl_prealloc_correct"] and row["mkl_alloc_correct"]):
        log.warning("%s: an MKL output differs from scipy's (prealloc %s, alloc %s)", name,
                    row["mkl_prealloc_correct"], row["mkl_alloc_correct"])

    fp32 = measurers["float32"] if measurers else (
        lambda configs, check: backend.measure(SPMM, matrix, configs, feat, check=check, seed=seed))
    results, sampled = sweep(fp32, cpu_space, candidates, count=args.sample, seed=seed + 1, desc=f"{name}: sweep")
    good = correct(results)
    baseline = cpu_space.baseline()
    row.update(sample_configs=sampled, variant_configs=len(results) - sampled, measured=len(results),
               measured_correct=len(good), new_knobs=new_knobs(baseline),
               sweep_best_config=None if not good else min(good, key=lambda r: r.time_ms).config.to_dict(),
               sweep_best_ms=None if not good else min(r.time_ms for r in good))

    def tune(on_backend):
        return tuning.tune(SPMM, matrix, backend=on_backend, feat=feat,
                           options=tuning.TuneOptions(seed=seed, pretrained_root=args.pretrained_dir, name=name))

    def pick(tuned):
        return None if tuned.chosen is None else tuned.chosen.config

    tuned = tune(backend)
    tune_pick = pick(tuned)
    fixed = next(iter(tuning.fixed_candidates(tuned.model, cpu_space, candidates)), None)
    random_pick = random_same_pick(results, sampled, len(tuned.measured), seed + 2)
    row.update(tune_measurements=len(tuned.measured), tune_notes=list(tuned.notes))

    kept = finalists(results, baseline, args.finalists)
    sides = {"tune": tune_pick, "fixed": fixed, "random_same": random_pick}
    configs = list(dict.fromkeys(kept + [c for c in sides.values() if c is not None]))
    medians = retime(backend, matrix, configs, feat=feat, seed=seed, rounds=args.rounds)
    sample_best = fastest(medians, kept)
    best = fastest(medians, configs)
    row.update(retime_rounds=args.rounds, finalists=[{"config": c.to_dict(), "ms": medians[c]} for c in kept],
               baseline_config=baseline.to_dict(), baseline_ms=medians[baseline],
               sample_best_config=None if sample_best is None else sample_best.to_dict(),
               sample_best_ms=None if sample_best is None else medians[sample_best],
               best_config=None if best is None else best.to_dict(), best_ms=None if best is None else medians[best],
               **{f"{side}_config": None if c is None else c.to_dict() for side, c in sides.items()},
               **{f"{side}_ms": None if c is None else medians[c] for side, c in sides.items()})

    if measurers is not None and best is not None:
        row.update(bf16_row(measurers, cpu_space, candidates, best, count=args.sample, seed=seed + 1,
                            rounds=args.rounds, name=name, tune_fp32=tune_pick,
                            tune_bf16=None if bf16_backend is None else lambda: pick(tune(bf16_backend))))

    row.update(minimal_bytes=minimal_bytes(matrix, feat), bf16_minimal_bytes=minimal_bytes(matrix, feat, dense_bytes=2))
    set_floor(row, rates["gb_per_s"], rates["gemm_gflops"])
    mkl = row["mkl_prealloc_ms"]
    for kernel in ("mkl_alloc", "baseline", "sample_best", "best", "tune", "fixed", "random_same", "bf16"):
        row[f"{kernel}_vs_mkl_prealloc"] = _ratio(mkl, row.get(f"{kernel}_ms"))
    for kernel in ("sample_best", "best", "tune", "fixed", "random_same"):
        row[f"{kernel}_vs_baseline"] = _ratio(row["baseline_ms"], row[f"{kernel}_ms"])
    row["tune_vs_best"] = _ratio(row["best_ms"], row["tune_ms"])
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


# -- reports -----------------------------------------------------------------------------------------------

RATIOS = ("mkl_alloc_vs_mkl_prealloc", "baseline_vs_mkl_prealloc", "sample_best_vs_mkl_prealloc",
          "best_vs_mkl_prealloc", "tune_vs_mkl_prealloc", "fixed_vs_mkl_prealloc", "random_same_vs_mkl_prealloc",
          "bf16_vs_mkl_prealloc", "sample_best_vs_baseline", "best_vs_baseline", "tune_vs_baseline",
          "fixed_vs_baseline", "random_same_vs_baseline", "tune_vs_best", "bf16_speedup", "bf16_same_config_speedup",
          "bf16_tune_speedup",
          *(f"{k}_floor_fraction" for k in KERNELS), *(f"{k}_roofline_fraction" for k in KERNELS))


def summarize(rows: list[dict]) -> dict:
    return {"matrices": len(rows), **{f"{k}_geomean": present_geomean(r.get(k) for r in rows) for k in RATIOS}}


def machine() -> dict:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model or platform.processor() or None, "cpu_count": os.cpu_count(),
            "host": platform.node(), "machine": platform.machine(), "python": platform.python_version()}


def markdown(result: dict) -> str:
    f = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    summary, rows = result["summary"], result["rows"]
    bw = result["bandwidth"]
    lines = [f"# SpMM: MKL, the CPU space and the bandwidth floor ({result['threads']} threads, N={result['feat']})",
             "", f"Machine: {result['machine']['cpu_model']}, {result['machine']['cpu_count']} CPUs; kernels on "
             f"{result['threads']} threads. Command: `{result['command']}`", "",
             f"Floor: {FLOOR_DEFINITION}. Copy bandwidth on {result['threads']} threads: "
             f"{f(bw['gb_per_s'], 1)} GB/s (before {f(bw['before']['gb_per_s'], 1)}, after "
             f"{f((bw.get('after') or {}).get('gb_per_s'), 1)}; the higher is used; before: torch "
             f"{f(bw['before'].get('torch_copy_gb_per_s'), 1)}, streaming "
             f"{f(bw['before'].get('stream_copy_gb_per_s'), 1)}). GEMM rate: "
             f"{f(bw.get('gemm_gflops'), 0)} GFLOP/s (before {f(bw['before'].get('gemm_gflops'), 0)}, after "
             f"{f((bw.get('after') or {}).get('gemm_gflops'), 0)}; the higher is used).", "",
             "Times in ms, medians of rounds; the baseline, the sample's finalists, tune's pick, the best fixed "
             "config and random search's pick re-timed side by side in one "
             f"call per matrix (rounds: {result['rounds']}, order rotated). best of sample: the fastest finalist; "
             "best found: the fastest of every config re-timed (all are points of the space). x MKL: MKL "
             "(preallocated) ms / kernel ms (> 1: faster than MKL). floor: floor ms / best found's ms. bf16 / fp32: "
             "the float32 best's ms / the bfloat16 best's ms; tune bf16 / fp32: tune's pick in float32, ms / tune's "
             "pick measuring in bfloat16, ms.", ""]
    lines += [f"bfloat16: {result['bf16']}.", ""]
    lines += ["| matrix | nnz | MKL prealloc ms | MKL alloc ms | baseline ms | best of sample ms | best found ms | "
              "tune's pick ms | best fixed ms | random (same) ms | best of sample x MKL prealloc | best found x MKL "
              "prealloc | tune x MKL prealloc | best fixed x MKL prealloc | random (same) x MKL prealloc | best "
              "found, fraction of floor | bf16 / fp32 | tune bf16 / fp32 |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['matrix']} | {r['nnz']} | {f(r['mkl_prealloc_ms'])} | {f(r['mkl_alloc_ms'])} | "
                     f"{f(r['baseline_ms'])} | {f(r.get('sample_best_ms'))} | {f(r['best_ms'])} | {f(r['tune_ms'])} | "
                     f"{f(r.get('fixed_ms'))} | {f(r.get('random_same_ms'))} | "
                     f"{f(r.get('sample_best_vs_mkl_prealloc'))} | {f(r['best_vs_mkl_prealloc'])} | "
                     f"{f(r['tune_vs_mkl_prealloc'])} | {f(r.get('fixed_vs_mkl_prealloc'))} | "
                     f"{f(r.get('random_same_vs_mkl_prealloc'))} | {f(r['best_floor_fraction'])} | "
                     f"{f(r.get('bf16_speedup'))} | {f(r.get('bf16_tune_speedup'))} |")
    g = lambda k: f(summary.get(f"{k}_geomean"))  # noqa: E731
    lines.append(f"| geomean | | | | | | | | | | {g('sample_best_vs_mkl_prealloc')} | {g('best_vs_mkl_prealloc')} | "
                 f"{g('tune_vs_mkl_prealloc')} | "
                 f"{g('fixed_vs_mkl_prealloc')} | {g('random_same_vs_mkl_prealloc')} | "
                 f"{g('best_floor_fraction')} | {g('bf16_speedup')} | {g('bf16_tune_speedup')} |")
    lines += ["", "Geomeans over the matrices: "
              f"MKL allocating / preallocated {g('mkl_alloc_vs_mkl_prealloc')}x MKL prealloc's speed; "
              f"baseline {g('baseline_vs_mkl_prealloc')}x, best of sample {g('sample_best_vs_mkl_prealloc')}x, "
              f"best found {g('best_vs_mkl_prealloc')}x, tune "
              f"{g('tune_vs_mkl_prealloc')}x, best fixed {g('fixed_vs_mkl_prealloc')}x, random (same) "
              f"{g('random_same_vs_mkl_prealloc')}x, bfloat16 best {g('bf16_vs_mkl_prealloc')}x MKL prealloc's speed; "
              f"over the baseline: best of sample {g('sample_best_vs_baseline')}x, best found "
              f"{g('best_vs_baseline')}x, tune {g('tune_vs_baseline')}x, best fixed "
              f"{g('fixed_vs_baseline')}x, random (same) {g('random_same_vs_baseline')}x; tune reaches "
              f"{g('tune_vs_best')} of the best found's speed; bf16 / fp32 {g('bf16_speedup')}x (the float32 best "
              f"config in bfloat16: {g('bf16_same_config_speedup')}x; tune measuring in bfloat16 against tune in "
              f"float32: {g('bf16_tune_speedup')}x).", "",
              "Fraction of the floor (geomean): " + ", ".join(
                  f"{text} {g(f'{k}_floor_fraction')}" for k, text in KERNELS.items()) + ".", "",
              "Fraction of the roofline (geomean; the bfloat16 kernel of its own): " + ", ".join(
                  f"{text} {g(f'{k}_roofline_fraction')}" for k, text in KERNELS.items()) + ".", "",
              "Per matrix, floors in ms (bandwidth / compute / roofline) and the fraction of the roofline:", "",
              "| matrix | bandwidth floor | compute floor | roofline | baseline | best | tune | bf16 best (own) |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['matrix']} | {f(r['floor_ms'])} | {f(r.get('compute_floor_ms'))} | {f(r.get('roofline_ms'))} | "
              f"{f(r.get('baseline_roofline_fraction'))} | {f(r.get('best_roofline_fraction'))} | "
              f"{f(r.get('tune_roofline_fraction'))} | {f(r.get('bf16_roofline_fraction'))} |" for r in rows]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    x = np.arange(len(rows))
    width = 0.8 / len(KERNELS)
    with figure(path, figsize=(max(6.0, len(rows) * 1.0), 4)) as (_, ax):
        for n, (kernel, text) in enumerate(KERNELS.items()):
            ax.bar(x + (n - (len(KERNELS) - 1) / 2) * width, [r.get(f"{kernel}_floor_fraction") or 0 for r in rows],
                   width, label=text)
        ax.set_xticks(x, [r["matrix"] for r in rows], rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("fraction of the bandwidth floor")
        ax.legend(fontsize=7)


# -- main ------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", nargs="+", choices=sorted(MATRICES), default=list(MATRICES),
                        help="matrices to run (default: all)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every matrix's row count by this")
    parser.add_argument("--threads", type=int, default=2, help="threads of every kernel, MKL and the copy")
    parser.add_argument("--feat", type=int, default=128, help="dense width N")
    parser.add_argument("--sample", type=int, default=48, help="random candidates measured besides the baseline")
    parser.add_argument("--finalists", type=int, default=3,
                        help="fastest configs of the sweep re-timed beside the baseline and tune's pick")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every re-timing (medians kept)")
    parser.add_argument("--bandwidth-mb", type=int, default=256, help="size of the copied array (MB)")
    parser.add_argument("--gemm-size", type=int, default=2048, help="side of the square GEMM that gives the compute rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pretrained-dir", type=Path, default=None, help="tune's shipped models (default: the package's)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for name in ("threads", "feat", "finalists", "rounds", "bandwidth_mb", "gemm_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.sample < 0 or args.scale <= 0:
        parser.error("--sample must be >= 0 and --scale > 0")
    if not mkl_available():
        parser.error("MKL is not available (sparse_dot_mkl cannot find libmkl_rt)")
    setup_logging()
    args.out.mkdir(parents=True, exist_ok=True)
    command = shlex.join([sys.executable, "benchmarks/cpu_vendor.py", *(sys.argv[1:] if argv is None else argv)])

    bandwidth = {"before": copy_bandwidth(args.threads, args.bandwidth_mb, gemm_size=args.gemm_size)}
    log.info("copy bandwidth on %d threads: %.1f GB/s, GEMM %.0f GFLOP/s", args.threads,
             bandwidth["before"]["gb_per_s"], bandwidth["before"]["gemm_gflops"])
    backend = backends.create("llvm", num_threads=args.threads)
    cpu_space = space.create("cpu", "spmm")
    candidates = cpu_space.candidates(args.threads)
    support = bf16_support(backend, args.threads)
    if support[0] is None:
        log.warning("bfloat16 %s", support[2])
    result = {"command": command, "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "machine": machine(), "threads": args.threads, "feat": args.feat, "rounds": args.rounds,
              "floor_definition": FLOOR_DEFINITION, "bf16": support[2], "bandwidth": {**bandwidth, "gb_per_s": bandwidth["before"]["gb_per_s"],
                                                              "gemm_gflops": bandwidth["before"]["gemm_gflops"]},
              "backend": backend.metadata(), "mkl_method": MKLLibrary.PREALLOCATED_SPMM,
              "candidates": len(candidates), "rows": []}
    rows = result["rows"]
    for name in tqdm(args.matrices, desc="matrices", unit="matrix", file=sys.stderr):
        matrix = build_matrix(name, args.scale)
        log.info("%s: %dx%d, nnz %d", name, *matrix.shape, matrix.nnz)
        measurers = dtype_measurers(backend, support, matrix=matrix, feat=args.feat, seed=args.seed)
        rows.append(evaluate(name, matrix, backend=backend, cpu_space=cpu_space, candidates=candidates, args=args,
                             rates=result["bandwidth"], measurers=measurers,
                             bf16_backend=support[1] if support[0] == "backend" else None))
        result["summary"] = summarize(rows)
        (args.out / "results.json").write_text(json.dumps(result, indent=1))

    bandwidth["after"] = copy_bandwidth(args.threads, args.bandwidth_mb, gemm_size=args.gemm_size)
    used = {key: max(bandwidth["before"][key], bandwidth["after"][key]) for key in ("gb_per_s", "gemm_gflops")}
    for row in rows:  # the floors move with the higher readings
        set_floor(row, used["gb_per_s"], used["gemm_gflops"])
    result["bandwidth"] = {**bandwidth, **used}
    result["summary"] = summarize(rows)
    write_outputs(args.out, result, markdown(result), lambda path: plot(rows, path), "cpu_vendor.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
