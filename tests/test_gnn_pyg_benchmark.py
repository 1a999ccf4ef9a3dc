"""benchmarks/gnn_pyg.py: its transpose-caching PyG baseline is right, its break-even arithmetic, and a
tiny end-to-end run writes the report with every side and the loss comparison."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("torch_geometric", reason="the benchmark compares with PyG (the [pyg] extra)")


@pytest.fixture(scope="module")
def bench():
    # imported by name (benchmarks/ is on the tests' path): PyG looks its layer classes' modules up in sys.modules
    return importlib.import_module("gnn_pyg")


def test_transpose_cached_gcnconv_matches_pyg(bench):
    from torch_geometric.nn import GCNConv

    edges = torch.unique(torch.randint(0, 30, (2, 120)), dim=1)
    edges = edges[:, edges[0] != edges[1]]  # PyG's two paths agree on graphs without loops and duplicates
    adj_t = bench.csr_adj_t(edges, 30)
    torch.manual_seed(0)
    theirs = GCNConv(5, 3, cached=True)
    ours = bench.transpose_cached_gcnconv()(5, 3, cached=True)
    ours.load_state_dict(theirs.state_dict())
    grads = []
    for conv, graph in ((theirs, edges), (ours, adj_t), (ours, adj_t)):  # twice: the cached transpose too
        x = torch.randn(30, 5, generator=torch.Generator().manual_seed(1), requires_grad=True)
        conv(x, graph).square().sum().backward()
        grads.append(x.grad)
    assert torch.allclose(grads[0], grads[1], atol=1e-5) and torch.allclose(grads[0], grads[2], atol=1e-5)


def test_summary_speedups_and_break_even(bench):
    times = {"pyg": [300.0, 320.0, 310.0], "pyg-csr": [200.0] * 3, "tuned": [100.0] * 3, "slow": [250.0] * 3}
    out = bench.summarize(times, {"tuned": 50.0, "slow": 10.0}, ("pyg", "pyg-csr"))
    assert out["pyg_best"] == "pyg-csr" and out["epoch_ms"]["pyg"] == 310.0
    assert out["speedup_vs_pyg_best"]["tuned"] == 2.0
    assert out["break_even_epochs"]["tuned"] == pytest.approx(50_000 / 100)
    assert out["break_even_epochs"]["slow"] is None


def test_tiny_run_reports_every_side(bench, tmp_path):
    result = bench.main(["--graphs", "community:300", "--features", "8", "--hidden", "8", "--heads", "2",
                         "--head-width", "4", "--classes", "4", "--rounds", "1", "--epochs", "1",
                         "--accuracy-epochs", "3", "--threads", "1", "--out", str(tmp_path)])
    row = result["rows"][0]
    assert set(row["gcn"]["epoch_ms"]) == set(bench.GCN_SIDES)
    assert set(row["attention"]["epoch_ms"]) == set(bench.ATTENTION_SIDES)
    accuracy = row["gcn"]["accuracy"]
    assert len(accuracy["curves"]["pyg"]["loss"]) == 3 and accuracy["max_loss_gap"] < 1e-3
    assert row["attention"]["accuracy"]["max_loss_gap"] < 1e-3
    assert json.loads((tmp_path / "gnn_pyg.json").read_text())["rows"][0]["graph"] == row["graph"]
    assert (tmp_path / "gnn_pyg.png").stat().st_size > 0 and "fastest PyG" in (tmp_path / "gnn_pyg.md").read_text()
