"""cognate_tvm.sweep: every config of a space on matrices, into a dataset, inside a deadline (on a fake clock)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import cognate_tvm.sweep as sweep_module
from cognate_tvm.backends.base import MeasureResult
from cognate_tvm.data import load_frame
from cognate_tvm.space import create
from cognate_tvm.sweep import COST_OFFSET_NNZ, SWEEP_CHUNK, MatrixSpecError, Sweep, named_matrices

OPS = ("spmm", "sddmm")


class ClockedBackend:
    """Made-up times, every config costing time on a fake clock: as `Sweep` predicts it, times
    `slow` on matrices of at least `slow_rows` rows."""

    target, platform = "cuda", "gpu"

    def __init__(self, clock, per_config, slow_rows, slow):
        self.clock, self.per_config, self.slow_rows, self.slow = clock, per_config, slow_rows, slow

    def metadata(self):
        return {"target": self.target, "platform": self.platform}

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        slow = self.slow if matrix.shape[0] >= self.slow_rows else 1.0
        self.clock[0] += self.per_config * len(configs) * (matrix.nnz + COST_OFFSET_NNZ) * slow
        return [MeasureResult(c, 1.0 + 0.1 * c.parts) for c in configs]


def test_named_matrices_are_generator_recipes():
    entries = named_matrices("rmat:131072:101, stencil2d:262144:102:perm")
    assert [e.name for e in entries] == ["rmat_131072_101", "stencil2d_262144_102_perm"]
    assert entries[1].permuted and entries[0].seed == 101 and entries[0].family == "rmat"
    with pytest.raises(MatrixSpecError, match="family:rows:seed"):
        named_matrices("rmat:100")


def test_sweep_skips_what_does_not_fit_and_keeps_a_matrix_cut_short(monkeypatch, tmp_path):
    clock = [0.0]
    monkeypatch.setattr(sweep_module.time, "perf_counter", lambda: clock[0])
    corpus = named_matrices("banded:300:1,rmat:60000:2,road:400:3,uniform:300:4")
    first, big = corpus[0].build(), corpus[1].build()
    assert big.nnz > 10 * first.nnz
    total = sum(len(create("gpu", op).configs()) for op in OPS)
    first_cost = 1e-9 * total * (first.nnz + COST_OFFSET_NNZ)
    # the road matrix (400 rows) costs 3x what the first one's rate predicts for it
    backend = ClockedBackend(clock, 1e-9, slow_rows=400, slow=3.0)
    sweeper = Sweep(backend, ops=OPS, feat=8, seed=0, deadline=2.6 * first_cost, dataset=tmp_path / "ds",
                    archive=tmp_path / "ds.tar.gz", metadata={"device": "fake"})
    rows, truncated = sweeper.run(corpus)
    assert truncated and [r["name"] for r in rows] == ["banded_300_1", "road_400_3"]
    # predicted not to fit: skipped, and the next (smaller) matrix was tried; out of time: skipped
    assert [s["name"] for s in sweeper.skipped] == ["rmat_60000_2", "uniform_300_4"]
    assert sweeper.skipped[0]["nnz"] == big.nnz and sweeper.skipped[0]["predicted_s"] > sweeper.skipped[0]["left_s"]
    # the deadline fell inside the road matrix: what was timed is kept (and saved), the rest is NaN
    road = rows[1]
    swept = [road["ops"][op]["swept"] for op in OPS]
    assert 0 < sum(swept) < total and all(n % SWEEP_CHUNK == 0 or n == len(create("gpu", op).configs())
                                          for n, op in zip(swept, OPS))
    assert np.isnan(road["ops"]["sddmm"]["times_ms"][swept[1]:]).all()
    frame = load_frame(tmp_path / "ds")
    assert len(frame[frame["matrix"] == "road_400_3"]) == sum(swept)
    assert len(frame[frame["matrix"] == "banded_300_1"]) == total
    recipe = json.loads(frame[frame["matrix"] == "road_400_3"]["backend"].iloc[0])["matrix_recipe"]
    assert recipe == {"generator": "cognate_tvm.matrix.generate", "family": "road", "rows": 400, "seed": 3,
                      "permute": False}
    import tarfile

    with tarfile.open(tmp_path / "ds.tar.gz") as tar:  # packed after each matrix: both are in it
        assert {n.split("-")[0] for n in tar.getnames() if n.endswith(".parquet")} == {"ds/banded_300_1",
                                                                                       "ds/road_400_3"}
