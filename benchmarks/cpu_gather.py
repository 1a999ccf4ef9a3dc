"""How close the CPU kernels come to gathering B: SpMM beside a kernel that only reads B's rows.

    python benchmarks/cpu_gather.py --results docs/results/tune_polish/picks.json --out OUT

cpu_vendor's bandwidth floor counts B once. On a graph every nonzero reads the B row of its column
from wherever it is, and B (25-200 MB at N = 128) does not stay in the cache, so that floor is out of
reach of any kernel that walks the nonzeros in the matrix's order. This benchmark measures what that
walk costs by itself: a TVM kernel that, on `--threads` threads, each taking an equal share of the
nonzeros, sums the B row of every nonzero in CSR order (the column indices and B read, nothing
written but one row per thread; checked against numpy). Then, per matrix of `benchmarks/cpu_vendor.py`
(same generators and sizes; `--scale` multiplies the row counts), with N = `--feat`:

- gather ms: the median of `--repeats` calls of that kernel, in a fresh worker process, before and after
  the SpMM configs are timed; the lower of the two medians is kept;
- bandwidth floor ms: cpu_vendor's (`minimal_bytes` over the copy bandwidth, `copy_bandwidth`, measured
  once at the start);
- gather bound ms = max(gather ms, bandwidth floor ms). It is not a strict floor: a kernel can overlap
  the gathers with its other traffic, and column panels reorder the gathers;
- the `--results` run's best found and tune's pick for the matrix (a cpu_vendor results.json, or an
  excerpt with ``best_config`` / ``tune_config`` per row), timed side by side (`cpu_vendor.retime`,
  `--rounds` rounds, order rotated, outputs checked), each as a fraction of both bounds (bound ms /
  kernel ms; 1: at the bound).

Results: results.json, summary.md and cpu_gather.png in `--out`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from cognate_tvm import backends
from cognate_tvm.metrics import geomean
from cognate_tvm.space.cpu import CPUSpace
from common import figure, setup_logging, write_outputs
from cpu_vendor import (add_picks_arguments, build_matrix, build_tvm_kernel, call_seconds, copy_bandwidth, in_worker,
                        minimal_bytes, retime)

KERNELS = {"best": ("best_config", "best found"), "tune": ("tune_config", "tune's pick")}


def gather_source(feat: int, threads: int) -> str:
    """TVMScript of the gather: thread t sums the B rows of nonzeros [nnz t / threads, nnz (t + 1) / threads)."""
    return ("@T.prim_func\n"
            "def main(nnz: T.int32, k: T.int32, idx_h: T.handle, b_h: T.handle, out_h: T.handle):\n"
            '    T.func_attr({"global_symbol": "main", "tirx.noalias": True})\n'
            '    idx = T.match_buffer(idx_h, (nnz,), "int32")\n'
            f'    b = T.match_buffer(b_h, (k, {feat}), "float32")\n'
            f'    out = T.match_buffer(out_h, ({threads}, {feat}), "float32")\n'
            f"    for t in T.parallel({threads}):\n"
            f"        for n in T.vectorized({feat}):\n"
            "            out[t, n] = T.float32(0)\n"
            f'        for j in range(T.Cast("int64", nnz) * t // {threads},\n'
            f'                       T.Cast("int64", nnz) * (t + 1) // {threads}):\n'
            f"            for n in T.vectorized({feat}):\n"
            "                out[t, n] = out[t, n] + b[idx[j], n]\n")


def expected_sums(indices: np.ndarray, b: np.ndarray, threads: int) -> np.ndarray:
    """What the gather kernel computes, by numpy (float64)."""
    nnz = len(indices)
    return np.stack([b[indices[nnz * t // threads:nnz * (t + 1) // threads]].sum(axis=0, dtype=np.float64)
                     for t in range(threads)])


def _gather_worker(indices: np.ndarray, cols: int, feat: int, threads: int, repeats: int) -> dict:
    """Median ms of the gather kernel on `threads` TVM threads, and whether its sums match numpy's."""
    kernel = build_tvm_kernel(gather_source(feat, threads), threads)  # before TVM loads: it sets the thread count
    import tvm

    b = np.random.default_rng(0).random((cols, feat), dtype=np.float32)
    args = [len(indices), cols, tvm.runtime.tensor(indices.astype(np.int32)), tvm.runtime.tensor(b),
            tvm.runtime.tensor(np.zeros((threads, feat), dtype=np.float32))]
    kernel(*args)
    correct = bool(np.allclose(args[-1].numpy(), expected_sums(indices, b, threads), rtol=1e-3, atol=1e-3))
    seconds = call_seconds(lambda: kernel(*args), repeats)
    return {"gather_ms": float(np.median(seconds)) * 1e3, "gather_correct": correct}


def time_gather(matrix, *, feat: int, threads: int, repeats: int) -> dict:
    return in_worker(_gather_worker, np.asarray(matrix.indices), matrix.shape[1], feat, threads, repeats)


def evaluate(name: str, matrix, picks: dict, *, backend, args, gb_per_s: float) -> dict:
    row = {"matrix": name, "rows": matrix.shape[0], "nnz": int(matrix.nnz)}
    before = time_gather(matrix, feat=args.feat, threads=args.threads, repeats=args.repeats)
    configs = {kernel: config for kernel, config in picks.items() if config is not None}
    medians = retime(backend, matrix, list(dict.fromkeys(configs.values())), feat=args.feat, seed=0,
                     rounds=args.rounds) if configs else {}
    after = time_gather(matrix, feat=args.feat, threads=args.threads, repeats=args.repeats)
    row["gather_ms"] = min(before["gather_ms"], after["gather_ms"])
    row["gather_correct"] = before["gather_correct"] and after["gather_correct"]
    row["gather_gb_per_s"] = matrix.nnz * args.feat * 4 / (row["gather_ms"] * 1e6)  # B bytes gathered
    row["floor_ms"] = minimal_bytes(matrix, args.feat) / (gb_per_s * 1e9) * 1e3
    row["gather_bound_ms"] = max(row["gather_ms"], row["floor_ms"])
    for kernel, config in configs.items():
        ms = medians.get(config)
        row.update({f"{kernel}_config": config.to_dict(), f"{kernel}_ms": ms,
                    f"{kernel}_gather_fraction": None if not ms else row["gather_bound_ms"] / ms,
                    f"{kernel}_floor_fraction": None if not ms else row["floor_ms"] / ms})
    return row


def load_picks(path: Path | None, space: CPUSpace) -> dict[str, dict]:
    """{matrix: {kernel: config or None}} from a cpu_vendor results.json (or its excerpt)."""
    if path is None:
        return {}
    rows = json.loads(path.read_text())["rows"]
    return {r["matrix"]: {kernel: space.config_from_dict(r[key]) if r.get(key) else None
                          for kernel, (key, _) in KERNELS.items()} for r in rows}


def markdown(result: dict) -> str:
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    lines = [f"Command: `{result['command']}`; {result['wall_seconds']:.0f} s; {result['threads']} threads, "
             f"N = {result['feat']}; copy bandwidth {result['gb_per_s']:.1f} GB/s.", "",
             "| matrix | nnz | gather ms | B gathered GB/s | bandwidth floor ms | gather bound ms | best found ms | "
             "tune's pick ms | best, of the gather bound | best, of the bandwidth floor | tune, of the gather bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['matrix']} | {r['nnz']} | {f(r['gather_ms'])} | {f(r['gather_gb_per_s'])} | "
                     f"{f(r['floor_ms'])} | {f(r['gather_bound_ms'])} | {f(r.get('best_ms'))} | "
                     f"{f(r.get('tune_ms'))} | "
                     f"{f(r.get('best_gather_fraction'))} | {f(r.get('best_floor_fraction'))} | "
                     f"{f(r.get('tune_gather_fraction'))} |")
    g = lambda key: f(geomean([r[key] for r in result["rows"] if r.get(key)]))  # noqa: E731
    lines.append(f"| geomean | | | | | | | | {g('best_gather_fraction')} | {g('best_floor_fraction')} | "
                 f"{g('tune_gather_fraction')} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    rows = result["rows"]
    x = np.arange(len(rows))
    with figure(path, figsize=(max(6.0, len(rows) * 0.9), 4)) as (_, ax):
        for n, (key, label) in enumerate((("best_gather_fraction", "best found, of the gather bound"),
                                          ("best_floor_fraction", "best found, of the bandwidth floor"))):
            ax.bar(x + (n - 0.5) * 0.4, [r.get(key) or 0 for r in rows], 0.4, label=label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(x, [r["matrix"] for r in rows], rotation=30, fontsize=8)
        ax.set_ylabel("bound ms / kernel ms")
        ax.legend(fontsize=7)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_picks_arguments(parser, results_help="a cpu_vendor.py results.json: time its best and tune's picks")
    parser.add_argument("--repeats", type=int, default=10, help="calls of the gather kernel per timing")
    parser.add_argument("--bandwidth-mb", type=int, default=256, help="size of the copied array (MB)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    for name in ("threads", "feat", "rounds", "repeats", "bandwidth_mb"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    setup_logging()
    start = time.perf_counter()
    space = CPUSpace("spmm")
    picks = load_picks(args.results, space)
    gb_per_s = copy_bandwidth(args.threads, args.bandwidth_mb)["gb_per_s"]
    backend = backends.create("llvm", num_threads=args.threads)
    rows = [evaluate(name, build_matrix(name, args.scale), picks.get(name, {}), backend=backend, args=args,
                     gb_per_s=gb_per_s)
            for name in tqdm(args.matrices, desc="matrices", unit="matrix", file=sys.stderr)]
    result = {"rows": rows, "threads": args.threads, "feat": args.feat, "gb_per_s": gb_per_s,
              "command": "python benchmarks/cpu_gather.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "wall_seconds": round(time.perf_counter() - start, 1)}
    write_outputs(args.out, result, markdown(result), lambda path: plot(result, path), "cpu_gather.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
