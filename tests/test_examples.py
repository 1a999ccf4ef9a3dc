"""The examples run as a user runs them (in a subprocess), against tiny stand-ins for the shipped models."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

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
