"""benchmarks/transfer.py --small: writes its reports for every method and reuses collected data."""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest


def _load_benchmark(monkeypatch):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "transfer.py"
    spec = importlib.util.spec_from_file_location("transfer_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # dataclasses look their module up while defining
    spec.loader.exec_module(bench)
    return bench


def test_small_transfer_benchmark(tmp_path, monkeypatch):
    bench = _load_benchmark(monkeypatch)
    out = tmp_path / "transfer"
    argv = ["--small", "--out", str(out), "--kernel-cache", str(tmp_path / "kernels"), "--no-progress"]
    assert bench.main(argv) == 0

    for name in ("transfer.json", "transfer.md", "transfer.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "transfer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads((out / "transfer.json").read_text())
    methods = bench.SMALL.methods
    assert set(methods) == {"cognate", "no_transfer", "zero_shot", "waco_fa", "waco_fm", "xgboost", "random"}
    assert list(result["summary"]) == list(methods)
    table = (out / "transfer.md").read_text()
    for method in methods:
        assert f"| {bench.LABELS[method]} |" in table
    keys = [key for key, _ in bench.COLUMNS] + ["speedup_oracle"]
    for method, row in result["summary"].items():
        for key in keys:
            assert math.isfinite(row[key]), (method, key, row[key])
        assert 0.0 < row["oracle_fraction_top1"] <= row["oracle_fraction_topk"] <= 1.0 + 1e-9
        assert row["speedup_topk"] <= row["speedup_oracle"] + 1e-9
    summary = result["summary"]
    k, configs = bench.SMALL.finetune_matrices, bench.SMALL.finetune_configs
    assert summary["cognate"]["target_samples"] == summary["no_transfer"]["target_samples"] == k * configs
    assert summary["zero_shot"]["target_samples"] == summary["random"]["target_samples"] == 0
    assert len(result["runs"]) == len(methods) * len(bench.SMALL.seeds)
    assert result["info"]["test_matrices"] == (bench.SMALL.target_matrices - k - bench.SMALL.val_matrices)

    # the rerun must reuse both datasets: any measurement fails the test
    parts = {p: p.stat().st_mtime_ns for p in out.glob("*/*.parquet")}
    assert len(parts) == bench.SMALL.source_matrices + bench.SMALL.target_matrices
    from cognate_tvm.backends.cpu import LLVMBackend
    from cognate_tvm.backends.spade import SpadeBackend

    def refuse(*args, **kwargs):
        pytest.fail("re-measured a matrix already in the dataset")

    monkeypatch.setattr(LLVMBackend, "measure", refuse)
    monkeypatch.setattr(SpadeBackend, "measure", refuse)
    assert bench.main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*.parquet")} == parts
    again = json.loads((out / "transfer.json").read_text())
    # same data and seeds: the seeded, deterministic methods give the same numbers
    for method in ("xgboost", "random"):
        assert again["summary"][method]["oracle_fraction_topk"] == pytest.approx(
            summary[method]["oracle_fraction_topk"])
