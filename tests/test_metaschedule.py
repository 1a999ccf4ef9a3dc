"""The MetaSchedule adapter (CognateModel) and the sparse (SpMM, SDDMM) MetaSchedule workloads."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tvm
from tvm.s_tir import meta_schedule as ms

from cognate_tvm import metaschedule as msc
from cognate_tvm.backends.base import WRONG_OUTPUT
from cognate_tvm.errors import InvalidConfigError, PretrainedNotFoundError, ShapeError, UnknownKindError
from cognate_tvm.kernels.cpu import cpu_target
from cognate_tvm.matrix import generate
from cognate_tvm.model.cognate import CognateCostModel
from cognate_tvm.space import cpu as cpu_space
from cognate_tvm.space.cpu import CPUSpace
from tiny_models import ship, tiny_cpu_model

FEAT = 32


@pytest.fixture(scope="module")
def matrix():
    return generate("rmat", 2000, seed=1)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    return ship(tiny_cpu_model(), tmp_path_factory.mktemp("pretrained"))


@pytest.fixture(scope="module")
def context(matrix):
    """A TuneContext to call the adapter through TVM (it imports TVM's tensor intrinsics: 7 s when
    registered first as CognateModel and tune_sparse do, 170-194 s when TuneContext imports them)."""
    msc.load_tensor_intrinsics()
    return ms.TuneContext(mod=msc.sparse_module("spmm", matrix, FEAT), target=cpu_target(1), task_name="spmm",
                          num_threads=1)


def _candidates(op, matrix, picks):
    """MeasureCandidates of (variant index, seed) pairs."""
    mod = msc.sparse_module(op, matrix, FEAT)
    variant_list = msc.variants(op, FEAT)
    out = []
    for index, seed in picks:
        sch = tvm.s_tir.Schedule(mod, seed=seed)
        msc.schedule_variant(sch, index, variant_list[index], FEAT, 2)
        out.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"])))
    return out


def test_kernel_csr_keeps_product_and_fills_empty_rows(matrix):
    kernel = msc.kernel_csr(matrix)
    assert (np.diff(matrix.indptr) == 0).any()  # the case the padding exists for
    assert (np.diff(kernel.indptr) >= 1).all()
    assert kernel.nnz == matrix.nnz + int((np.diff(matrix.indptr) == 0).sum())
    assert abs(kernel - matrix).max() == 0


def test_variants_follow_the_cpu_space(monkeypatch):
    spmm = msc.variants("spmm", FEAT)
    assert {v.inner for v in spmm} == set(msc.ORDERS["spmm"])
    assert {v.vector for v in spmm} == set(cpu_space.VECTORS) | {1}
    assert {(v.parallel, v.chunk) for v in spmm} == {(False, 0)} | {(True, c) for c in cpu_space.CHUNKS}
    assert {v.unroll for v in spmm} == {False, True}
    assert all(v.inner == msc.SPARSE_INNERMOST and v.vector == 1 for v in msc.variants("sddmm", FEAT))
    for v in spmm:
        assert all(FEAT % j == 0 and j % v.vector == 0 and (not v.unroll or j > v.vector)
                   for j in msc.j_tiles(v, FEAT))
    # the knob values come from space/cpu.py when the schedule is made: a changed space is followed
    monkeypatch.setattr(cpu_space, "VECTORS", (8,))
    assert {v.vector for v in msc.variants("spmm", FEAT)} == {8, 1}
    with pytest.raises(ShapeError, match="dense width 3"):
        msc.variants("spmm", 3)


def test_every_variant_computes_the_right_output_and_decodes(matrix):
    """Each design space, with random I and J, matches scipy; its decoded config is in the CPU space."""
    target = cpu_target(2)
    for op in ("spmm", "sddmm"):
        space = CPUSpace(op)
        variant_list = msc.variants(op, FEAT)
        picks = [(n, n + 1) for n in range(len(variant_list))]
        seen = set()
        for (index, _), cand in zip(picks, _candidates(op, matrix, picks)):
            config = msc.config_from_knobs(msc.knobs_from_trace(cand.sch.trace), variant_list)
            space.check(config)
            v = variant_list[index]
            assert (config.vector, config.unroll, config.parallel, config.chunk) == \
                (v.vector, v.unroll, v.parallel, v.chunk)
            assert config.dense_tile(FEAT) == config.j_tile and config.single_panel
            seen.add(config)
            assert msc.schedule_is_correct(op, cand.sch.mod, matrix, FEAT, target), (op, config)
        assert len(seen) == len(variant_list)


def test_space_coverage_is_counted():
    cov = msc.space_coverage("spmm", 128)
    assert 0 < cov["reached"] <= cov["plain_csr"] < cov["space"]
    assert msc.space_coverage("sddmm", 128)["reached"] < cov["reached"]


def test_adapter_with_no_arguments_loads_the_shipped_model(matrix, shipped, context):
    adapter = msc.CognateModel(pretrained_root=shipped)
    assert adapter.model is None  # nothing loaded before the workload is known
    with pytest.raises(InvalidConfigError, match="set_workload"):
        adapter.decode(_candidates("spmm", matrix, [(0, 1)]))
    with pytest.raises(RuntimeError, match="set_workload"):  # the same error, through TVM's FFI
        adapter.predict(context, _candidates("spmm", matrix, [(0, 1)]))
    adapter.set_workload("spmm", matrix, FEAT)
    reference = CognateCostModel.load(shipped / "spmm-cpu")
    cands = _candidates("spmm", matrix, [(n, n + 1) for n in range(0, 39, 3)])
    scores = adapter.predict(context, cands)
    assert scores.dtype == np.float64 and scores.shape == (len(cands),) and np.isfinite(scores).all()
    configs = adapter.decode(cands)
    np.testing.assert_allclose(scores, msc.merit(reference.predict(matrix, configs, space=CPUSpace("spmm"),
                                                                   feat=FEAT)), rtol=1e-6)
    with pytest.raises(PretrainedNotFoundError, match="shipped: none"):
        msc.CognateModel(pretrained_root=shipped / "none").set_workload("spmm", matrix, FEAT)


def test_adapter_prefers_a_shipped_model_of_metaschedule_kernels(matrix, tmp_path):
    """`CognateModel()` loads <op>-cpu-metaschedule-<T>t where one ships for the op and thread count, and
    the CPU model of tune's kernels otherwise (another thread count, another op)."""
    tune_kernels, ms_kernels = tiny_cpu_model(seed=0), tiny_cpu_model(seed=1)
    ship(tune_kernels, tmp_path, platform="cpu-2t")
    ship(ms_kernels, tmp_path, ops=("spmm",), platform=f"{msc.METASCHEDULE_PLATFORM}-2t")
    configs = msc.reachable_configs("spmm", FEAT)[:20]

    def scores_of(adapter):
        return adapter.model.predict(matrix, configs, space=CPUSpace("spmm"), feat=FEAT)

    two = msc.CognateModel(pretrained_root=tmp_path).set_workload("spmm", matrix, FEAT, num_threads=2)
    np.testing.assert_allclose(scores_of(two), ms_kernels.predict(matrix, configs, space=CPUSpace("spmm"),
                                                                  feat=FEAT), rtol=1e-6)
    assert two.shipped_platform(2) == msc.METASCHEDULE_PLATFORM and two.shipped_platform(1) == "cpu"
    sddmm = msc.CognateModel(pretrained_root=tmp_path).set_workload("sddmm", matrix, FEAT, num_threads=2)
    assert sddmm.shipped_platform(2) == "cpu"
    assert not np.allclose(scores_of(two), tune_kernels.predict(matrix, configs, space=CPUSpace("spmm"), feat=FEAT))


def test_merit_is_positive_and_keeps_the_models_order():
    """MetaSchedule clips predictions below 0 to 0: every score must map above 0, in the model's order."""
    scores = np.array([-50.0, -3.0, -0.2, -1e-9, 0.0, 1e-9, 0.4, 2.5, 3.6, msc.OUTSIDE_CANDIDATES + 3.0])
    merits = msc.merit(scores)
    assert merits.dtype == np.float64 and (merits > 0).all()
    assert (np.diff(merits) < 0).all()  # strictly: lower score (faster) = higher merit
    assert msc.merit(np.array([0.0]))[0] == 1.0
    np.testing.assert_allclose(msc.merit(np.array([-1e-12, 1e-12])), 1.0)  # no jump at 0


def test_adapter_ranks_configs_outside_the_thread_counts_candidates_last(matrix, shipped, context):
    cands = _candidates("spmm", matrix, [(n, n + 1) for n in range(0, 39, 2)])
    unaware = msc.CognateModel(pretrained_root=shipped).set_workload("spmm", matrix, FEAT)
    configs = unaware.decode(cands)
    parallel = np.array([c.parallel for c in configs])
    assert parallel.any() and not parallel.all()
    raw = unaware.predict(context, cands)
    for threads in (1, 2):
        adapter = msc.CognateModel(pretrained_root=shipped).set_workload("spmm", matrix, FEAT, num_threads=threads)
        scores = adapter.predict(context, cands)
        inside = parallel == (threads > 1)  # CPUSpace.candidates: parallel configs on 2+ threads, serial on 1
        assert scores[inside].min() > scores[~inside].max()
        np.testing.assert_allclose(scores[inside], raw[inside])  # the candidates keep the model's order


def test_adapter_update_finetunes_and_saves(matrix, shipped, context, tmp_path):
    adapter = msc.CognateModel(pretrained_root=shipped, finetune_after=3, finetune_epochs=2, op="spmm",
                               matrix=matrix, feat=FEAT)
    cands = _candidates("spmm", matrix, [(0, 1), (5, 2), (20, 3), (30, 4)])
    before = adapter.predict(context, cands)
    results = [ms.runner.RunnerResult(run_secs=[tvm.tirx.FloatImm("float32", t)], error_msg=None)
               for t in (1e-3, 2e-3, 3e-3)] + [ms.runner.RunnerResult(run_secs=None, error_msg="boom")]
    adapter.update(context, cands, results)
    assert len(adapter.records) == 3  # the failed run is skipped
    assert adapter.records[0][1] == pytest.approx(1.0, rel=1e-5)
    assert adapter.finetunes == 1 and adapter.pending == 0
    after = adapter.predict(context, cands)
    assert not np.allclose(before, after)
    adapter.save(str(tmp_path / "m"))
    adapter.load(str(tmp_path / "m"))
    np.testing.assert_allclose(adapter.predict(context, cands), after, rtol=1e-5)


def test_adapter_rejects_foreign_traces(matrix):
    sch = tvm.s_tir.Schedule(msc.sparse_module("spmm", matrix, FEAT), seed=1)
    sch.sample_categorical(candidates=[1, 2], probs=[0.5, 0.5])
    with pytest.raises(InvalidConfigError, match="SampleCategorical"):
        msc.knobs_from_trace(sch.trace)
    with pytest.raises(InvalidConfigError, match="variant 99"):
        msc.config_from_knobs({"variant": 99, "i_tile": 1, "j_tile": 8}, msc.variants("spmm", FEAT))


def test_tune_sparse_rejects_other_targets(matrix, tmp_path):
    with pytest.raises(UnknownKindError, match="cuda"):
        msc.tune_sparse("spmm", matrix, feat=FEAT, target="cuda", max_trials=8, work_dir=tmp_path)
    with pytest.raises(ValueError, match="max_trials"):
        msc.tune_sparse("spmm", matrix, feat=FEAT, max_trials=0, work_dir=tmp_path)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_tune_sparse_end_to_end(op, matrix, shipped, tmp_path, monkeypatch):
    """CognateModel() (the shipped model) drives a real search with real CSR inputs; the result is checked.

    The fastest record is made to fail its output check: it is rejected and the next ones are the
    finalists, re-timed side by side; the lowest median is the result.
    """
    checked = []
    real_check = msc.BuiltKernel.correct

    def first_is_wrong(kernel):
        checked.append(kernel)
        return len(checked) > 1 and real_check(kernel)

    monkeypatch.setattr(msc.BuiltKernel, "correct", first_is_wrong)
    scored_before_measuring = {}  # every config the model scored before the first batch came back
    real_update = msc.CognateModel._cls.update

    def update(self, context, candidates, results):
        if not scored_before_measuring:
            scored_before_measuring.update(self._scores)
        return real_update(self, context, candidates, results)

    monkeypatch.setattr(msc.CognateModel._cls, "update", update)
    adapter = msc.CognateModel(pretrained_root=shipped, finetune_after=8, finetune_epochs=2)
    result = msc.tune_sparse(op, matrix, feat=FEAT, max_trials=8, cost_model=adapter, work_dir=tmp_path,
                             num_threads=2, finalists=3, rounds=2)
    assert result.records >= 2 and result.correct
    assert len(result.rejected) == 1 and result.rejected[0][1] == WRONG_OUTPUT
    top = result.database.get_top_k(result.database.commit_workload(msc.sparse_module(op, matrix, FEAT)), 1)
    variant_list = msc.variants(op, FEAT)
    assert result.rejected[0][0] == msc.config_from_knobs(msc.knobs_from_trace(top[0].trace), variant_list)
    assert len(top[0].run_secs) == 3  # the runner's repeats
    # the finalists: distinct configs, each re-timed `rounds` times; the result is the lowest median
    finalists = result.confirmed
    assert 1 <= len(finalists) <= 3 and result.rejected[0][0] not in finalists
    if len(finalists) > 1:
        assert all(len(times) == 2 for times in finalists.values())
        medians = {c: float(np.median(times)) for c, times in finalists.items()}
        assert result.config == min(medians, key=medians.get)
        assert result.time_ms == pytest.approx(medians[result.config])
    # the search went through the adapter: it scored candidates (its scores are dropped after a
    # fine-tune) and was told the measurements
    assert len(adapter.records) >= 1 and (adapter._scores or adapter.finetunes >= 1)
    assert result.config in {c for c, _ in adapter.records}
    assert np.isfinite(result.time_ms) and result.time_ms > 0
    CPUSpace(op).check(result.config)
    assert real_check(msc.BuiltKernel(op, result.schedule.mod, matrix, FEAT, cpu_target(2), seed=5))
    assert len(result.database.get_all_tuning_records()) == result.records
    # every measurement, in search order: the database's records (sorted by time) are among them
    assert len(result.trials) == 8
    # the first batch is the model's 8 best of all it scored (ties allowed at the edge): MetaSchedule
    # clips predictions below 0, and with -score as the prediction it measured arbitrary draws
    measured = {c for c, _ in result.trials}
    ranked = sorted(scored_before_measuring.values())
    assert len(ranked) > 8 and measured <= set(scored_before_measuring)
    assert max(scored_before_measuring[c] for c in measured) <= ranked[7]
    logged = {c for c, t in result.trials if t is not None}
    assert result.config in logged and len(logged) >= 2
    with pytest.raises(ValueError, match="finalists"):
        msc.tune_sparse(op, matrix, feat=FEAT, max_trials=8, work_dir=tmp_path, finalists=0)


def test_package_exports_cognate_model_without_importing_tvm():
    code = ("import sys, cognate_tvm; assert 'tvm' not in sys.modules and 'torch' not in sys.modules; "
            "from cognate_tvm import CognateModel; from cognate_tvm.metaschedule import CognateModel as M; "
            "assert CognateModel is M")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_schedule_config_reproduces_a_sampled_point(op, matrix):
    """schedule_config builds the schedule of a given config: its trace decodes to that config, and it computes
    the right output (the best-fixed baseline of benchmarks/metaschedule_compare.py times configs this way)."""
    variant_list = msc.variants(op, FEAT)
    target = cpu_target(2)
    for index in (0, len(variant_list) - 1):
        sch = tvm.s_tir.Schedule(msc.sparse_module(op, matrix, FEAT), seed=3)
        msc.schedule_variant(sch, index, variant_list[index], FEAT, 2)
        config = msc.config_from_knobs(msc.knobs_from_trace(sch.trace), variant_list)
        mod = msc.schedule_config(op, matrix, FEAT, config, workers=2)
        assert msc.schedule_is_correct(op, mod, matrix, FEAT, target)
        assert msc.time_module(op, mod, matrix, FEAT, target, repeat=1, min_repeat_ms=1) > 0
    panels = CPUSpace(op).baseline().__class__(**{**CPUSpace(op).baseline().to_dict(), "k_parts": 2})
    with pytest.raises(InvalidConfigError, match="outside the MetaSchedule space"):
        msc.schedule_config(op, matrix, FEAT, panels, workers=2)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_kernels_of_one_matrix_share_their_inputs(op, matrix):
    """Re-timing builds a hundred kernels of one matrix: they share one copy of the inputs (each holding its
    own took 24 GB on 100k-row matrices), and sharing them leaves every output right."""
    variant_list = msc.variants(op, FEAT)
    target = cpu_target(2)
    inputs = msc.device_inputs(op, matrix, FEAT)
    kernels = []
    for index in (0, len(variant_list) - 1):
        sch = tvm.s_tir.Schedule(msc.sparse_module(op, matrix, FEAT), seed=3)
        msc.schedule_variant(sch, index, variant_list[index], FEAT, 2)
        config = msc.config_from_knobs(msc.knobs_from_trace(sch.trace), variant_list)
        kernels.append(msc.BuiltKernel(op, msc.schedule_config(op, matrix, FEAT, config, workers=2), matrix,
                                       FEAT, target, inputs=inputs))
    for kernel in kernels:
        assert all(a is b for a, b in zip(kernel.args, inputs))
        assert kernel.correct()
    own = msc.BuiltKernel(op, msc.schedule_config(op, matrix, FEAT, config, workers=2), matrix, FEAT, target)
    assert [a.numpy().tobytes() for a in own.args] == [a.numpy().tobytes() for a in inputs]


def test_time_side_by_side_rotates_the_order_every_round():
    calls = []

    class Timed:
        def __init__(self, n):
            self.n = n

        def time_ms(self):
            calls.append(self.n)
            return float(self.n)

    samples = msc.time_side_by_side([Timed(0), Timed(1), Timed(2)], 4)
    assert calls == [0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2]
    assert samples == [[0.0] * 4, [1.0] * 4, [2.0] * 4]
    assert msc.time_side_by_side([], 3) == []


def test_the_shipped_model_of_metaschedule_kernels_loads_and_is_chosen():
    """The package ships the SpMM model fine-tuned on MetaSchedule's kernels on 2 threads, with a model card;
    `CognateModel()` takes it for SpMM on 2 threads and the CPU model of tune's kernels otherwise."""
    from cognate_tvm.model.pretrained import load_pretrained, pretrained_path

    name = f"{msc.METASCHEDULE_PLATFORM}-2t"
    model, path = load_pretrained("spmm", name), pretrained_path("spmm", name)
    assert sum(f.stat().st_size for f in path.iterdir()) < 10 * 2**20
    assert "Rebuild: `python benchmarks/metaschedule_finetune.py" in (path / "MODEL_CARD.md").read_text()
    assert msc.shipped_platform("spmm", 2) == msc.METASCHEDULE_PLATFORM
    assert msc.shipped_platform("spmm", 1) == msc.shipped_platform("sddmm", 2) == "cpu"
    cpu = CPUSpace("spmm")
    reachable = [c for c in msc.reachable_configs("spmm", 128) if c in set(cpu.candidates(2))]
    fixed = model.fixed_configs(cpu)
    assert len(fixed) == 5 and set(fixed) <= set(reachable)  # its data: MetaSchedule kernels on 2 threads
    matrix = generate("rmat", 3000, seed=4)
    scores = model.predict(matrix, reachable, space=cpu, feat=128)
    assert np.all(np.isfinite(scores)) and np.unique(scores).size > 100
