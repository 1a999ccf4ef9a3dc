"""benchmarks/gpu_check.py without a GPU: the exit paths, the transfer phase, the summary and the table.

The GPU phases themselves run on a GPU machine (`bash scripts/gpu_run.sh run`,
docs/gpu.md); here their bookkeeping is checked on synthetic timings.
"""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from cognate_tvm.kernels import cuda as kcuda
from cognate_tvm.matrix import generate
from cognate_tvm.space import create

REPO = Path(__file__).resolve().parent.parent
GPU_COUNT, GPU_DETAIL = kcuda.driver_gpu_count()


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_check", None)


@pytest.mark.skipif(GPU_COUNT > 0, reason="a GPU is present: the no-GPU exit does not apply")
def test_without_gpu_exits_2_and_leaves_the_environment_in_the_json(gc, tmp_path):
    assert gc.main(["--quick", "--out", str(tmp_path)]) == gc.EXIT_NO_GPU
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    env = report["environment"]
    assert report["quick"] and env["driver_gpus"] == 0 and env["tvm_device"] is False
    assert env["compile_mode"] in ("nvcc", "nvrtc") and env["tvm"].startswith("0.27")


def _synthetic_rows(op: str, count: int, seed: int = 0) -> list[dict]:
    """Sweep rows as `sweep` returns them, with made-up times that depend on the config."""
    configs = create("gpu", op).configs()
    rows = []
    for n in range(count):
        matrix = generate("rmat" if n % 2 else "banded", 300 + 40 * n, seed + n)
        times = np.array([1.0 + 0.1 * c.parts + 0.05 * (n % 3) * c.rows_per_block + 0.2 / c.vec
                          + (0.3 if c.bucketing and n % 2 else 0.0) for c in configs])
        times[::17] = np.nan  # failed configs are NaN and never sampled
        rows.append({"name": f"m{n}", "family": "x", "shape": list(matrix.shape), "nnz": int(matrix.nnz),
                     "matrix": matrix, "feat": 32, "ops": {op: {"configs": configs, "times_ms": times}}})
    return rows


@pytest.mark.parametrize("ships", [False, True])
def test_transfer_fine_tunes_or_says_it_trained_from_gpu_data_alone(gc, monkeypatch, ships):
    import cognate_tvm.model as model_pkg
    from cognate_tvm.errors import PretrainedNotFoundError
    from cognate_tvm.model import ModelConfig
    from cognate_tvm.model.cognate import CognateCostModel

    small = ModelConfig().replace(**{"latent.epochs": 5, "featurizer.max_points": 4096, "train.train_featurizer": False})

    def fake_load(op, platform):
        assert platform == "cpu"
        if not ships:
            raise PretrainedNotFoundError(f"no shipped model for op {op!r} on platform 'cpu'")
        return CognateCostModel(small, seed=3)

    monkeypatch.setattr(model_pkg, "load_pretrained", fake_load)
    rows = _synthetic_rows("sddmm", 7)
    out = gc.transfer("sddmm", rows, 5, 20, seed=0, epochs=1, config=small)
    assert out["finetune_matrices"] == [f"m{n}" for n in range(5)] and out["target_samples"] == 100
    assert ("NO CPU MODEL SHIPS" in out["model"]) != ships
    assert set(out["picks"]) == {"m5", "m6"}
    for name, picks in out["picks"].items():
        assert len(picks) == 5 and len(set(picks)) == 5
        assert all(p in rows[int(name[1:])]["ops"]["sddmm"]["configs"] for p in picks)


def _careful(oracle, baseline, top1, top5, cusparse, picks=True):
    return {"oracle_ms": oracle, "baseline_ms": baseline, "top1_ms": top1 if picks else None,
            "top5_ms": top5 if picks else None, "picks": [{"x": 1}] if picks else [],
            "cusparse": {"time_ms": cusparse, "correct": True}, "cusparse_ms": cusparse, "wrong": []}


def test_summary_and_table(gc, tmp_path):
    rows = [{"name": "a", "family": "rmat", "nnz": 2_000_000,
             "ops": {"spmm": {"careful": _careful(1.0, 2.0, 1.25, 1.0, 2.0, picks=False)},
                     "sddmm": {"careful": _careful(1.0, 1.0, 1.0, 1.0, 4.0, picks=False)}}},
            {"name": "b", "family": "banded", "nnz": 3_000_000,
             "ops": {"spmm": {"careful": _careful(2.0, 2.0, 4.0, 2.5, 8.0)},
                     "sddmm": {"careful": _careful(1.0, 3.0, 2.0, 1.0, None)}}}]
    rows[1]["ops"]["spmm"]["careful"].update(tune_ms=2.5, tune={"model": "spmm-gpu", "notes": []},
                                             oracle_of_floor=0.5)
    report = gc.Report(tmp_path / "r.json", quick=True, arch="sm_90", feat=128,
                       environment={"tvm_device_name": "NVIDIA H200", "compile_mode": "nvcc"},
                       correctness={"spmm": {"correct": 528, "checked": 2112}})
    transfers = {"spmm": {"model": "shipped CPU model, fine-tuned on the GPU matrices"},
                 "sddmm": {"error": "transfer failed: RuntimeError: x"}}
    summary = gc.summarize(rows, transfers, report)
    spmm, sddmm = summary["spmm"], summary["sddmm"]
    assert spmm["matrices"] == 2 and math.isclose(spmm["best_over_cusparse"], math.sqrt(2.0 * 4.0))
    assert math.isclose(spmm["best_over_baseline"], math.sqrt(2.0))
    assert spmm["transfer_test_matrices"] == 1 and math.isclose(spmm["top5_over_cusparse"], 8.0 / 2.5)
    assert math.isclose(spmm["top1_of_oracle"], 0.5) and math.isclose(spmm["top5_of_oracle"], 0.8)
    assert math.isclose(sddmm["best_over_cusparse"], 4.0)  # a matrix without a cuSPARSE time drops out
    assert sddmm["model"].startswith("transfer failed") and spmm["correct"] == 528
    assert spmm["rmat_matrices"] == 1 and math.isclose(spmm["rmat_best_over_cusparse"], 2.0)
    assert spmm["regular_1m_matrices"] == 1 and math.isclose(spmm["regular_1m_best_over_cusparse"], 4.0)
    assert spmm["tune_matrices"] == 1 and math.isclose(spmm["tune_of_oracle"], 0.8)
    assert math.isclose(spmm["nnz_1m_best_of_floor"], 0.5) and spmm["tune_model"] == "spmm-gpu"
    assert sddmm["tune_matrices"] == 0 and math.isnan(sddmm["tune_of_oracle"])
    report["summary"], report["total_s"] = summary, 123.0
    table = gc.markdown(report.data)
    assert "NVIDIA H200" in table and "| best in space / cuSPARSE (geomean speedup) | 2.83x | 4.00x |" in table
    assert "| configs correct / checked" in table and "528 / 2112" in table
    assert "| model top-5, fraction of oracle | 0.800 | 1.000 |" in table
    assert "| ... on the R-MAT power-law graphs | 2.00x | 4.00x |" in table
    assert "| tune's choice, fraction of the best in space | 0.800 | n/a |" in table
    report.save()
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["spmm"]["matrices"] == 2


def test_check_matrices_cover_the_edge_cases(gc):
    matrices = gc.check_matrices(0)
    assert len(matrices) == 4
    skewed = matrices["skewed_rows"]
    lengths = np.diff(skewed.indptr)
    assert (lengths == 0).any() and lengths.max() > 32  # empty rows, and rows longer than any bucket
    assert matrices["bipartite"].shape[0] != matrices["bipartite"].shape[1]
    assert gc.CHECK_FEAT % 2 and gc.CHECK_FEAT % 4


class FakeBackend:
    """Stands in for the CUDA backend: made-up times, every output right; records what it was asked."""

    target, platform, deterministic = "cuda", "gpu", False

    def __init__(self):
        self.measured: list[tuple[str, int, bool]] = []

    def kernel_threads(self):
        return None

    def metadata(self):
        return {"target": self.target, "platform": self.platform, "timing": "fake"}

    def prepare(self, ops):
        return {}

    def with_timing(self, **settings):
        return self

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        from cognate_tvm.backends.base import MeasureResult
        from cognate_tvm.ops import get_op

        op = get_op(op).name
        self.measured.append((op, len(configs), check))
        return [MeasureResult(c, 1.0 + 0.1 * c.parts + 0.2 / c.vec + matrix.nnz * 1e-6,
                              correct=True if check else None, extra={}) for c in configs]

    def vendor(self):
        return FakeVendor()


class FakeVendor:
    def measure(self, op, matrix, feat, *, seed=0, check=True):
        return {"time_ms": 2.0, "samples_ms": [2.0], "launches": 1, "method": "fake", "correct": True}

    def launcher(self, op, matrix, dense):
        return (lambda: None), (lambda raw: raw)


def test_whole_gpu_flow_on_a_fake_backend(gc, monkeypatch, tmp_path):
    """Every phase after the environment, with the GPU replaced by FakeBackend: the bookkeeping
    that would otherwise first run on a GPU host."""
    import functools

    import cognate_tvm.backends as backends_pkg
    import cognate_tvm.model as model_pkg
    from cognate_tvm.errors import PretrainedNotFoundError
    from cognate_tvm.model import ModelConfig

    fake = FakeBackend()
    monkeypatch.setattr(backends_pkg, "create", lambda target, **options: fake)
    monkeypatch.setattr(model_pkg, "load_pretrained",
                        lambda op, platform: (_ for _ in ()).throw(PretrainedNotFoundError("none ships")))
    small = ModelConfig().replace(**{"latent.epochs": 5, "featurizer.max_points": 4096, "train.train_featurizer": False})
    monkeypatch.setattr(gc, "transfer", functools.partial(gc.transfer, epochs=1, config=small))
    args = gc.main.__globals__["argparse"].Namespace(
        out=tmp_path, arch="sm_90", quick=True, feat=16, matrices=7, new_matrices=None, min_rows=200, max_rows=400,
        finetune=5, finetune_configs=10, fit_epochs=1, top=3, number=2, repeat=2, min_sample_ms=0.0,
        budget_s=600.0, reserve_s=60.0, seed=0, tune=True, dataset=tmp_path / "ds",
        dataset_archive=tmp_path / "ds.tar.gz")
    report = gc.Report(tmp_path / "gpu_check.json", mode="gpu", quick=True, arch="sm_90", feat=16,
                       environment={"tvm_device_name": "fake", "compile_mode": "nvcc"})
    assert gc.run(args, report) == 0
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert data["correctness"]["spmm"]["checked"] == 4 * len(create("gpu", "spmm"))
    assert data["correctness"]["sddmm"]["correct"] == 4 * len(create("gpu", "sddmm"))
    assert len(data["sweep"]) == 7 and len(data["matrices"]) == 7 and not data["truncated"]
    assert all("NO CPU MODEL SHIPS" in data["transfer"][op]["model"] for op in gc.OPS)
    test_rows = [m for m in data["matrices"] if m["spmm"]["picks"]]
    assert len(test_rows) == 2 and all(len(m["sddmm"]["picks"]) == 5 for m in test_rows)
    summary = data["summary"]["spmm"]
    assert summary["matrices"] == 7 and summary["transfer_test_matrices"] == 2 and summary["best_over_cusparse"] > 1
    assert 0 < summary["top5_of_oracle"] <= 1 and summary["careful_wrong"] == 0
    # every side-by-side measurement was checked; the sweep (chunks of every config) was not
    checked = {(op, n) for op, n, check in fake.measured if check}
    assert all((op, m[op]["timed"]) in checked for m in data["matrices"] for op in gc.OPS)
    from cognate_tvm.sweeps import SWEEP_CHUNK

    assert not any(check for op, n, check in fake.measured if n == SWEEP_CHUNK)
    # tune ran as a user runs it (the baseline and the default search's measurements), on every matrix,
    # with the model it says it used
    from cognate_tvm.tuning.search import Adaptive

    for m in data["matrices"]:
        for op in gc.OPS:
            assert m[op]["tune"]["measurements"] == 1 + Adaptive().measurements and m[op]["tune_ms"] is not None, \
                m[op]["tune"]
            assert m[op]["hbm_floor_ms"] > 0 and m[op]["oracle_of_floor"] > 0
    assert summary["tune_matrices"] == 7 and 0 < summary["tune_of_oracle"] <= 1
    assert summary["tune_model"] and data["models"]["spmm"]["source"] == summary["tune_model"]
    table = (tmp_path / "gpu_check.md").read_text()
    assert "model top-5 / cuSPARSE" in table and "NO CPU MODEL SHIPS" in table and "tune's choice" in table
    # the sweep is a dataset in the CPU datasets' format, every config of both ops, and its archive
    from cognate_tvm.data import COLUMNS, load_frame

    frame = load_frame(tmp_path / "ds")
    assert tuple(frame.columns) == COLUMNS and frame["matrix"].nunique() == 7
    assert len(frame) == 7 * sum(len(create("gpu", op).configs()) for op in gc.OPS)
    assert set(frame["platform"]) == {"gpu"} and frame["time_ms"].notna().all()
    backend = json.loads(frame["backend"].iloc[0])
    assert backend["timing"] == "fake" and backend["tvm_device_name"] == "fake"
    assert backend["matrix_recipe"]["generator"] == "cognate_tvm.matrix.generate"
    import tarfile

    with tarfile.open(tmp_path / "ds.tar.gz") as tar:
        assert len([n for n in tar.getnames() if n.endswith(".parquet")]) == 7 * 2


def test_hbm_floor(gc):
    import scipy.sparse as sp

    m = sp.random_array((1000, 500), density=0.01, format="csr", rng=0)
    spmm = gc.hbm_floor_ms("spmm", m, 64, bandwidth=1e9)
    assert math.isclose(spmm, 1e3 * (4 * 1001 + 8 * m.nnz + 4 * 64 * 1500) / 1e9)
    assert math.isclose(gc.hbm_floor_ms("sddmm", m, 64, bandwidth=1e9) - spmm, 1e3 * 4 * m.nnz / 1e9)


def test_the_backend_keeps_one_matrix_operands_across_chunked_calls():
    """The sweep measures a matrix's configs in chunks: the CUDA backend reuses the operands it put on the
    device (formats, dense inputs, the reference output) while the matrix, op, width and seed stay."""
    from cognate_tvm.backends.cuda import CUDABackend
    from cognate_tvm.ops import get_op

    backend = CUDABackend(arch="sm_90")
    a, b = generate("rmat", 300, 0), generate("rmat", 300, 0)
    spmm, sddmm = get_op("spmm"), get_op("sddmm")
    first = backend._context(spmm, a, 16, 0, dev=None)
    assert backend._context(spmm, a, 16, 0, dev=None) is first
    assert first.dense_host[0].shape == (a.shape[1], 16)
    for other in [(spmm, b, 16, 0), (spmm, a, 32, 0), (spmm, a, 16, 1), (sddmm, a, 16, 0)]:
        assert backend._context(*other, dev=None) is not first  # an equal matrix that is another object too
    import pickle

    assert pickle.loads(pickle.dumps(backend))._last is None
