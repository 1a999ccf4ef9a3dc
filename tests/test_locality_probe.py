"""benchmarks/locality_probe.py on transfer.py's test-size SPADE data (simulated here, seconds)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from cognate_tvm import transfer

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(monkeypatch):
    spec = importlib.util.spec_from_file_location("locality_probe", BENCH / "locality_probe.py")
    probe = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, probe)
    spec.loader.exec_module(probe)
    return probe


def test_probe_ranks_test_matrices_with_and_without_locality(tmp_path, monkeypatch):
    probe = _load(monkeypatch)
    params = transfer.SIZES["test"]
    out = tmp_path / "out"
    argv = ["--op", "spmm", "--data-root", str(tmp_path / "data"), "--out", str(out), "--sizes", "2", "1000",
            "--seeds", "2"]
    assert probe.main(argv, params=params) == 0
    result = json.loads((out / "locality_probe_spmm.json").read_text())
    available = result["train_available"]
    assert available == len(transfer.target_data("spmm", params, tmp_path / "data", progress=False).pool) \
        + params.val_matrices
    # 2 matrices: two seeded draws; 1000 (more than there are): the whole set once
    assert sorted({(r["n"], r["seed"]) for r in result["rows"]}) == [(2, 0), (2, 1), (available, 0)]
    assert {r["method"] for r in result["rows"]} == set(probe.METHODS)
    for r in result["rows"]:
        assert 0.0 < r["top1"] <= r["top5"] <= 1.0 + 1e-9, r
    table = (out / "locality_probe_spmm.md").read_text()
    assert "| 2 |" in table and f"| {available} |" in table and "statistics + locality" in table
    assert (out / "locality_probe_spmm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_locality_ranker_sees_the_profile():
    import numpy as np
    import scipy.sparse as sp

    from cognate_tvm.baselines import XGBoostRanker
    from cognate_tvm.matrix import LOCALITY_WIDTH, locality_profile
    from cognate_tvm.space import create

    spade = create("spade", "spmm")
    m = sp.random(400, 300, density=0.02, format="csr", random_state=0)
    configs = spade.configs()[:3]
    plain = XGBoostRanker().features(m, configs, space=spade, feat=32)
    rich = XGBoostRanker(locality=True).features(m, configs, space=spade, feat=32)
    assert rich.shape == (3, plain.shape[1] + LOCALITY_WIDTH)
    assert np.allclose(rich[:, 10:10 + LOCALITY_WIDTH], locality_profile(m))  # after the 10 statistics
    assert pytest.approx(plain[:, 10:]) == rich[:, 10 + LOCALITY_WIDTH:]


def test_cache_fit_follows_the_dense_width_and_the_cache_sizes(monkeypatch):
    import numpy as np
    import scipy.sparse as sp

    from cognate_tvm.simulator import HardwareParams
    from cognate_tvm.space import create

    probe = _load(monkeypatch)
    # 64 columns: column c has 64 - c nonzeros, so the hottest columns come first
    rows = np.concatenate([np.arange(64 - c) for c in range(64)])
    cols = np.concatenate([np.full(64 - c, c) for c in range(64)])
    m = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(64, 64))
    # an LLC of 16 dense rows of 32 floats, an L2 of 4
    hw = HardwareParams(l2_bytes=4 * 128, llc_bytes=16 * 128, line_bytes=64)
    spade = create("spade", "spmm")
    by_split = {c.split: c for c in spade.configs() if c.col_panel >= 64}
    fit = probe.cache_fit_features(m, [by_split[1], by_split[2]], feat=32, hardware=hw)
    share = lambda c: (64 * 65 / 2 - (64 - c) * (65 - c) / 2) / (64 * 65 / 2)  # nonzeros in the c hottest
    assert fit[0, :2] == pytest.approx([share(4), share(16)])
    assert fit[1, :2] == pytest.approx([share(8), share(32)])  # half the width: twice the rows held
    assert fit[0, 2] == pytest.approx(np.log2(8 + 128 * (1 - share(16))))
    assert fit[1, 2] == pytest.approx(np.log2(16 + 128 * (1 - share(32))))
    assert fit[:, 3] == pytest.approx([np.log2(64 * 128 / (16 * 128)), np.log2(64 * 64 / (16 * 128))])
    with_fit = probe.CacheFitXGBoost(hardware=hw).features(m, [by_split[1]], space=spade, feat=32)
    assert np.allclose(with_fit[:, -4:], fit[:1])
