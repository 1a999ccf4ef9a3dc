"""benchmarks/gnn_end_to_end.py: its stronger torch baseline is right, and its break-even arithmetic."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from benchmark_loader import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("gnn_end_to_end")


def test_transposed_csr_matches_torch_sparse_autograd(bench):
    m = sp.random_array((50, 40), density=0.1, rng=np.random.default_rng(0), format="csr", dtype=np.float32)
    m = sp.csr_matrix(m)
    a = bench.torch_csr(m, torch.device("cpu"))
    side = bench.TransposedCSR(a, bench.torch_csr(m.T.tocsr(), torch.device("cpu")))
    h = torch.randn(40, 6, requires_grad=True)
    (side @ h).square().sum().backward()
    mine = h.grad.clone()
    h.grad = None
    torch.sparse.mm(a, h).square().sum().backward()
    assert torch.allclose(mine, h.grad, rtol=1e-5, atol=1e-5)


def test_summary_break_even(bench):
    sides = bench.SIDES
    timing = {"epoch_ms": dict(zip(sides, [100.0, 150.0, 120.0, 400.0, 200.0])),
              "inference_ms": dict(zip(sides, [40.0, 50.0, 45.0, 80.0, 80.0]))}
    per = {64: {"tuning_s": 20.0, "source": "tuned", "config": {}, "measured": 7},
           16: {"tuning_s": 10.0, "source": "tuned", "config": {}, "measured": 6}}
    row = bench.summarize(64, timing, {"per_width": per}, 16)
    assert row["tuning_s"] == 30.0 and row["speedup_vs_torch.sparse"] == 4.0
    assert row["break_even_epochs_vs_torch.sparse"] == pytest.approx(30_000 / 300)
    assert row["break_even_epochs_vs_torch.sparse+At"] == pytest.approx(30_000 / 100)
    slower = dict(timing, epoch_ms=dict(timing["epoch_ms"], **{"torch.sparse+At": 90.0}))
    assert bench.summarize(64, slower, {"per_width": per}, 16)["break_even_epochs_vs_torch.sparse+At"] is None
