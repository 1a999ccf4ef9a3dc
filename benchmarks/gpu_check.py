"""One prepared GPU check of the `cuda` target: correctness of every config, a sweep into the dataset, tune, cuSPARSE.

Run it on a GPU host with the package installed (`pip install .[gpu]`), or from
the offline payload with `scripts/gpu_run.sh` (docs/gpu.md). `--quick` finishes in
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
3. sweep: every config of both ops, briefly timed (2 launches), on
   `--new-matrices` (in the order given) or `--matrices` generated ones, to
   find each matrix's best configs (the oracle); inside the budget (a matrix
   predicted not to fit is skipped, a sweep cut short keeps what it timed:
   `cognate_tvm.sweeps`). Every timing goes to a dataset in the CPU datasets' format
   (`cognate_tvm.data`: `--dataset`, Parquet parts, JSON where pyarrow is
   missing), with the device, the timing and each matrix's generator
   arguments in the ``backend`` column; `--dataset-archive` is a .tar.gz of it,
   rewritten after every matrix;
4. transfer (`--finetune K`, 0: none): the shipped CPU model
   (`load_pretrained(op, "cpu")`) is fine-tuned on the sweep of the first K
   matrices (100 sampled configs each) and picks its top-1 / top-5 on the
   others; when no CPU model ships, a model is trained on the same GPU data
   alone, and the JSON and the table say so;
5. matrix after matrix, until the budget ends: `tune` as a user runs it
   (the shipped GPU model's ranking and its default measurements; without a
   GPU model the CPU one zero-shot, and the report says which), then careful
   timing side by side: the sweep's top configs, the baseline config, the
   transfer's picks, tune's choice and cuSPARSE, all timed by the same
   function (back-to-back launches between CUDA events, median of samples)
   with the output of every timed sample checked, and each op's HBM floor
   (its operands moved once at 4.8 TB/s) beside them;
6. summary: OUT/gpu_check.json and OUT/gpu_check.md (geomean speedups over
   cuSPARSE and over the baseline config, on all matrices, the R-MAT graphs
   and the regular ones of 1M+ nonzeros; fractions of the HBM floor; tune's
   choice and the model's picks against the best of the space).

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
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        env["nvidia_smi"] = out.splitlines()[0] if out else None
    except (OSError, subprocess.TimeoutExpired):
        env["nvidia_smi"] = None
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


HBM_BYTES_PER_S = 4.8e12  # the H200's HBM3e peak; the floor below moves A, B and C once at it
def hbm_floor_ms(op: str, matrix: sp.csr_matrix, feat: int, bandwidth: float = HBM_BYTES_PER_S) -> float:
    """The time to move the op's operands once at `bandwidth`: A (int32 indptr and indices, float32
    values), the dense inputs and the output (float32)."""
    rows, cols = matrix.shape
    sparse = 4 * (rows + 1) + 8 * matrix.nnz
    dense = 4 * feat * (rows + cols)  # SpMM: B (cols x N) and C (rows x N); SDDMM: X and Y
    out = 0 if op == "spmm" else 4 * matrix.nnz  # SDDMM's output: one value per nonzero
    return 1e3 * (sparse + dense + out) / bandwidth


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


def load_models(ops=OPS) -> dict:
    """op -> (model, source, notes): the shipped GPU model, else the CPU one zero-shot (notes say which)."""
    from cognate_tvm.model.loading import load_shipped_model

    models = {}
    for op in ops:
        try:
            models[op] = load_shipped_model(op, "gpu")
        except Exception as err:  # noqa: BLE001 - recorded; tune is then skipped for the op
            models[op] = (None, f"no model: {type(err).__name__}: {err}", [])
    return models


def tune_one(timer, op: str, row: dict, model, source: str, seed: int) -> dict:
    """`tune --target cuda` as a user runs it (the shipped model's ranking, its default measurements),
    on a matrix of the sweep; its pick is timed again beside the sweep's best in `careful_row`."""
    from cognate_tvm import tuning

    t0 = time.perf_counter()
    try:
        tuned = tuning.tune(op, row["matrix"], backend=timer, feat=row["feat"],
                            options=tuning.TuneOptions(model=model, model_source=source, seed=seed,
                                                       name=row["name"]))
    except Exception as err:  # noqa: BLE001 - recorded; the other matrices still run
        log.exception("tune %s on %s failed", op, row["name"])
        return {"error": f"{type(err).__name__}: {err}", "seconds": time.perf_counter() - t0}
    chosen = tuned.chosen
    return {"config": None if chosen is None else chosen.config, "time_ms": tuning.chosen_time_ms(tuned),
            "measurements": len(tuned.measured), "failed": len(tuned.failed), "model": tuned.model_source,
            "notes": list(tuned.notes), "seconds": time.perf_counter() - t0}


def careful_row(timer, vendor, row: dict, picks: dict, seed: int, top: int) -> None:
    """Phase 5 on one matrix: the sweep's top configs, the baseline, the transfer's picks, tune's
    choice and cuSPARSE, side by side; the HBM floor beside them."""
    from cognate_tvm import space

    for op in OPS:
        data = row["ops"][op]
        gpu = space.create("gpu", op)
        configs, times = data["configs"], data["times_ms"]
        order = [i for i in np.argsort(times, kind="stable") if np.isfinite(times[i])]
        chosen = [configs[i] for i in order[:top]]
        model_picks = picks.get(op, {}).get("transfer", {}).get(row["name"], [])
        tuned = picks.get(op, {}).get("tune", {}).get(row["name"], {})
        tune_config = tuned.get("config")
        candidates = list(dict.fromkeys(chosen + [gpu.baseline()] + list(model_picks)
                                        + ([tune_config] if tune_config is not None else [])))
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
        floor = hbm_floor_ms(op, row["matrix"], row["feat"])
        data["careful"] = {
            "oracle_ms": best, "oracle_config": next((c.to_dict() for c, t in timed.items() if t == best), None),
            "baseline_ms": timed.get(gpu.baseline()),
            "top1_ms": timed.get(model_picks[0]) if model_picks else None,
            "top5_ms": min((timed[p] for p in model_picks if timed.get(p) is not None), default=None)
            if model_picks else None,
            "picks": [p.to_dict() for p in model_picks], "cusparse": vendor_result, "cusparse_ms": cusparse_ok,
            "tune": {k: (v.to_dict() if k == "config" and v is not None else v) for k, v in tuned.items()},
            "tune_ms": timed.get(tune_config) if tune_config is not None else None,
            "hbm_floor_ms": floor, "oracle_of_floor": ratio(floor, best), "cusparse_of_floor": ratio(floor, cusparse_ok),
            "wrong": wrong, "timed": len(candidates)}
    log.info("careful %s: spmm best %s ms, tune %s ms, cuSPARSE %s ms", row["name"],
             row["ops"]["spmm"]["careful"]["oracle_ms"], row["ops"]["spmm"]["careful"]["tune_ms"],
             row["ops"]["spmm"]["careful"]["cusparse_ms"])


def kernels_per_cusparse_call(vendor, rows: list, seed: int) -> None:
    """What one cuSPARSE call launches (profiled last, so the profiler cannot slow any timing)."""
    from cognate_tvm.backends.cuda import launched_kernels
    from cognate_tvm.ops import get_op

    done = [r for r in rows if all("careful" in r["ops"][op] for op in OPS)]
    for op in OPS if done else ():
        first = done[0]["ops"][op]["careful"]["cusparse"]
        if first.get("time_ms") is not None:
            launch, _ = vendor.launcher(op, done[0]["matrix"], get_op(op).make_dense_inputs(
                done[0]["matrix"], done[0]["feat"], seed=seed))
            first["kernels_per_call"] = launched_kernels(launch)


def ratio(a, b):
    return a / b if a is not None and b is not None and b > 0 else None


def _subsets(rows: list) -> dict[str, list]:
    """The matrices each claim is about: all, the R-MAT power-law graphs, regular ones of 1M+ nonzeros."""
    return {"all": rows, "rmat": [r for r in rows if r["family"] == "rmat"],
            "regular_1m": [r for r in rows if r["family"] not in ("rmat", "bipartite") and r["nnz"] >= 1_000_000],
            "nnz_1m": [r for r in rows if r["nnz"] >= 1_000_000]}


def _speedups(careful: list, *named: tuple[str, str, str]) -> dict:
    """{name: geomean over `careful` of time[reference] / time[key]} for each (name, reference, key)."""
    return {name: geomean(ratio(c[reference], c[key]) for c in careful) for name, reference, key in named}


def summarize(rows: list, transfers: dict, report: Report) -> dict:
    out = {}
    for op in OPS:
        cs = [r["ops"][op].get("careful") for r in rows if r["ops"][op].get("careful")]
        test = [c for c in cs if c.get("picks")]
        tuned = [c for c in cs if c.get("tune_ms") is not None]
        corr = report.data.get("correctness", {}).get(op, {})
        out[op] = {
            "matrices": len(cs),
            **_speedups(cs, ("best_over_cusparse", "cusparse_ms", "oracle_ms"),
                        ("baseline_over_cusparse", "cusparse_ms", "baseline_ms"),
                        ("best_over_baseline", "baseline_ms", "oracle_ms")),
            "transfer_test_matrices": len(test),
            **_speedups(test, ("top1_over_cusparse", "cusparse_ms", "top1_ms"),
                        ("top5_over_cusparse", "cusparse_ms", "top5_ms"), ("top1_of_oracle", "oracle_ms", "top1_ms"),
                        ("top5_of_oracle", "oracle_ms", "top5_ms"), ("top5_over_baseline", "baseline_ms", "top5_ms")),
            "tune_matrices": len(tuned),
            **_speedups(tuned, ("tune_of_oracle", "oracle_ms", "tune_ms"),
                        ("tune_over_cusparse", "cusparse_ms", "tune_ms"),
                        ("tune_over_baseline", "baseline_ms", "tune_ms")),
            "tune_model": next((c["tune"].get("model") for c in tuned), None),
            "tune_notes": next((c["tune"].get("notes") for c in tuned), None),
            "model": transfers.get(op, {}).get("model") or transfers.get(op, {}).get("error"),
            "correct": corr.get("correct"), "checked": corr.get("checked"),
            "cusparse_wrong": sum(c["cusparse"].get("correct") is False for c in cs),
            "careful_wrong": sum(len(c["wrong"]) for c in cs)}
        for subset, members in _subsets(rows).items():
            sub = [r["ops"][op]["careful"] for r in members if r["ops"][op].get("careful")]
            out[op][f"{subset}_matrices"] = len(sub)
            out[op][f"{subset}_best_over_cusparse"] = geomean(ratio(c["cusparse_ms"], c["oracle_ms"]) for c in sub)
            out[op][f"{subset}_best_of_floor"] = geomean(c.get("oracle_of_floor") for c in sub)
            out[op][f"{subset}_cusparse_of_floor"] = geomean(c.get("cusparse_of_floor") for c in sub)
    return out


def _fmt(value, fmt: str = "{:.2f}x") -> str:
    ok = value is not None and not (isinstance(value, float) and not np.isfinite(value))
    return fmt.format(value) if ok else "n/a"


def markdown(report: dict) -> str:
    env, summary = report["environment"], report.get("summary", {})
    lines = [f"# GPU check ({'quick' if report['quick'] else 'full'}): {env.get('tvm_device_name') or env.get('device')}, "
             f"{report['arch']}, feat={report['feat']}", "",
             f"torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), TVM {env.get('tvm')}, device code compiled "
             f"with {env.get('compile_mode')}; took {report.get('total_s', float('nan')):.0f} s"
             + (" (budget reached: fewer matrices or configs than asked, see `truncated` and `skipped`)"
                if report.get("truncated") else "") + ".", "",
             "| | SpMM | SDDMM |", "|---|---|---|"]
    table = [("configs correct / checked (4 matrices, NaN-filled, timed run checked)", None, None),
             ("matrices timed side by side with cuSPARSE", "matrices", "{}"),
             ("best in space / cuSPARSE (geomean speedup)", "best_over_cusparse", "{:.2f}x"),
             ("... on the R-MAT power-law graphs", "rmat_best_over_cusparse", "{:.2f}x"),
             ("... on regular matrices of 1M+ nonzeros", "regular_1m_best_over_cusparse", "{:.2f}x"),
             ("best in space, fraction of the HBM floor (1M+ nonzeros)", "nnz_1m_best_of_floor", "{:.3f}"),
             ("cuSPARSE, fraction of the HBM floor (1M+ nonzeros)", "nnz_1m_cusparse_of_floor", "{:.3f}"),
             ("baseline config / cuSPARSE", "baseline_over_cusparse", "{:.2f}x"),
             ("best in space / baseline config", "best_over_baseline", "{:.2f}x"),
             ("matrices tuned (`tune`, default measurements)", "tune_matrices", "{}"),
             ("tune's choice, fraction of the best in space", "tune_of_oracle", "{:.3f}"),
             ("tune's choice / cuSPARSE", "tune_over_cusparse", "{:.2f}x"),
             ("tune's choice / baseline config", "tune_over_baseline", "{:.2f}x"),
             ("transfer test matrices", "transfer_test_matrices", "{}"),
             ("model top-1, fraction of oracle", "top1_of_oracle", "{:.3f}"),
             ("model top-5, fraction of oracle", "top5_of_oracle", "{:.3f}"),
             ("model top-1 / cuSPARSE", "top1_over_cusparse", "{:.2f}x"),
             ("model top-5 / cuSPARSE", "top5_over_cusparse", "{:.2f}x"),
             ("model top-5 / baseline config", "top5_over_baseline", "{:.2f}x")]
    for title, key, fmt in table:
        if key is None:
            values = [f"{summary.get(op, {}).get('correct')} / {summary.get(op, {}).get('checked')}" for op in OPS]
        else:
            values = [_fmt(summary.get(op, {}).get(key), fmt) for op in OPS]
        lines.append(f"| {title} | {values[0]} | {values[1]} |")
    lines += ["", "Speedups are geomeans over matrices of (other time / our time); > 1 means ours is faster. "
              "All times: back-to-back launches between CUDA events, median of samples, every timed sample's "
              "output checked against scipy; cuSPARSE on the same int32 CSR arrays, SDDMM without a separate "
              f"multiply by A's values. HBM floor: A, the dense inputs and the output moved once at "
              f"{HBM_BYTES_PER_S / 1e12:.1f} TB/s.", ""]
    for op in OPS:
        lines.append(f"- {op} tune model: {summary.get(op, {}).get('tune_model')} "
                     f"{' '.join(summary.get(op, {}).get('tune_notes') or [])}".rstrip())
        if summary.get(op, {}).get("model"):
            lines.append(f"- {op} transfer model: {summary.get(op, {}).get('model')}")
    lines += ["", "| matrix | nnz | op | best ms | cuSPARSE ms | best / cuSPARSE | best / floor | tune ms | "
              "tune / best |", "|---|---|---|---|---|---|---|---|---|"]
    for m in report.get("matrices", []):
        for op in OPS:
            c = m.get(op) or {}
            lines.append(f"| {m['name']} | {m['nnz']} | {op} | {_fmt(c.get('oracle_ms'), '{:.4f}')} | "
                         f"{_fmt(c.get('cusparse_ms'), '{:.4f}')} | "
                         f"{_fmt(ratio(c.get('cusparse_ms'), c.get('oracle_ms')))} | "
                         f"{_fmt(c.get('oracle_of_floor'), '{:.3f}')} | {_fmt(c.get('tune_ms'), '{:.4f}')} | "
                         f"{_fmt(ratio(c.get('oracle_ms'), c.get('tune_ms')), '{:.3f}')} |")
    return "\n".join(lines) + "\n"


def sweep_corpus(args) -> list:
    """The matrices to sweep, in order: `--new-matrices` (the must-show ones first), else a generated corpus."""
    from cognate_tvm.matrix import generate_corpus
    from cognate_tvm.sweeps import named_matrices

    if args.new_matrices:
        return named_matrices(args.new_matrices)
    return generate_corpus(args.matrices, seed=args.seed, min_rows=args.min_rows, max_rows=args.max_rows)


def save_sweep_summary(report: Report, rows: list, sweeper, truncated: bool) -> None:
    report["truncated"] = truncated
    report["skipped"] = sweeper.skipped
    report["sweep"] = [{"name": r["name"], "family": r["family"], "shape": r["shape"], "nnz": r["nnz"],
                        "recipe": r["recipe"],
                        **{op: {"configs": len(r["ops"][op]["configs"]), "swept": r["ops"][op]["swept"],
                                "failed": int(r["ops"][op]["swept"] - np.isfinite(r["ops"][op]["times_ms"]).sum()),
                                "errors": r["ops"][op]["errors"],
                                "best_ms": float(np.nanmin(r["ops"][op]["times_ms"]))
                                if np.isfinite(r["ops"][op]["times_ms"]).any() else None} for op in OPS}}
                       for r in rows]
    report.save()


def run_transfer(args, rows: list) -> dict:
    transfers: dict = {}
    if args.finetune > 0 and len(rows) > args.finetune:
        for op in OPS:
            try:
                transfers[op] = transfer(op, rows, args.finetune, args.finetune_configs, args.seed,
                                         fit_epochs=args.fit_epochs)
            except Exception as err:  # noqa: BLE001 - the timing below still runs
                log.exception("transfer %s failed", op)
                transfers[op] = {"error": f"transfer failed: {type(err).__name__}: {err}"}
    return transfers


def tune_and_time(args, timer, rows: list, transfers: dict, report: Report, deadline: float) -> list:
    """Phases 4b and 5, matrix after matrix until `deadline`: tune on it, then time side by side."""
    models = load_models() if args.tune else {}
    picks = {op: {"transfer": transfers.get(op, {}).get("picks", {}), "tune": {}} for op in OPS}
    vendor, done, per_row = timer.vendor(), [], None
    for row in rows:
        left = deadline - time.perf_counter()
        if per_row is not None and left < per_row:
            log.warning("budget: side-by-side timing stops after %d of %d matrices", len(done), len(rows))
            report["timed_matrices_skipped"] = [r["name"] for r in rows[len(done):]]
            break
        t0 = time.perf_counter()
        for op, (model, source, _notes) in models.items():
            if model is not None:
                picks[op]["tune"][row["name"]] = tune_one(timer, op, row, model, source, args.seed)
        careful_row(timer, vendor, row, picks, args.seed, args.top)
        done.append(row)
        per_row = max(per_row or 0.0, time.perf_counter() - t0)
        report["models"] = {op: {"source": m[1], "notes": m[2]} for op, m in models.items()}
        finish(args, report, done, transfers)  # a run killed later still leaves the table so far
    kernels_per_cusparse_call(vendor, done, args.seed)
    return done


def finish(args, report: Report, done: list, transfers: dict) -> str:
    """Write the JSON's matrices and summary and the markdown table for the matrices `done`."""
    report["matrices"] = matrix_entries(done)
    report["summary"] = summarize(done, transfers, report)
    report["total_s"] = time.perf_counter() - args.started
    report.save()
    md = markdown(report.data)
    (args.out / "gpu_check.md").write_text(md)
    return md


def matrix_entries(rows: list) -> list:
    return [{"name": r["name"], "family": r["family"], "shape": r["shape"], "nnz": r["nnz"],
             **{op: r["ops"][op]["careful"] for op in OPS}} for r in rows]


def run(args, report: Report) -> int:
    from cognate_tvm import backends
    from cognate_tvm.sweeps import Sweep

    started = args.started = time.perf_counter()
    deadline = started + args.budget_s
    timer = backends.create("cuda", arch=args.arch, number=args.number, repeat=args.repeat,
                            min_repeat_ms=args.min_sample_ms)
    failed = timer.prepare(OPS)
    report["build"] = {"seconds": time.perf_counter() - started, "failed": failed}
    report.save()
    log.info("built all kernel variants in %.1f s (%d failed)", report["build"]["seconds"], len(failed))

    correctness(timer, report, args.seed)
    report.save()

    env = report.data.get("environment", {})
    sweeper = Sweep(timer.with_timing(number=2, repeat=1, min_repeat_ms=0), ops=OPS, feat=args.feat,
                    seed=args.seed, deadline=deadline - args.reserve_s,
                    dataset=args.dataset, archive=args.dataset_archive,
                    metadata={k: env.get(k) for k in ("device", "tvm_device_name", "compute_version", "nvidia_smi",
                                                      "torch", "torch_cuda", "compile_mode", "nvcc_version", "tvm")})
    rows, truncated = sweeper.run(sweep_corpus(args))
    save_sweep_summary(report, rows, sweeper, truncated)

    transfers = run_transfer(args, rows)
    report["transfer"] = {op: {k: v for k, v in t.items() if k != "picks"} for op, t in transfers.items()}
    report.save()

    done = tune_and_time(args, timer, rows, transfers, report, deadline)
    print(finish(args, report, done, transfers))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "gpu_check")
    parser.add_argument("--arch", choices=("sm_80", "sm_90"), default="sm_90")
    parser.add_argument("--quick", action="store_true",
                        help="< 5 min on an H200: 12 matrices of 8k-64k rows, 3 timed samples, budget 240 s")
    parser.add_argument("--feat", type=int, default=128)
    parser.add_argument("--matrices", type=int, default=24, help="generated corpus of this many matrices ...")
    parser.add_argument("--new-matrices", default=None, metavar="FAMILY:ROWS:SEED[:perm],...",
                        help="... or these matrices, swept in this order (put the ones that must be shown first)")
    parser.add_argument("--dataset", type=Path, default=None,
                        help="dataset directory the sweep's timings go to (default OUT/dataset)")
    parser.add_argument("--dataset-archive", type=Path, default=None,
                        help="a .tar.gz of the dataset, rewritten after every matrix (default: none)")
    parser.add_argument("--no-tune", dest="tune", action="store_false",
                        help="skip `tune` with the shipped GPU model on the swept matrices")
    parser.add_argument("--min-rows", type=int, default=4096)
    parser.add_argument("--max-rows", type=int, default=65536)
    parser.add_argument("--finetune", type=int, default=5,
                        help="matrices the CPU model is fine-tuned on in the transfer phase (0: no transfer phase)")
    parser.add_argument("--finetune-configs", type=int, default=100, help="sampled configs per fine-tune matrix")
    parser.add_argument("--fit-epochs", type=int, default=None,
                        help="epochs of the GPU-only model trained when no CPU model ships (--quick: 10)")
    parser.add_argument("--top", type=int, default=3, help="sweep's best configs re-timed carefully")
    parser.add_argument("--number", type=int, default=10, help="back-to-back launches per timed sample (minimum)")
    parser.add_argument("--repeat", type=int, default=5, help="timed samples (median reported)")
    parser.add_argument("--min-sample-ms", type=float, default=2.0, help="a timed sample lasts at least this")
    parser.add_argument("--budget-s", type=float, default=900.0,
                        help="seconds from the build on: the sweep skips or stops what does not fit, and "
                             "the side-by-side timing stops adding matrices")
    parser.add_argument("--reserve-s", type=float, default=60.0,
                        help="of the budget, kept from the sweep for transfer, tune and side-by-side timing")
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
    args.dataset = args.dataset or args.out / "dataset"
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
