"""The tuning library: samples, the oracle's configs, shipped-model loading, backend creation, kernels written out."""
import json
import zlib

import pytest

from cognate_tvm import cli, space, tuning
from cognate_tvm.model.loading import load_shipped_model
from cognate_tvm.backends.base import Backend, MeasureResult
from cognate_tvm.backends.spade import SpadeBackend
from cognate_tvm.errors import PretrainedNotFoundError, UnknownKindError
from cognate_tvm.matrix import generate
from cognate_tvm.ops import get_op
from tiny_models import ship, tiny_cpu_model


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    return ship(tiny_cpu_model(), tmp_path_factory.mktemp("pretrained"), ops=("spmm",))


def test_sample_configs_rules():
    spade = space.create("spade", "spmm")
    sample = tuning.sample_configs(spade, 10, 3)
    assert len(sample) == 10 == len(set(sample)) and spade.baseline() not in sample
    assert sample == tuning.sample_configs(spade, 10, 3) and sample != tuning.sample_configs(spade, 10, 4)
    assert tuning.sample_configs(spade, 0, 0) == []
    assert len(tuning.sample_configs(spade, 10_000, 0)) == len(spade) - 1
    with pytest.raises(ValueError, match="budget must be >= 0, got -1"):
        tuning.sample_configs(spade, -1, 0)


def test_oracle_configs_whole_small_spaces_and_a_sample_of_the_cpu_space():
    spade, cpu = space.create("spade", "spmm"), space.create("cpu", "spmm")
    configs, whole = tuning.oracle_configs(spade, None, seed=0)
    assert whole and configs == spade.configs()
    assert len(cpu) > tuning.ORACLE_WHOLE_SPACE
    measured = [MeasureResult(cpu.baseline(), 1.0), MeasureResult(cpu.configs()[5], 2.0)]
    tuned = tuning.TuneResult(baseline=measured[0], measured=measured, predicted_rank=[1, 2])
    configs, whole = tuning.oracle_configs(cpu, tuned, seed=0, sample=40)
    assert not whole and configs[:2] == [r.config for r in measured]  # what tune measured is always in it
    assert 40 <= len(configs) <= 42 and len(set(configs)) == len(configs)
    with pytest.raises(ValueError, match="oracle sample must be >= 1"):
        tuning.oracle_configs(cpu, tuned, seed=0, sample=0)


def test_load_shipped_model_falls_back_to_cpu_with_a_note(shipped):
    model, source, notes = load_shipped_model("spmm", "cpu", root=shipped)
    assert source == str(shipped / "spmm-cpu") and notes == []
    model, source, notes = load_shipped_model("spmm", "spade", root=shipped)
    assert source == str(shipped / "spmm-cpu") and len(notes) == 1 and "zero-shot" in notes[0]
    with pytest.raises(PretrainedNotFoundError, match=r"no shipped model for op 'sddmm'.*shipped: spmm/cpu"):
        load_shipped_model("sddmm", "spade", root=shipped)
    with pytest.raises(PretrainedNotFoundError, match="--model PATH"):
        load_shipped_model("sddmm", "cpu", root=shipped)


def test_load_shipped_model_notes_other_hardware_than_the_models(tmp_path):
    from cognate_tvm.model.pretrained import pretrained_path, write_trained_on

    root = ship(tiny_cpu_model(), tmp_path, ops=("spmm",), platform="gpu")
    write_trained_on(pretrained_path("spmm", "gpu", root=root), {"target": "cuda", "arch": "sm_90",
                                                                  "device": "NVIDIA H200"})
    same = {"target": "cuda", "platform": "gpu", "arch": "sm_90", "host": "x"}
    _, source, notes = load_shipped_model("spmm", "gpu", root=root, hardware=same)
    assert source == str(root / "spmm-gpu") and notes == []
    _, _, notes = load_shipped_model("spmm", "gpu", root=root, hardware={**same, "arch": "sm_80"})
    assert len(notes) == 1 and "NVIDIA H200 (arch sm_90)" in notes[0] and "arch is sm_80" in notes[0]
    assert load_shipped_model("spmm", "gpu", root=root)[2] == []  # no hardware given: nothing compared


def test_create_backend_errors():
    with pytest.raises(UnknownKindError, match="unknown target 'tpu'"):
        tuning.create_backend("tpu")
    with pytest.raises(ValueError, match=r"target 'spade' does not take option\(s\) \['arch'\]"):
        tuning.create_backend("spade", arch="sm_80")
    backend = SpadeBackend(workers=1)
    assert tuning.create_backend(backend) is backend


def test_measure_report_and_a_simulator_writes_no_kernel(tmp_path):
    matrix = generate("rmat", 300, seed=1)
    spade = space.create("spade", "spmm")
    configs = cli.parse_configs("sample:3", spade, 0)
    results = tuning.measure_configs(SpadeBackend(workers=1), "spmm", matrix, configs, 16)
    report = tuning.measure_report(op="spmm", target="spade", feat=16, matrix_path="m.mtx", matrix=matrix,
                                  results=results, vendor=None)
    assert report["baseline"]["config"] == spade.baseline().to_dict() == report["results"][0]["config"]
    assert len(report["results"]) == 4 and json.dumps(report)
    written = tuning.write_kernel(SpadeBackend(), "spmm", spade.baseline(), 16, tmp_path / "k")
    assert "no kernel to write" in written["note"] and not any((tmp_path / "k").iterdir())
    with pytest.raises(ValueError, match="--configs must be"):
        cli.parse_configs("sample:0", spade, 0)


def test_tune_validates_its_arguments(shipped):
    matrix = generate("rmat", 200, seed=1)
    backend = SpadeBackend(workers=1)
    for feat, kwargs, message in ((16, {"top_k": 0}, "top_k must be >= 1"),
                                  (16, {"budget": -2}, "budget must be >= 0"), (0, {}, "feat must be >= 1")):
        with pytest.raises(ValueError, match=message):
            tuning.tune("spmm", matrix, backend=backend, feat=feat,
                        options=tuning.TuneOptions(pretrained_root=shipped, **kwargs))


class _ThreadedCPU(Backend):
    """A CPU backend stand-in: seeded times per config, kernels 'run' on `threads` threads."""

    target, platform = "fake-cpu", "cpu"

    def __init__(self, threads):
        self.threads = threads

    def kernel_threads(self):
        return self.threads

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        return [MeasureResult(c, 1.0 + zlib.crc32(str(c).encode()) % 97 / 100, correct=True if check else None)
                for c in configs]


@pytest.mark.parametrize("threads", [1, 2])
def test_tune_ranks_the_configs_of_the_backend_thread_count(shipped, threads):
    matrix = generate("rmat", 200, seed=1)
    tuned = tuning.tune("spmm", matrix, backend=_ThreadedCPU(threads), feat=16,
                        options=tuning.TuneOptions(pretrained_root=shipped, top_k=4))
    picked = [r.config for r in tuned.measured[1:]]  # after the baseline
    assert len(picked) == 4 and all(c.parallel == (threads > 1) for c in picked)


def test_pick_top_puts_the_best_fixed_configs_among_the_top_k():
    cpu = space.create("cpu", "spmm")
    ranked = cpu.candidates(1)[:20]  # serial configs, the model's order
    parallel = next(c for c in cpu.configs() if c.parallel)

    class _Fixed:
        def fixed_configs(self, platform_space):
            # measured already; not a candidate; then two usable ones, the second also the model's 4th
            return [ranked[0], parallel, ranked[15], ranked[3]]

    top, fixed = tuning.pick_top(_Fixed(), cpu, ranked, measured={ranked[0]}, top_k=4, fixed=2)
    assert fixed == [ranked[15], ranked[3]]
    assert top == [ranked[1], ranked[2], ranked[15], ranked[3]]
    top, fixed = tuning.pick_top(_Fixed(), cpu, ranked, measured={ranked[0]}, top_k=4, fixed=0)
    assert fixed == [] and top == ranked[1:5]
    top, fixed = tuning.pick_top(object(), cpu, ranked, measured=set(), top_k=3, fixed=1)  # no fixed list
    assert fixed == [] and top == ranked[:3]


def test_pick_top_picks_from_the_ranking_min_distance_knobs_apart():
    spade = space.create("spade", "spmm")
    ranked = spade.configs()
    top, fixed = tuning.pick_top(object(), spade, ranked, measured={ranked[0]}, top_k=4, fixed=0, min_distance=3)
    assert fixed == [] and top == space.diverse_top(ranked[1:], 4, 3) and top[0] == ranked[1]
    assert all(a.knobs_differing(b) >= 3 for i, a in enumerate(top) for b in top[i + 1:])
    top, _ = tuning.pick_top(object(), spade, ranked, measured={ranked[0]}, top_k=4, fixed=0)
    assert top == ranked[1:5]  # min_distance 1: the plain ranking


@pytest.mark.parametrize("diversity", [None, 1, 3])
def test_tune_measures_picks_the_given_number_of_knobs_apart(shipped, diversity):
    """tune's one-shot picks from the ranking follow `diversity` (None: the platform's, SPADE's 2) and it is
    reported."""
    matrix = generate("rmat", 200, seed=1)
    tuned = tuning.tune("spmm", matrix, backend=SpadeBackend(workers=1), feat=16,
                        options=tuning.TuneOptions(pretrained_root=shipped, top_k=4, fixed=0, diversity=diversity,
                                                   search="oneshot"))
    expected = 2 if diversity is None else diversity
    assert tuned.diversity == expected
    spade = space.create("spade", "spmm")
    ranked = tuned.model.rank(matrix, spade.configs(), space=spade, feat=16)
    picked = [r.config for r in tuned.measured[1:]]  # after the baseline
    assert picked == space.diverse_top([c for c in ranked if c != spade.baseline()], 4, expected)
    assert all(a.knobs_differing(b) >= expected for i, a in enumerate(picked) for b in picked[i + 1:])
    report = tuning.tune_report(tuned, op="spmm", target="spade", feat=16, matrix_path="m.mtx", matrix=matrix,
                               budget=0, top_k=4, fixed=0)
    assert report["diversity"] == expected
    with pytest.raises(ValueError, match="diversity must be >= 1"):
        tuning.tune("spmm", matrix, backend=SpadeBackend(workers=1), feat=16,
                    options=tuning.TuneOptions(pretrained_root=shipped, diversity=0))


def test_tune_measures_the_shipped_models_best_fixed_config(shipped, tmp_path):
    from cognate_tvm.model import CognateCostModel
    from cognate_tvm.model.pretrained import pretrained_path

    cpu = space.create("cpu", "spmm")
    model = CognateCostModel.load(pretrained_path("spmm", "cpu", root=shipped))
    matrix = generate("rmat", 200, seed=1)
    ranked = model.rank(matrix, cpu.candidates(2), space=cpu, feat=16)
    model.fixed["cpu"] = [ranked[-1].to_json()]  # the model's last pick: measured only as a fixed config
    root = ship(model, tmp_path, ops=("spmm",), platform="cpu-2t")
    tuned = tuning.tune("spmm", matrix, backend=_ThreadedCPU(2), feat=16,
                        options=tuning.TuneOptions(pretrained_root=root, top_k=3))
    assert [r.config for r in tuned.measured[1:]] == ranked[:2] + [ranked[-1]] and tuned.fixed == [ranked[-1]]
    report = tuning.tune_report(tuned, op="spmm", target="fake", feat=16, matrix_path="m", matrix=matrix, budget=0,
                               top_k=3)
    assert [r["best_fixed"] for r in report["measured"]] == [False, False, False, True] and report["fixed"] == 1
    assert tuning.tune("spmm", matrix, backend=_ThreadedCPU(2), feat=16,
                       options=tuning.TuneOptions(pretrained_root=root, top_k=3, fixed=0)).fixed == []
    with pytest.raises(ValueError, match=r"fixed must be in \[0, top_k=3\]"):
        tuning.tune("spmm", matrix, backend=_ThreadedCPU(2), feat=16,
                    options=tuning.TuneOptions(pretrained_root=root, top_k=3, fixed=4))


class _TrueTimes(Backend):
    """Times from a table, whatever the call: what re-timing side by side sees; records each call's order."""

    target, platform = "fake-cpu", "cpu"

    def __init__(self, times, deterministic=False):
        self.times, self.calls, self.deterministic = times, [], deterministic

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        self.calls.append(list(configs))
        return [MeasureResult(c, self.times[c], correct=True if check else None) for c in configs]


def test_choose_compares_the_finalists_by_their_side_by_side_medians():
    cpu = space.create("cpu", "spmm")
    base, a, b, c = cpu.baseline(), *cpu.candidates(1)[:3]
    # the tune pass measured a fastest, b second, c slowest; timed again, b is the fastest (c would be
    # faster still, but only the 2 fastest measured are finalists)
    measured = [MeasureResult(base, 2.0), MeasureResult(a, 1.0), MeasureResult(b, 1.1), MeasureResult(c, 3.0)]
    backend = _TrueTimes({base: 2.0, a: 1.5, b: 1.0, c: 0.5})
    tuned = tuning.TuneResult(baseline=measured[0], measured=list(measured), predicted_rank=[None, 1, 2, 3])
    tuning.choose(backend, get_op("spmm"), generate("rmat", 200, seed=1), tuned, 16, finalists=2, rounds=3)
    assert tuned.retimed == {base: 2.0, a: 1.5, b: 1.0}
    assert tuned.best.config == b and tuned.chosen.config == b and tuned.checked.correct is True
    assert [r.time_ms for r in tuned.confirmed] == [2.0, 1.0]
    # three rounds of the baseline and the finalists, the order rotated, then b's output check beside the baseline
    assert backend.calls == [[base, a, b], [a, b, base], [b, base, a], [base, b]]
    # medians that put the baseline first keep it
    backend = _TrueTimes({base: 0.9, a: 1.5, b: 1.0, c: 0.5})
    tuned = tuning.TuneResult(baseline=measured[0], measured=list(measured), predicted_rank=[None, 1, 2, 3])
    tuning.choose(backend, get_op("spmm"), generate("rmat", 200, seed=1), tuned, 16, finalists=2, rounds=3)
    assert tuned.chosen.config == base and tuned.confirmed is None
    # a simulator is not timed again: the measured times decide
    backend = _TrueTimes({base: 2.0, a: 1.5, b: 1.0, c: 0.5}, deterministic=True)
    tuned = tuning.TuneResult(baseline=measured[0], measured=list(measured), predicted_rank=[None, 1, 2, 3])
    tuning.choose(backend, get_op("spmm"), generate("rmat", 200, seed=1), tuned, 16, finalists=2, rounds=3)
    assert tuned.retimed == {} and tuned.chosen.config == a and backend.calls == [[base, a]]
