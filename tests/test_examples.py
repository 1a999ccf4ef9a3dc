"""The examples run as a user runs them (in a subprocess), against tiny stand-ins for the shipped models."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cognate_tvm.matrix import generate, save_matrix
from tiny_models import ship, tiny_cpu_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    return ship(tiny_cpu_model(), tmp_path_factory.mktemp("pretrained"))


def test_tune_sh(shipped, tmp_path):
    env = dict(os.environ, COGNATE_PRETRAINED_DIR=str(shipped), PYTHON=sys.executable)
    out = tmp_path / "tuned"
    out.mkdir()
    run = subprocess.run(["bash", str(ROOT / "examples" / "tune.sh"), str(out)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "speedup over the baseline" in run.stdout or "chosen: the baseline" in run.stdout
    config = json.loads((out / "spmm" / "config.json").read_text())
    assert config["target"] == "llvm" and (out / "spmm" / config["kernel"]["library"]).is_file()
    spade = json.loads((out / "spade.json").read_text())
    assert spade["mode"] == "finetuned" and spade["oracle"]["whole_space"] and spade["oracle_fraction"] <= 1.0
    cuda = json.loads((out / "cuda" / "report.json").read_text())
    assert len(cuda["kernels"]) == 3 and (out / "cuda" / "top1.cu").is_file()


def test_metaschedule_example(shipped, tmp_path):
    matrix = save_matrix(generate("rmat", 1500, seed=3), tmp_path / "a.mtx")
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "metaschedule_spmm.py"), "--matrix", str(matrix),
                          "--feat", "32", "--trials", "8", "--pretrained-dir", str(shipped)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    default = re.search(r"default schedule: ([0-9.]+) ms", run.stdout)
    tuned = re.search(r"tuned schedule:\s+([0-9.]+) ms", run.stdout)
    assert default and tuned and float(default.group(1)) > 0 and float(tuned.group(1)) > 0, run.stdout
    assert "output checked against scipy" in run.stdout


def _run_benchmark(script, *args, timeout=600):
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *map(str, args)], capture_output=True,
                         text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_tune_eval_benchmark_at_test_size(shipped, tmp_path):
    out = tmp_path / "tune_eval"
    _run_benchmark("tune_eval.py", "--matrices", 2, "--min-rows", 300, "--max-rows", 400, "--random", 4, "--top-k", 2,
                   "--feat", 32, "--threads", 2, "--pretrained-dir", shipped, "--out", out)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and len({r["matrix"] for r in rows}) == 2
    for r in rows:
        assert r["tune_measurements"] <= 3 and r["random_measurements"] == 5
        assert r["tune_speedup"] == pytest.approx(r["baseline_ms"] / r["tune_ms"])
        assert r["random_speedup"] == pytest.approx(r["baseline_ms"] / r["random_ms"])
        assert r["vendor_ms"] > 0 and r["tune_vs_vendor"] == pytest.approx(r["vendor_ms"] / r["tune_ms"])
    summary = json.loads((out / "summary.json").read_text())
    geo = float(np.exp(np.mean(np.log([r["tune_speedup"] for r in rows]))))
    assert summary["tune_speedup_geomean"] == pytest.approx(geo)
    assert "| tune / baseline |" in (out / "summary.md").read_text() and (out / "tune_eval.png").stat().st_size
    # a rerun reuses the finished matrices
    again = _run_benchmark("tune_eval.py", "--matrices", 2, "--min-rows", 300, "--max-rows", 400, "--random", 4,
                           "--top-k", 2, "--feat", 32, "--pretrained-dir", shipped, "--out", out)
    assert len((out / "results.jsonl").read_text().splitlines()) == 2 and "geomean" in again.stdout


def test_tune_eval_spade_oracle(shipped, tmp_path):
    out = tmp_path / "tune_eval_spade"
    _run_benchmark("tune_eval.py", "--target", "spade", "--oracle", "--no-vendor", "--matrices", 2, "--min-rows", 300,
                   "--max-rows", 400, "--random", 4, "--top-k", 2, "--budget", 3, "--feat", 32, "--pretrained-dir",
                   shipped, "--out", out)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for r in rows:
        # baseline + 3 fine-tuning samples + top-2 (fewer when the ranking's top repeats a measured config)
        assert 4 < r["tune_measurements"] <= 1 + 3 + 2
        # the simulator is deterministic: the oracle is the fastest of all 256 configs, so no pick beats it
        assert r["oracle_whole_space"] and r["oracle_configs"] == 256
        assert 0 < r["tune_oracle_fraction"] <= 1 and 0 < r["random_oracle_fraction"] <= 1
        assert 0 < r["baseline_oracle_fraction"] <= r["random_oracle_fraction"]
    summary = json.loads((out / "summary.json").read_text())
    geo = float(np.exp(np.mean(np.log([r["tune_oracle_fraction"] for r in rows]))))
    assert summary["tune_oracle_fraction_geomean"] == pytest.approx(geo)
    assert "| tune / oracle |" in (out / "summary.md").read_text()


def test_metaschedule_compare_at_test_size(shipped, tmp_path):
    out = tmp_path / "ms"
    _run_benchmark("metaschedule_compare.py", "--matrices", 1, "--trials", 8, "--min-rows", 800, "--max-rows", 800,
                   "--feat", 32, "--methods", "cognate", "xgb", "--pretrained-dir", shipped, "--out", out)
    runs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["method"], r["trials"]) for r in runs] == [("cognate", 8), ("xgb", 8)]
    assert all(r["error"] is None and r["best_ms"] > 0 for r in runs), runs
    summary = json.loads((out / "summary.json").read_text())
    best = min(r["best_ms"] for r in runs)
    for r in runs:
        assert summary["table"][f"{r['method']}@8"]["geomean_fraction"] == pytest.approx(best / r["best_ms"])
    assert max(c["geomean_fraction"] for c in summary["table"].values()) == pytest.approx(1.0)
    assert (out / "metaschedule_compare.png").stat().st_size and "cognate" in (out / "summary.md").read_text()
