"""One prepared GPU check of the `cuda` target: correctness of every config, speed against cuSPARSE.

On a machine with an NVIDIA GPU, in under 8 minutes (the `--budget-s` guard
stops timing new matrices when time runs short and says so in the JSON):

1. builds every kernel variant of SpMM and SDDMM for `--arch`;
2. checks every config of both ops against scipy on 3 matrices (skewed rows
   with empty rows and rows longer than any ELL bucket, a rectangular
   bipartite matrix, a power-law graph) at a dense width that is not a
   multiple of the vector widths, so the padding path runs too;
3. times every config of both ops and cuSPARSE (torch.sparse, needs a CUDA
   build of torch) on 20 generated matrices (`generate_corpus`, all families);
4. writes OUT/gpu_check.json (every time, every error) and OUT/gpu_check.png:
   per matrix, best-in-space / cuSPARSE and baseline / cuSPARSE speedups with
   their geomeans, and the correctness counts in the title.

    python benchmarks/gpu_check.py --arch sm_90 --out benchmarks/results/gpu_check
    python benchmarks/gpu_check.py --compile-only --out /tmp/gpu_check   # no GPU needed

Without a GPU it stops at once with a "no GPU" message (exit status 2), unless
`--compile-only`: then every config of both ops is built, its CUDA source
written and compiled to PTX with nvcc, and the counts go to the JSON.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

log = logging.getLogger("gpu_check")

OPS = ("spmm", "sddmm")
CHECK_FEAT = 61  # not a multiple of 2 or 4: exercises the padded dense operands


def geomean(values) -> float:
    values = np.asarray([v for v in values if v is not None and np.isfinite(v) and v > 0])
    return float(np.exp(np.log(values).mean())) if values.size else float("nan")


def check_matrices(seed: int) -> dict[str, sp.csr_matrix]:
    from cognate_tvm.matrix import as_csr, generate

    rng = np.random.default_rng(seed)
    lengths = rng.choice([0, 0, 1, 2, 3, 7, 15, 31, 64, 300], size=3000)
    rows = np.repeat(np.arange(lengths.size), lengths)
    cols = np.concatenate([rng.choice(5000, size=n, replace=False) for n in lengths])
    skewed = sp.coo_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(lengths.size, 5000))
    return {"skewed_rows": as_csr(skewed), "bipartite": generate("bipartite", 4000, seed),
            "rmat": generate("rmat", 8192, seed)}


def compile_only(args) -> int:
    from cognate_tvm import backends, space
    from cognate_tvm.matrix import generate

    backend = backends.create("cuda", arch=args.arch, compile_only=True, source_dir=args.out / "cuda_src")
    matrix = generate("rmat", 1024, args.seed)
    report = {"mode": "compile_only", "arch": args.arch, "ops": {}}
    status = 0
    for op in OPS:
        start = time.perf_counter()
        results = backend.measure(op, matrix, space.create("gpu", op).configs(), args.feat)
        compiled = sum(bool(r.extra.get("compiled")) for r in results)
        errors = sorted({r.error for r in results if r.error})
        report["ops"][op] = {"configs": len(results), "compiled": compiled, "errors": errors[:20],
                             "seconds": time.perf_counter() - start}
        log.info("%s: %d of %d configs compiled to PTX for %s", op, compiled, len(results), args.arch)
        status |= compiled != len(results)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2))
    return int(status)


def run(args) -> int:
    import tvm

    from cognate_tvm import backends, space
    from cognate_tvm.matrix import generate_corpus

    started = time.perf_counter()
    deadline = started + args.budget_s
    report = {"mode": "gpu", "arch": args.arch, "feat": args.feat, "device": tvm.cuda(0).device_name,
              "budget_s": args.budget_s, "correctness": {}, "timing": [], "truncated": False}
    timer = backends.create("cuda", arch=args.arch, number=args.number, repeat=args.repeat,
                            min_repeat_ms=0)
    failed_builds = timer.prepare(OPS)
    report["build_s"], report["failed_builds"] = time.perf_counter() - started, failed_builds
    log.info("built all kernel variants in %.1f s (%d failed)", report["build_s"], len(failed_builds))

    # 1. correctness of every config on 3 matrices (one untimed-quality run each)
    checker = timer.with_timing(number=1, repeat=1)  # same compiled kernels, minimal timing
    vendor = timer.vendor()
    for name, matrix in check_matrices(args.seed).items():
        for op in OPS:
            configs = space.create("gpu", op).configs()
            results = checker.measure(op, matrix, configs, CHECK_FEAT, check=True, seed=args.seed)
            bad = [{"config": r.config.to_dict(), "error": r.error} for r in results if not r.correct]
            entry = report["correctness"].setdefault(op, {"checked": 0, "correct": 0, "failures": []})
            entry["checked"] += len(results)
            entry["correct"] += len(results) - len(bad)
            entry["failures"] += [{"matrix": name, **b} for b in bad[:10]]
            log.info("correctness %s on %s: %d/%d", op, name, len(results) - len(bad), len(results))

    # 2. timing on the generated corpus
    corpus = generate_corpus(args.matrices, seed=args.seed, min_rows=args.min_rows, max_rows=args.max_rows)
    per_matrix_s = None
    for entry in corpus:
        left = deadline - time.perf_counter()
        if per_matrix_s is not None and left < 1.2 * per_matrix_s:
            report["truncated"] = True
            log.warning("budget: stopping after %d matrices", len(report["timing"]))
            break
        t0 = time.perf_counter()
        matrix = entry.build()
        row = {"name": entry.name, "family": entry.family, "shape": list(matrix.shape), "nnz": int(matrix.nnz)}
        for op in OPS:
            gpu_space = space.create("gpu", op)
            configs = gpu_space.configs()
            results = timer.measure(op, matrix, configs, args.feat, seed=args.seed)
            times = [r.time_ms if r.ok else None for r in results]
            ok = [(t, c) for t, c in zip(times, configs) if t is not None]
            best_ms, best = min(ok, key=lambda tc: tc[0]) if ok else (None, None)
            baseline_ms = times[configs.index(gpu_space.baseline())]
            try:
                vendor_ms, vendor_error = vendor.time_ms(op, matrix, args.feat, seed=args.seed), None
            except Exception as err:  # noqa: BLE001 - recorded; the speedups then stay empty
                vendor_ms, vendor_error = None, f"{type(err).__name__}: {err}"
            row[op] = {"best_ms": best_ms, "best_config": best.to_dict() if best else None,
                       "baseline_ms": baseline_ms, "cusparse_ms": vendor_ms,
                       "cusparse_error": vendor_error, "errors": sum(t is None for t in times),
                       "times_ms": times}
        report["timing"].append(row)
        elapsed = time.perf_counter() - t0
        per_matrix_s = elapsed if per_matrix_s is None else max(per_matrix_s, elapsed)
        log.info("%s (%d nnz): %.1f s; spmm best %.4g ms vs cuSPARSE %s ms", entry.name, matrix.nnz,
                 elapsed, row["spmm"]["best_ms"] or float("nan"), row["spmm"]["cusparse_ms"])

    report["configs"] = {op: [c.to_dict() for c in space.create("gpu", op).configs()] for op in OPS}
    report["summary"] = summarize(report)
    report["total_s"] = time.perf_counter() - started
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    plot(report, args.out / "gpu_check.png")
    log.info("summary: %s", json.dumps(report["summary"]))
    return 0


def summarize(report: dict) -> dict:
    out = {}
    for op in OPS:
        rows = [r[op] for r in report["timing"]]
        vs_vendor = [r["cusparse_ms"] / r["best_ms"] for r in rows if r["cusparse_ms"] and r["best_ms"]]
        base_vendor = [r["cusparse_ms"] / r["baseline_ms"] for r in rows
                       if r["cusparse_ms"] and r["baseline_ms"]]
        vs_base = [r["baseline_ms"] / r["best_ms"] for r in rows if r["baseline_ms"] and r["best_ms"]]
        corr = report["correctness"].get(op, {})
        out[op] = {"matrices": len(rows), "geomean_best_over_cusparse": geomean(vs_vendor),
                   "geomean_baseline_over_cusparse": geomean(base_vendor),
                   "geomean_best_over_baseline": geomean(vs_base),
                   "correct": corr.get("correct"), "checked": corr.get("checked")}
    return out


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(OPS), figsize=(14, 5), sharey=True)
    for ax, op in zip(axes, OPS):
        rows = report["timing"]
        names = [r["name"][:18] for r in rows]
        best = [(r[op]["cusparse_ms"] or np.nan) / (r[op]["best_ms"] or np.nan) for r in rows]
        base = [(r[op]["cusparse_ms"] or np.nan) / (r[op]["baseline_ms"] or np.nan) for r in rows]
        x = np.arange(len(rows))
        ax.bar(x - 0.2, best, 0.4, label="best in space")
        ax.bar(x + 0.2, base, 0.4, label="baseline config")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(x, names, rotation=70, fontsize=7)
        s = report["summary"][op]
        ax.set_title(f"{op}: geomean best/cuSPARSE {s['geomean_best_over_cusparse']:.2f}x, "
                     f"correct {s['correct']}/{s['checked']}", fontsize=9)
        ax.set_yscale("log")
    axes[0].set_ylabel("speedup over cuSPARSE (higher is better)")
    axes[0].legend()
    fig.suptitle(f"cuda {report['arch']} on {report['device']}, feat={report['feat']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "gpu_check")
    parser.add_argument("--arch", choices=("sm_80", "sm_90"), default="sm_90")
    parser.add_argument("--feat", type=int, default=128)
    parser.add_argument("--matrices", type=int, default=20)
    parser.add_argument("--min-rows", type=int, default=2048)
    parser.add_argument("--max-rows", type=int, default=32768)
    parser.add_argument("--number", type=int, default=3, help="runs per timing sample")
    parser.add_argument("--repeat", type=int, default=3, help="timing samples (median reported)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop timing new matrices after this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile-only", action="store_true", help="build + nvcc PTX only, no GPU needed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.compile_only:
        return compile_only(args)
    import importlib.util
    import shutil

    try:
        has_bindings = importlib.util.find_spec("cuda.bindings") is not None
    except ModuleNotFoundError:
        has_bindings = False
    if not has_bindings and shutil.which("nvcc"):
        # TVM compiles device code with NVRTC from `cuda-bindings` by default; nvcc otherwise.
        os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
    import tvm

    if not tvm.cuda(0).exist:
        print("gpu_check: no GPU: TVM sees no CUDA device (tvm.cuda(0).exist is False). Run this on a "
              "machine with an NVIDIA GPU, or pass --compile-only to build and compile to PTX only.",
              file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
