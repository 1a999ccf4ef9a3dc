"""One prepared GPU check of the `cuda` target: correctness of every config, speed against cuSPARSE, transfer.

Made to run on the first try on a GPU machine borrowed for minutes
(`scripts/gpu_run.sh` sets it up there; docs/gpu.md). `--quick` finishes in
under 5 minutes on an H200 (a `--budget-s` guard stops adding matrices when
time runs short and says so). Phases, each written to OUT/gpu_check.json as
soon as it is done, so a run cut short still leaves its results:

0. environment: driver GPUs, TVM's CUDA runtime, compile mode (nvcc / NVRTC),
   torch and its CUDA; exits 2 when there is no GPU, 3 when there is one but
   TVM cannot use it (the JSON says why);
1. builds every kernel variant of SpMM and SDDMM for `--arch`;
2. correctness: every config of both ops against scipy on 4 matrices (empty
   rows and rows longer than any ELL bucket, a rectangular bipartite matrix, a
   power-law graph, a banded matrix) at a dense width that is not a multiple of
   the vector widths; outputs are filled with NaN before each run, and the
   warm-up and the timed run are both checked;
3. sweep: every config of both ops, briefly timed, on `--matrices` generated
   matrices (>= 10), to find each matrix's best configs (the oracle);
4. transfer: the shipped CPU model (`load_pretrained(op, "cpu")`) is
   fine-tuned on the sweep of the first `--finetune` matrices (100 sampled
   configs each) and picks its top-1 / top-5 on the others; when no CPU model
   ships, a model is trained on the same GPU data alone, and the JSON and the
   table say so;
5. careful timing on every sweep matrix, side by side: the sweep's top
   configs, the baseline config, the model's picks, and cuSPARSE, all timed by
   the same function (back-to-back launches between CUDA events, median of
   samples) with the output of every timed sample checked;
6. summary: OUT/gpu_check.json and OUT/gpu_check.md (geomean speedups over
   cuSPARSE and over the baseline config, model picks vs the oracle).

    python benchmarks/gpu_check.py --quick --out benchmarks/results/gpu_check
    python benchmarks/gpu_check.py --compile-only --out /tmp/gpu_check   # no GPU needed
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

log = logging.getLogger("gpu_check")

OPS = ("spmm", "sddmm")
CHECK_FEAT = 61  # not a multiple of 2 or 4: exercises the padded dense operands
EXIT_NO_GPU, EXIT_BROKEN_RUNTIME = 2, 3


def geomean(values) -> float:
    values = np.asarray([v for v in values if v is not None and np.isfinite(v) and v > 0], dtype=np.float64)
    return float(np.exp(np.log(values).mean())) if values.size else float("nan")


def check_matrices(seed: int) -> dict[str, sp.csr_matrix]:
    """The 4 correctness matrices: skewed rows (empty ones, ones longer than any bucket), bipartite,
    power-law, banded."""
    from cognate_tvm.matrix import as_csr, generate

    rng = np.random.default_rng(seed)
    lengths = rng.choice([0, 0, 1, 2, 3, 7, 15, 31, 64, 300], size=3000)
    rows = np.repeat(np.arange(lengths.size), lengths)
    cols = np.concatenate([rng.choice(5000, size=n, replace=False) for n in lengths])
    skewed = sp.coo_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(lengths.size, 5000))
    return {"skewed_rows": as_csr(skewed), "bipartite": generate("bipartite", 4000, seed),
            "rmat": generate("rmat", 8192, seed), "banded": generate("banded", 6000, seed)}


class Report:
    """The JSON report, rewritten after every phase."""

    def __init__(self, path: Path, **fields):
        self.path = path
        self.data = dict(fields)

    def __setitem__(self, key, value):
        self.data[key] = value

    def __getitem__(self, key):
        return self.data[key]

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=_jsonable))
        tmp.replace(self.path)


def _jsonable(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


# -- without a GPU ----------------------------------------------------------------------------
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


# -- phases ---------------------------------------------------------------------------------------
def environment() -> dict:
    """Phase 0: what the machine offers (never raises)."""
    import platform
    import subprocess

    from cognate_tvm.kernels import cuda as kcuda

    env: dict = {"python": sys.version.split()[0], "host": platform.node()}
    try:
        import torch  # first: its libcudart is then the one TVM links against

        env.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                   torch_sees_gpu=bool(torch.cuda.is_available()))
        if torch.cuda.is_available():
            env["device"] = torch.cuda.get_device_name(0)
    except Exception as err:  # noqa: BLE001
        env["torch_error"] = f"{type(err).__name__}: {err}"
    env.update(kcuda.cuda_runtime_status(0))
    if env.get("nvcc"):
        try:
            out = subprocess.run([env["nvcc"], "--version"], capture_output=True, text=True, timeout=30).stdout
            env["nvcc_version"] = out.strip().splitlines()[-1] if out.strip() else None
        except (OSError, subprocess.TimeoutExpired) as err:
            env["nvcc_version"] = f"unknown ({err})"
    import tvm

    env["tvm"] = tvm.__version__
    if env["tvm_device"]:
        env["tvm_device_name"] = tvm.cuda(0).device_name
        env["compute_version"] = tvm.cuda(0).compute_version
    return env


def correctness(timer, report: Report, seed: int) -> None:
    """Phase 2: every config of both ops on the 4 check matrices, warm-up and timed run checked."""
    from cognate_tvm import space

    checker = timer.with_timing(number=1, repeat=1, min_repeat_ms=0)
    matrices = check_matrices(seed)
    result = {}
    for op in OPS:
        configs = space.create("gpu", op).configs()
        entry = {"configs": len(configs), "checked": 0, "correct": 0, "failures": []}
        for name, matrix in matrices.items():
            results = checker.measure(op, matrix, configs, CHECK_FEAT, check=True, seed=seed)
            bad = [r for r in results if not (r.ok and r.correct)]
            entry["checked"] += len(results)
            entry["correct"] += len(results) - len(bad)
            entry["failures"] += [{"matrix": name, "config": r.config.to_dict(), "error": r.error,
                                   "wrong_runs": r.extra.get("wrong_runs")} for r in bad[:10]]
            log.info("correctness %s on %s: %d/%d", op, name, len(results) - len(bad), len(results))
        result[op] = entry
    report["correctness"] = result


def sweep(timer, corpus, feat: int, seed: int, deadline: float, min_matrices: int) -> tuple[list, bool]:
    """Phase 3: every config of both ops, briefly timed, per matrix; stops early at `deadline`
    (but not before `min_matrices`). Returns (rows, truncated)."""
    from cognate_tvm import space

    quick = timer.with_timing(number=2, repeat=1, min_repeat_ms=0)
    rows, per_matrix = [], None
    for n, entry in enumerate(corpus):
        left = deadline - time.perf_counter()
        if n >= min_matrices and per_matrix is not None and left < 1.5 * per_matrix:
            log.warning("budget: sweep stops after %d matrices", n)
            return rows, True
        t0 = time.perf_counter()
        matrix = entry.build()
        row = {"name": entry.name, "family": entry.family, "shape": list(matrix.shape), "nnz": int(matrix.nnz),
               "matrix": matrix, "ops": {}}
        for op in OPS:
            configs = space.create("gpu", op).configs()
            results = quick.measure(op, matrix, configs, feat, seed=seed)
            times = np.array([r.time_ms if r.ok else np.nan for r in results], dtype=np.float64)
            row["ops"][op] = {"configs": configs, "times_ms": times,
                              "errors": sorted({r.error for r in results if r.error})[:5]}
        rows.append(row)
        elapsed = time.perf_counter() - t0
        per_matrix = elapsed if per_matrix is None else max(per_matrix, elapsed)
        log.info("sweep %s (%d nnz): %.1f s", entry.name, matrix.nnz, elapsed)
    return rows, False


def transfer(op: str, rows: list, finetune: int, samples: int, seed: int, *, epochs: int | None = None,
             fit_epochs: int | None = None, config=None) -> dict:
    """Phase 4: fine-tune the shipped CPU model on `finetune` GPU matrices; top-5 picks on the rest.

    When no CPU model ships, a model (ModelConfig `config`, default settings if
    None) is trained on the same GPU samples alone for `fit_epochs`; `epochs`
    overrides the training length of either path (None: the models' own settings).
    """
    from cognate_tvm import space
    from cognate_tvm.data import Group
    from cognate_tvm.errors import PretrainedNotFoundError
    from cognate_tvm.model import load_pretrained
    from cognate_tvm.model.cognate import CognateCostModel

    gpu = space.create("gpu", op)
    rng = np.random.default_rng(seed)
    groups = []
    for row in rows[:finetune]:
        data = row["ops"][op]
        ok = np.flatnonzero(np.isfinite(data["times_ms"]))
        keep = np.sort(rng.choice(ok, min(samples, ok.size), replace=False))
        groups.append(Group(row["name"], row["matrix"], row["feat"], tuple(data["configs"][i] for i in keep),
                            data["times_ms"][keep]))
    t0 = time.perf_counter()
    try:
        model = load_pretrained(op, "cpu")
        source = "shipped CPU model, fine-tuned on the GPU matrices"
        model.finetune(groups, space=gpu, epochs=epochs)
    except PretrainedNotFoundError as err:
        source = (f"NO CPU MODEL SHIPS ({err}); trained from the GPU data alone "
                  f"(no transfer: same {len(groups)} matrices x {samples} configs)")
        log.warning("%s: %s", op, source)
        model = CognateCostModel(config, seed=seed).fit(groups, space=gpu,
                                                        epochs=epochs if epochs is not None else fit_epochs)
    picks = {}
    for row in rows[finetune:]:
        configs = row["ops"][op]["configs"]
        picks[row["name"]] = model.top_k(row["matrix"], configs, 5, space=gpu, feat=row["feat"])
    return {"model": source, "finetune_matrices": [g.name for g in groups],
            "target_samples": int(sum(len(g.configs) for g in groups)), "train_s": time.perf_counter() - t0,
            "picks": picks}


def careful(timer, vendor, rows: list, transfers: dict, seed: int, top: int) -> None:
    """Phase 5: the sweep's top configs, the baseline, the model's picks and cuSPARSE, side by side."""
    from cognate_tvm import space
    from cognate_tvm.backends.cuda import launched_kernels
    from cognate_tvm.ops import get_op

    for row in rows:
        for op in OPS:
            data = row["ops"][op]
            gpu = space.create("gpu", op)
            configs, times = data["configs"], data["times_ms"]
            order = [i for i in np.argsort(times, kind="stable") if np.isfinite(times[i])]
            chosen = [configs[i] for i in order[:top]]
            picks = transfers.get(op, {}).get("picks", {}).get(row["name"], [])
            candidates = list(dict.fromkeys(chosen + [gpu.baseline()] + list(picks)))
            results = timer.measure(op, row["matrix"], candidates, row["feat"], check=True, seed=seed)
            timed = {c: (r.time_ms if r.ok and r.correct else None) for c, r in zip(candidates, results)}
            wrong = [{"config": r.config.to_dict(), "error": r.error, "wrong_runs": r.extra.get("wrong_runs")}
                     for r in results if not (r.ok and r.correct)]
            good = [t for t in timed.values() if t is not None]
            try:
                vendor_result = vendor.measure(op, row["matrix"], row["feat"], seed=seed, check=True)
            except Exception as err:  # noqa: BLE001 - recorded; the speedups then stay empty
                vendor_result = {"time_ms": None, "error": f"{type(err).__name__}: {err}"}
            cusparse_ok = vendor_result.get("time_ms") if vendor_result.get("correct") is not False else None
            best = min(good) if good else None
            data["careful"] = {
                "oracle_ms": best, "oracle_config": next((c.to_dict() for c, t in timed.items() if t == best), None),
                "baseline_ms": timed.get(gpu.baseline()),
                "top1_ms": timed.get(picks[0]) if picks else None,
                "top5_ms": min((timed[p] for p in picks if timed.get(p) is not None), default=None) if picks else None,
                "picks": [p.to_dict() for p in picks], "cusparse": vendor_result, "cusparse_ms": cusparse_ok,
                "wrong": wrong, "timed": len(candidates)}
        log.info("careful %s: spmm best %s ms vs cuSPARSE %s ms", row["name"],
                 row["ops"]["spmm"]["careful"]["oracle_ms"], row["ops"]["spmm"]["careful"]["cusparse_ms"])
    # what one cuSPARSE call launches (profiled last, so the profiler cannot slow any timing)
    for op in OPS if rows else ():
        first = rows[0]["ops"][op]["careful"]["cusparse"]
        if first.get("time_ms") is not None:
            launch, _ = vendor.launcher(op, rows[0]["matrix"], get_op(op).make_dense_inputs(
                rows[0]["matrix"], rows[0]["feat"], seed=seed))
            first["kernels_per_call"] = launched_kernels(launch)


def ratio(a, b):
    return a / b if a is not None and b is not None and b > 0 else None


def summarize(rows: list, transfers: dict, report: Report) -> dict:
    out = {}
    for op in OPS:
        cs = [r["ops"][op].get("careful") for r in rows if r["ops"][op].get("careful")]
        test = [c for c, r in zip(cs, rows) if r["ops"][op].get("careful", {}).get("picks")]
        corr = report.data.get("correctness", {}).get(op, {})
        out[op] = {
            "matrices": len(cs),
            "best_over_cusparse": geomean(ratio(c["cusparse_ms"], c["oracle_ms"]) for c in cs),
            "baseline_over_cusparse": geomean(ratio(c["cusparse_ms"], c["baseline_ms"]) for c in cs),
            "best_over_baseline": geomean(ratio(c["baseline_ms"], c["oracle_ms"]) for c in cs),
            "transfer_test_matrices": len(test),
            "top1_over_cusparse": geomean(ratio(c["cusparse_ms"], c["top1_ms"]) for c in test),
            "top5_over_cusparse": geomean(ratio(c["cusparse_ms"], c["top5_ms"]) for c in test),
            "top1_of_oracle": geomean(ratio(c["oracle_ms"], c["top1_ms"]) for c in test),
            "top5_of_oracle": geomean(ratio(c["oracle_ms"], c["top5_ms"]) for c in test),
            "top5_over_baseline": geomean(ratio(c["baseline_ms"], c["top5_ms"]) for c in test),
            "model": transfers.get(op, {}).get("model") or transfers.get(op, {}).get("error"),
            "correct": corr.get("correct"), "checked": corr.get("checked"),
            "cusparse_wrong": sum(c["cusparse"].get("correct") is False for c in cs),
            "careful_wrong": sum(len(c["wrong"]) for c in cs)}
    return out


def markdown(report: dict) -> str:
    env, summary = report["environment"], report.get("summary", {})
    lines = [f"# GPU check ({'quick' if report['quick'] else 'full'}): {env.get('tvm_device_name') or env.get('device')}, "
             f"{report['arch']}, feat={report['feat']}", "",
             f"torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), TVM {env.get('tvm')}, device code compiled "
             f"with {env.get('compile_mode')}; took {report.get('total_s', float('nan')):.0f} s"
             + (" (budget reached: fewer matrices than asked)" if report.get("truncated") else "") + ".", "",
             "| | SpMM | SDDMM |", "|---|---|---|"]

    def cell(op, key, fmt="{:.2f}x"):
        value = summary.get(op, {}).get(key)
        return "n/a" if value is None or (isinstance(value, float) and not np.isfinite(value)) else fmt.format(value)

    rows = [("configs correct / checked (4 matrices, NaN-filled, timed run checked)", None),
            ("matrices timed side by side with cuSPARSE", "matrices"),
            ("best in space / cuSPARSE (geomean speedup)", "best_over_cusparse"),
            ("baseline config / cuSPARSE", "baseline_over_cusparse"),
            ("best in space / baseline config", "best_over_baseline"),
            ("transfer test matrices", "transfer_test_matrices"),
            ("model top-1 / cuSPARSE", "top1_over_cusparse"),
            ("model top-5 / cuSPARSE", "top5_over_cusparse"),
            ("model top-1, fraction of oracle", "top1_of_oracle"),
            ("model top-5, fraction of oracle", "top5_of_oracle"),
            ("model top-5 / baseline config", "top5_over_baseline")]
    for title, key in rows:
        if key is None:
            values = [f"{summary.get(op, {}).get('correct')} / {summary.get(op, {}).get('checked')}" for op in OPS]
        elif key in ("matrices", "transfer_test_matrices"):
            values = [cell(op, key, "{}") for op in OPS]
        elif "of_oracle" in key:
            values = [cell(op, key, "{:.3f}") for op in OPS]
        else:
            values = [cell(op, key) for op in OPS]
        lines.append(f"| {title} | {values[0]} | {values[1]} |")
    lines += ["", "Speedups are geomeans over matrices of (other time / our time); > 1 means ours is faster. "
              "All times: back-to-back launches between CUDA events, median of samples, every timed sample's "
              "output checked against scipy; cuSPARSE on the same int32 CSR arrays, SDDMM without a separate "
              "multiply by A's values.", ""]
    for op in OPS:
        lines.append(f"- {op} model: {summary.get(op, {}).get('model')}")
    return "\n".join(lines) + "\n"


def run(args, report: Report) -> int:
    from cognate_tvm import backends
    from cognate_tvm.matrix import generate_corpus

    started = time.perf_counter()
    deadline = started + args.budget_s
    timer = backends.create("cuda", arch=args.arch, number=args.number, repeat=args.repeat,
                            min_repeat_ms=args.min_sample_ms)
    failed = timer.prepare(OPS)
    report["build"] = {"seconds": time.perf_counter() - started, "failed": failed}
    report.save()
    log.info("built all kernel variants in %.1f s (%d failed)", report["build"]["seconds"], len(failed))

    correctness(timer, report, args.seed)
    report.save()

    corpus = generate_corpus(args.matrices, seed=args.seed, min_rows=args.min_rows, max_rows=args.max_rows)
    # the sweep may use the budget up to what the later phases need (they are short)
    rows, truncated = sweep(timer, corpus, args.feat, args.seed, deadline - args.reserve_s, args.min_matrices)
    for row in rows:
        row["feat"] = args.feat
    report["truncated"] = truncated
    report["sweep"] = [{"name": r["name"], "family": r["family"], "shape": r["shape"], "nnz": r["nnz"],
                        **{op: {"configs": len(r["ops"][op]["configs"]),
                                "failed": int(np.isnan(r["ops"][op]["times_ms"]).sum()),
                                "errors": r["ops"][op]["errors"],
                                "best_ms": float(np.nanmin(r["ops"][op]["times_ms"]))
                                if np.isfinite(r["ops"][op]["times_ms"]).any() else None} for op in OPS}}
                       for r in rows]
    report.save()

    transfers: dict = {}
    if len(rows) > args.finetune:
        for op in OPS:
            try:
                transfers[op] = transfer(op, rows, args.finetune, args.finetune_configs, args.seed,
                                         fit_epochs=args.fit_epochs)
            except Exception as err:  # noqa: BLE001 - the timing below still runs
                log.exception("transfer %s failed", op)
                transfers[op] = {"error": f"transfer failed: {type(err).__name__}: {err}"}
    report["transfer"] = {op: {k: v for k, v in t.items() if k != "picks"} for op, t in transfers.items()}
    report.save()

    careful(timer, timer.vendor(), rows, transfers, args.seed, args.top)
    report["matrices"] = [{"name": r["name"], "family": r["family"], "shape": r["shape"], "nnz": r["nnz"],
                           **{op: r["ops"][op]["careful"] for op in OPS}} for r in rows]
    report["summary"] = summarize(rows, transfers, report)
    report["total_s"] = time.perf_counter() - started
    report.save()
    md = markdown(report.data)
    (args.out / "gpu_check.md").write_text(md)
    print(md)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "gpu_check")
    parser.add_argument("--arch", choices=("sm_80", "sm_90"), default="sm_90")
    parser.add_argument("--quick", action="store_true",
                        help="< 5 min on an H200: 12 matrices of 8k-64k rows, 3 timed samples, budget 240 s")
    parser.add_argument("--feat", type=int, default=128)
    parser.add_argument("--matrices", type=int, default=24)
    parser.add_argument("--min-matrices", type=int, default=10, help="the sweep never stops before this many")
    parser.add_argument("--min-rows", type=int, default=4096)
    parser.add_argument("--max-rows", type=int, default=65536)
    parser.add_argument("--finetune", type=int, default=5, help="matrices the model is fine-tuned on")
    parser.add_argument("--finetune-configs", type=int, default=100, help="sampled configs per fine-tune matrix")
    parser.add_argument("--fit-epochs", type=int, default=None,
                        help="epochs of the GPU-only model trained when no CPU model ships (--quick: 10)")
    parser.add_argument("--top", type=int, default=3, help="sweep's best configs re-timed carefully")
    parser.add_argument("--number", type=int, default=10, help="back-to-back launches per timed sample (minimum)")
    parser.add_argument("--repeat", type=int, default=5, help="timed samples (median reported)")
    parser.add_argument("--min-sample-ms", type=float, default=2.0, help="a timed sample lasts at least this")
    parser.add_argument("--budget-s", type=float, default=900.0, help="stop adding matrices after this")
    parser.add_argument("--reserve-s", type=float, default=60.0, help="budget kept for transfer + careful timing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile-only", action="store_true", help="build + nvcc PTX only, no GPU needed")
    args = parser.parse_args(argv)
    if args.quick:  # every check stays; fewer matrices, samples and epochs
        args.matrices, args.budget_s = min(args.matrices, 12), min(args.budget_s, 240.0)
        args.repeat = min(args.repeat, 3)
        args.min_rows = max(args.min_rows, 8192)  # smaller ones only time launch overhead on an H200
        args.fit_epochs = 10 if args.fit_epochs is None else args.fit_epochs
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.compile_only:
        return compile_only(args)
    report = Report(args.out / "gpu_check.json", mode="gpu", quick=args.quick, arch=args.arch, feat=args.feat,
                    args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()})
    env = environment()
    report["environment"] = env
    report.save()
    log.info("environment: %s", json.dumps(env))
    if not env["tvm_device"]:
        if env["driver_gpus"] == 0:
            print(f"gpu_check: no GPU here ({env['driver']}); --compile-only builds and compiles to PTX "
                  "without one.", file=sys.stderr)
            return EXIT_NO_GPU
        print(f"gpu_check: {env['driver']}, but TVM cannot use it: {env['tvm_runtime_error']}", file=sys.stderr)
        return EXIT_BROKEN_RUNTIME
    return run(args, report)


if __name__ == "__main__":
    sys.exit(main())
