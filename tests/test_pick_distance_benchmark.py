"""benchmarks/pick_distance.py --size test: its scores are transfer.py's top-k metrics, with d = 1 the plain
top-k and with SPADE's pick_distance the diverse top-k that transfer.py reports."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from cognate_tvm.model.cognate import CognateCostModel
from cognate_tvm.model.pretrained import PRETRAINED_DIR
from cognate_tvm import transfer
from cognate_tvm.space import create as create_space

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name, monkeypatch):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


def test_pick_distance_scores_match_the_transfer_metrics(tmp_path, monkeypatch):
    bench = _load("pick_distance", monkeypatch)
    out, data = tmp_path / "out", tmp_path / "data"
    spade = create_space("spade", "spmm")
    d = spade.pick_distance
    argv = ["--size", "test", "--ops", "spmm", "--data-root", str(data), "--models", "{op}-spade",
            "--distances", "1", str(d), "--ks", "2", "5", "--threads", "1", "--out", str(out)]
    assert bench.main(argv) == 0
    result = json.loads((out / "pick_distance.json").read_text())
    table = (out / "pick_distance.md").read_text()
    assert "## spmm, spmm-spade" in table and "| 1 | test (" in table
    splits = result["ops"]["spmm"]["spmm-spade"]
    params = transfer.SIZES["test"]
    val, test = transfer.evaluation_split("spmm", params, data, progress=False)
    assert (splits["validation_matrices"], splits["test_matrices"]) == (len(val), len(test)) == (2, 7)
    model = CognateCostModel.load(PRETRAINED_DIR / "spmm-spade")
    for split, groups in (("validation", val), ("test", test)):
        for k in (2, 5):
            summary, _ = transfer.evaluate_groups(model, groups, spade, k)
            assert splits[split]["1"][f"top{k}"] == pytest.approx(summary["oracle_fraction_topk"])
            assert splits[split][str(d)][f"top{k}"] == pytest.approx(summary["oracle_fraction_topk_diverse"])
        for row in splits[split].values():  # the picks of k = 2 are the first of those of k = 5
            assert 0.0 < row["top2"] <= row["top5"] <= 1.0 + 1e-9 and 0.0 < row["tune"] <= 1.0 + 1e-9
    with pytest.raises(SystemExit):
        bench.main(["--data-root", str(data), "--out", str(out), "--distances", "0"])
