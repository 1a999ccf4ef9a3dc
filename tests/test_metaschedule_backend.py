"""MetaScheduleBackend: CPU-space configs built as tune_sparse builds them, checked and timed side by side."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm import metaschedule as msc
from cognate_tvm.metaschedule import MetaScheduleBackend
from cognate_tvm.matrix import generate
from cognate_tvm.space.cpu import CPUSpace

FEAT = 32


def _matrices():
    keep = (np.arange(300) % 3 != 0).astype(np.float32)  # every third row empty
    empty_rows = sp.csr_matrix(sp.diags(keep) @ sp.random(300, 200, density=0.02, random_state=3, dtype=np.float32))
    empty_rows.eliminate_zeros()
    single = sp.csr_matrix(([2.5], ([7], [4])), shape=(50, 90), dtype=np.float32)
    return {"rmat": generate("rmat", 1500, seed=2), "empty_rows_rectangular": empty_rows, "single_nonzero": single}


@pytest.fixture(scope="module")
def backend():
    return MetaScheduleBackend(num_threads=1, rounds=2, repeat=2, min_repeat_ms=1)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@pytest.mark.parametrize("name", list(_matrices()))
def test_reachable_configs_compute_the_right_output(op, name, backend):
    matrix = _matrices()[name]
    reachable = msc.reachable_configs(op, FEAT)
    rng = np.random.default_rng(0)
    configs = [reachable[i] for i in rng.choice(len(reachable), size=min(6, len(reachable)), replace=False)]
    results = backend.measure(op, matrix, configs, FEAT, check=True)
    assert [r.config for r in results] == configs
    for r in results:
        assert r.error is None and r.correct is True, (r.config.to_json(), r.error)
        assert r.time_ms > 0 and len(r.extra["round_times_ms"]) == 2
        assert r.time_ms == pytest.approx(float(np.median(r.extra["round_times_ms"])))


def test_a_config_outside_the_space_fails_alone(backend):
    space = CPUSpace("spmm")
    outside = next(c for c in space.configs() if not c.single_panel)  # column panels: another format
    inside = msc.reachable_configs("spmm", FEAT)[0]
    results = backend.measure("spmm", generate("banded", 800, seed=1), [outside, inside], FEAT, check=True)
    assert results[0].time_ms is None and "outside the MetaSchedule space" in results[0].error
    assert results[1].ok and results[1].correct is True


def test_reachable_configs_are_what_the_space_covers():
    for op in ("spmm", "sddmm"):
        reachable = msc.reachable_configs(op, 128)
        assert len(set(reachable)) == len(reachable) == msc.space_coverage(op, 128)["reached"]
        assert all(c.single_panel for c in reachable)


def test_metadata_names_the_kernels_and_survives_pickling(backend):
    import pickle

    meta = backend.metadata()
    assert meta["kernels"] == "metaschedule" and meta["platform"] == "cpu" and meta["rounds"] == 2
    again = pickle.loads(pickle.dumps(backend))
    assert again.metadata()["num_threads"] == 1 and again.rounds == 2
    with pytest.raises(ValueError, match="rounds"):
        MetaScheduleBackend(rounds=0)
