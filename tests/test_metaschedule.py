"""The MetaSchedule adapter (CognateModel) and the CSR SpMM MetaSchedule workload."""
from __future__ import annotations

import numpy as np
import pytest

import tvm
from tvm.s_tir import meta_schedule as ms

from cognate_tvm import metaschedule as msc
from cognate_tvm.errors import InvalidConfigError, ShapeError
from cognate_tvm.kernels.cpu import cpu_target
from cognate_tvm.matrix import generate
from cognate_tvm.model.cognate import CognateCostModel
from cognate_tvm.model.config import ModelConfig
from cognate_tvm.space.cpu import CPUSpace

FEAT = 32


def _model():
    """A small, fast-to-build COGNATE model (raw knobs: no autoencoder to train first)."""
    config = ModelConfig(knob_encoder="pad").replace(**{"train.train_featurizer": False})
    return CognateCostModel(config, seed=0)


@pytest.fixture(scope="module")
def matrix():
    return generate("rmat", 2000, seed=1)


@pytest.fixture(scope="module")
def space():
    return CPUSpace("spmm")


def _run(mod, matrix, dense):
    """Build `mod` and run it on `matrix` @ `dense`; the output starts as NaN."""
    lib = tvm.tirx.build(mod, target=cpu_target(1))
    dev = tvm.cpu()
    kernel = msc.kernel_csr(matrix)
    args = [tvm.runtime.tensor(a, dev) for a in (kernel.indptr.astype(np.int32), kernel.indices.astype(np.int32),
                                                 kernel.data.astype(np.float32), dense)]
    out = tvm.runtime.tensor(np.full((matrix.shape[0], dense.shape[1]), np.nan, dtype=np.float32), dev)
    lib["main"](*args, out)
    return out.numpy()


@pytest.fixture(scope="module")
def context(matrix):
    """A TuneContext to call the adapter through TVM (the first one costs ~10-25 s: TVM's start-up)."""
    return ms.TuneContext(mod=msc.spmm_module(matrix, FEAT), target=cpu_target(1), task_name="spmm", num_threads=1)


def _candidates(matrix, seeds):
    mod = msc.spmm_module(matrix, FEAT)
    out = []
    for seed in seeds:
        sch = tvm.s_tir.Schedule(mod, seed=seed)
        msc.schedule_spmm(sch, FEAT)
        out.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"])))
    return out


def test_kernel_csr_keeps_product_and_fills_empty_rows(matrix):
    kernel = msc.kernel_csr(matrix)
    assert (np.diff(matrix.indptr) == 0).any()  # the case the padding exists for
    assert (np.diff(kernel.indptr) >= 1).all()
    assert kernel.nnz == matrix.nnz + int((np.diff(matrix.indptr) == 0).sum())
    assert abs(kernel - matrix).max() == 0


def test_knob_candidates_follow_width():
    assert msc.knob_candidates(32) == {"i_tile": (1, 8, 64), "j_tile": (16, 32), "vector": (8, 16)}
    with pytest.raises(ShapeError, match="12"):
        msc.knob_candidates(12)


def test_scheduled_kernels_match_scipy_and_decode(matrix, space):
    dense = np.random.default_rng(0).standard_normal((matrix.shape[1], FEAT)).astype(np.float32)
    seen = set()
    for cand in _candidates(matrix, range(1, 7)):
        config = msc.config_from_trace(cand.sch.trace)
        space.check(config)
        assert config.dense_tile(FEAT) == config.j_tile
        seen.add(config)
        np.testing.assert_allclose(_run(cand.sch.mod, matrix, dense), matrix @ dense, rtol=1e-4, atol=1e-4)
    assert len(seen) > 1


def test_adapter_predict_matches_wrapped_model(matrix, space, context):
    model = _model()
    adapter = msc.CognateModel(model=model, space=space, matrix=matrix, feat=FEAT)
    cands = _candidates(matrix, range(1, 13))
    scores = adapter.predict(context, cands)
    assert scores.dtype == np.float64 and scores.shape == (len(cands),)
    assert np.isfinite(scores).all()
    configs = [msc.config_from_trace(c.sch.trace) for c in cands]
    expected = model.predict(matrix, configs, space=space, feat=FEAT)
    np.testing.assert_allclose(scores, -expected, rtol=1e-6)
    # Higher adapter score = lower model score: the orders agree.
    assert [configs[i] for i in np.argsort(-scores, kind="stable")] == model.rank(matrix, configs, space=space,
                                                                                   feat=FEAT)


def test_adapter_rejects_foreign_traces_and_spaces(matrix, space):
    from cognate_tvm.space.spade import SpadeSpace

    with pytest.raises(InvalidConfigError):
        msc.CognateModel(model=CognateCostModel(seed=0), space=SpadeSpace("spmm"), matrix=matrix, feat=FEAT)
    sch = tvm.s_tir.Schedule(msc.spmm_module(matrix, FEAT), seed=1)
    sch.sample_categorical(candidates=[1, 2], probs=[0.5, 0.5])
    with pytest.raises(InvalidConfigError, match="SampleCategorical"):
        msc.knobs_from_trace(sch.trace)


def test_adapter_update_finetunes_and_saves(matrix, space, context, tmp_path):
    model = _model()
    adapter = msc.CognateModel(model=model, space=space, matrix=matrix, feat=FEAT, finetune_after=3,
                               finetune_epochs=1)
    cands = _candidates(matrix, range(1, 5))
    before = adapter.predict(context, cands)
    times = [[1e-3], [2e-3], [3e-3]]
    results = [ms.runner.RunnerResult(run_secs=[tvm.tirx.FloatImm("float32", t[0])], error_msg=None)
               for t in times] + [ms.runner.RunnerResult(run_secs=None, error_msg="boom")]
    adapter.update(context, cands, results)
    assert len(adapter.records) == 3  # the failed run is skipped
    assert adapter.records[0][1] == pytest.approx(1.0, rel=1e-5)
    assert len({c for c, _ in adapter.records}) >= 2  # seeds 1-3 draw at least two configs
    assert adapter.finetunes == 1 and adapter.pending == 0
    after = adapter.predict(context, cands)
    assert not np.allclose(before, after)
    adapter.save(str(tmp_path / "m"))
    adapter.load(str(tmp_path / "m"))
    np.testing.assert_allclose(adapter.predict(context, cands), after, rtol=1e-5)


def test_tune_tir_end_to_end(matrix, space, tmp_path):
    model = _model()
    adapter = msc.CognateModel(model=model, space=space, matrix=matrix, feat=FEAT, finetune_after=0)
    result = msc.tune_spmm_metaschedule(matrix, FEAT, cost_model=adapter, max_trials=8, work_dir=tmp_path,
                                        num_threads=1)
    assert result.records >= 1
    # The search went through the adapter: it scored candidates and was told the measurements.
    assert adapter._scores and len(adapter.records) >= 1
    assert result.config in {c for c, _ in adapter.records}
    assert np.isfinite(result.time_ms) and result.time_ms > 0
    space.check(result.config)
    assert result.config == msc.config_from_knobs(result.knobs)
    dense = np.random.default_rng(3).standard_normal((matrix.shape[1], FEAT)).astype(np.float32)
    np.testing.assert_allclose(_run(result.schedule.mod, matrix, dense), matrix @ dense, rtol=1e-4, atol=1e-4)
