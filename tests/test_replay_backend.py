"""ReplayBackend: recorded timings looked up by matrix pattern, op, width and config; tune runs on it offline."""
import json

import numpy as np
import pandas as pd
import pytest

from cognate_tvm import space, tuning
from cognate_tvm.model.loading import load_shipped_model
from cognate_tvm.backends.replay import NOT_RECORDED, ReplayBackend
from cognate_tvm.data import COLUMNS, matrix_hash
from cognate_tvm.matrix import generate
from tiny_models import ship, tiny_cpu_model


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    return ship(tiny_cpu_model(), tmp_path_factory.mktemp("pretrained"), ops=("spmm",), platform="cpu-2t")


def _frame(matrix, configs, times, *, feat=16, errors=None, threads=2):
    """A dataset frame (`data.load_frame`'s columns) of one matrix's sweep."""
    errors = errors or [None] * len(configs)
    backend = f'{{"num_threads": {threads}, "target": "llvm"}}'
    rows = [{"matrix": "m", "matrix_hash": matrix_hash(matrix), "rows": matrix.shape[0], "cols": matrix.shape[1],
             "nnz": matrix.nnz, "op": "spmm", "platform": "cpu", "target": "llvm", "feat": feat,
             # a dataset's JSON need not be in Config.to_json's form (key order, spaces)
             "config": json.dumps(dict(reversed(c.to_dict().items()))), "time_ms": t, "error": e, "correct": None,
             "extra": "{}", "backend": backend, "timestamp": "t"}
            for c, t, e in zip(configs, times, errors)]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def test_replays_recorded_times_and_fails_what_was_not_recorded():
    cpu = space.create("cpu", "spmm")
    matrix, other = generate("rmat", 200, seed=1), generate("banded", 200, seed=1)
    configs = cpu.candidates(2)[:4]
    backend = ReplayBackend.from_frame(_frame(matrix, configs, [1.0, 2.0, np.nan, 0.5],
                                              errors=[None, None, "boom", None]))
    assert (backend.target, backend.platform, backend.kernel_threads(), backend.deterministic) == \
        ("llvm", "cpu", 2, True)
    unknown = cpu.candidates(2)[10]
    results = backend.measure("spmm", matrix, configs + [unknown], 16)
    assert [r.time_ms for r in results] == [1.0, 2.0, None, 0.5, None]
    assert [r.ok for r in results] == [True, True, False, True, False]
    assert "recorded as failed" in results[2].error and results[2].config == configs[2]
    assert results[4].error == f"{NOT_RECORDED}: config {unknown.to_json()}"
    # another matrix, another width: nothing recorded, every config a failure saying so
    for m, feat in ((other, 16), (matrix, 32)):
        missed = backend.measure("spmm", m, configs[:2], feat)
        assert all(not r.ok and r.error.startswith(NOT_RECORDED) for r in missed)
    assert backend.measure("sddmm", matrix, configs[:1], 16)[0].error.startswith(NOT_RECORDED)
    assert sorted(backend.recorded_configs("spmm", matrix, 16)) == sorted(c.to_json() for c in
                                                                         (configs[0], configs[1], configs[3]))


def test_from_timings_and_rejects_what_it_cannot_replay():
    gpu = space.create("gpu", "spmm")
    matrix = generate("stencil2d", 400, seed=0)
    a, b = gpu.configs()[:2]
    backend = ReplayBackend.from_timings({"m": {a: 0.3, b.to_json(): None}}, matrices={"m": matrix}, op="spmm",
                                         feat=128, platform="gpu")
    assert backend.target == "cuda" and backend.kernel_threads() is None
    assert [r.time_ms for r in backend.measure("spmm", matrix, [a, b], 128)] == [0.3, None]
    with pytest.raises(KeyError, match="'x'"):
        ReplayBackend.from_timings({"x": {a: 1.0}}, matrices={}, op="spmm", feat=128, platform="gpu")
    with pytest.raises(ValueError, match="no measurements"):
        ReplayBackend.from_frame(pd.DataFrame({c: [] for c in COLUMNS}))
    mixed = pd.concat([_frame(matrix, [gpu.baseline()], [1.0], threads=1),
                       _frame(generate("rmat", 200, seed=1), [gpu.baseline()], [1.0], threads=2)])
    with pytest.raises(ValueError, match=r"mixes kernel thread counts \[1, 2\]"):
        ReplayBackend.from_frame(mixed)


def test_tune_runs_offline_on_a_recorded_sweep(shipped):
    """The real tune, on replayed times: every measured config that was recorded has its recorded time."""
    cpu = space.create("cpu", "spmm")
    matrix = generate("rmat", 200, seed=1)
    model_ranking = load_shipped_model("spmm", "cpu", root=shipped, threads=2)[0]
    ranked = model_ranking.rank(matrix, cpu.candidates(2), space=cpu, feat=16)
    recorded = [cpu.baseline()] + ranked[:40]
    times = {c: 1.0 + (n % 7) / 10 for n, c in enumerate(recorded)}
    backend = ReplayBackend.from_frame(_frame(matrix, list(times), list(times.values())))
    tuned = tuning.tune("spmm", matrix, backend=backend, feat=16, options=tuning.TuneOptions(pretrained_root=shipped))
    assert tuned.baseline.time_ms == times[cpu.baseline()]
    for r in tuned.measured:
        assert r.time_ms == times.get(r.config) and (r.ok == (r.config in times))
    ran = [r for r in tuned.measured if r.ok]
    assert tuned.chosen.time_ms == min(r.time_ms for r in ran)
    assert tuned.retimed == {}  # deterministic: no side-by-side re-timing
