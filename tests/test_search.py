"""Search strategies: one-shot and adaptive (measure -> fine-tune -> re-rank, exploring unvaried knobs)."""
import zlib

import numpy as np
import pytest

from cognate_tvm import space, tuning
from cognate_tvm.tuning import search
from cognate_tvm.backends.base import MeasureResult
from cognate_tvm.backends.replay import ReplayBackend
from cognate_tvm.errors import UnknownKindError
from cognate_tvm.matrix import generate
from cognate_tvm.ops import get_op
from tiny_models import ship, tiny_cpu_model


class _Model:
    """Ranks by a fixed score until fine-tuned; then by the measured times' knob values (a stand-in that
    learns from the matrix what the loop gives it). Records what it was fine-tuned on."""

    def __init__(self, score, learned=None):
        self.score, self.learned, self.finetuned_on = score, learned, []

    def __deepcopy__(self, memo):  # the search fine-tunes copies: they share the record
        clone = _Model(self.score, self.learned)
        clone.finetuned_on = self.finetuned_on
        return clone

    def rank(self, matrix, configs, *, space, feat):
        return sorted(configs, key=self.score)

    def finetune(self, groups, *, space):
        self.finetuned_on.append(groups[0])
        if self.learned is not None:
            self.score = self.learned
        return self

    def fixed_configs(self, platform_space):
        return []


def _context(configs, times, model, *, fixed=0, platform="gpu"):
    gpu = space.create(platform, "spmm")
    calls = []

    def measure(picked, desc):
        calls.append(list(picked))
        return [MeasureResult(c, times[c]) for c in picked]

    baseline = gpu.baseline()
    context = search.SearchContext(op=get_op("spmm"), matrix=generate("rmat", 100, seed=0), feat=16, space=gpu,
                                   candidates=configs, model=model, measure=measure,
                                   measured=[MeasureResult(baseline, times[baseline])], fixed=fixed)
    return context, calls


def test_unvaried_knobs_and_sampling_from_candidates():
    gpu = space.create("gpu", "spmm")
    a = gpu.baseline()
    b = next(c for c in gpu.configs() if c.knobs_differing(a) == 1)
    assert search.unvaried_knobs([a]) == set(range(len(a.to_json_values())))
    changed = next(n for n, (x, y) in enumerate(zip(a.to_json_values(), b.to_json_values())) if x != y)
    assert search.unvaried_knobs([a, b]) == set(range(len(a.to_json_values()))) - {changed}
    pool = gpu.configs()[:30]
    drawn = search.sample_configs(gpu, 10, 3, pool)
    assert len(drawn) == 10 and set(drawn) <= set(pool) and a not in drawn
    assert drawn == search.sample_configs(gpu, 10, 3, pool) != search.sample_configs(gpu, 10, 4, pool)
    with pytest.raises(UnknownKindError, match="unknown search strategy 'greedy'"):
        search.create("greedy")
    with pytest.raises(ValueError, match="radius must be >= 1"):
        search.Adaptive(radius=0)
    assert search.create("oneshot", measurements=3).measurements == 3


def test_adaptive_rounds_fine_tune_on_what_was_measured_and_re_rank():
    gpu = space.create("gpu", "spmm")
    configs = [c for c in gpu.configs() if c != gpu.baseline()]
    times = {c: 1.0 + zlib.crc32(c.to_json().encode()) % 1000 / 100 for c in gpu.configs()}
    truth = sorted(configs, key=times.get)
    # the model's first ranking puts the true best last; fine-tuned, it ranks by the true times
    model = _Model(score=lambda c: -times[c], learned=times.get)
    context, calls = _context(configs, times, model)
    outcome = search.Adaptive(measurements=7, first=3, per_round=2).search(context)
    assert outcome.rounds == [3, 2, 2] and len(outcome.measured) == 8 and len(calls) == 3
    assert calls[0] == sorted(configs, key=lambda c: -times[c])[:3]  # the first round: the first ranking's top
    assert truth[0] in calls[1] and calls[1][0] == truth[0]  # re-ranked: the best is measured next
    assert outcome.finetuned and len(model.finetuned_on) == 2
    # each fine-tune saw every config measured before it (the baseline included)
    assert [len(g.configs) for g in model.finetuned_on] == [4, 6]
    assert len(set(r.config for r in outcome.measured)) == 8
    assert outcome.predicted_rank[4] == 1  # the pick of round 2 was the new ranking's first


def test_adaptive_explores_a_knob_no_measured_config_varied():
    gpu = space.create("gpu", "spmm")
    base = gpu.baseline()
    knobs = base.to_json_values()
    names = [f.name for f in type(base).__dataclass_fields__.values()]
    position, other = names.index("parts"), names.index("tx")
    # candidates that differ from the baseline in `parts` and `tx` only
    configs = [c for c in gpu.configs() if c != base and all(
        v == knobs[n] for n, v in enumerate(c.to_json_values()) if n not in (position, other))]
    # the model ranks configs that keep `parts` at the baseline's value first: no pick varies it
    model = _Model(score=lambda c: (c.to_json_values()[position] != knobs[position], c.to_json()))
    times = {c: 2.0 if c.to_json_values()[position] == knobs[position] else 1.0 for c in gpu.configs()}
    context, calls = _context(configs, times, model)
    outcome = search.Adaptive(measurements=4, first=2, per_round=2).search(context)
    round2 = calls[1]
    assert round2[0].to_json_values()[position] == knobs[position]  # the ranking's next
    assert round2[1].to_json_values()[position] != knobs[position]  # the exploring pick varies `parts`
    assert min(r.time_ms for r in outcome.measured) == 1.0
    # without exploration the ranking's next configs are measured
    context, calls = _context(configs, times, _Model(score=model.score))
    search.Adaptive(measurements=4, first=2, per_round=2, explore=False).search(context)
    assert calls[1] == sorted(configs, key=model.score)[2:4]


class _BlindModel(_Model):
    """A model whose knob encoder does not read the CPU space's last two knobs (register blocks and
    balanced ranges), as a model trained before they existed."""

    def __deepcopy__(self, memo):
        return _BlindModel(self.score, self.learned)

    def unread_knobs(self, platform_space):
        return platform_space.knob_names[-2:]


def test_adaptive_explores_the_twin_holding_an_unread_knob_value_first():
    import dataclasses

    cpu = space.create("cpu", "spmm")
    base = cpu.baseline()
    plain = [c for c in cpu.candidates(2) if c.single_panel and c.block_rows == 1 and not c.balanced]
    configs = plain[:40] + [dataclasses.replace(c, balanced=True) for c in plain[:40] if c.chunk == 0]
    # the model ranks every balanced config last (it cannot read the knob); balanced ones are faster
    model = _BlindModel(score=lambda c: (c.balanced, c.to_json()))
    times = {c: (1.0 if c.balanced else 2.0) + zlib.crc32(c.to_json().encode()) % 100 / 1000
             for c in configs + [base]}
    context, calls = _context(configs, times, model, platform="cpu")
    outcome = search.Adaptive(measurements=4, first=2, per_round=2).search(context)
    fastest = min(outcome.measured[:3], key=lambda r: r.time_ms).config
    explored = calls[1][1]
    assert explored.balanced and not any(c.balanced for c in calls[0])
    assert explored.knobs_differing(fastest) == min(c.knobs_differing(fastest) for c in configs if c.balanced)
    assert search.unread_knob_positions(model, cpu) == [len(cpu.knob_names) - 2, len(cpu.knob_names) - 1]
    assert search.unread_knob_positions(_Model(score=str), cpu) == []  # a model that reads every knob


def test_adaptive_does_not_fine_tune_on_fewer_than_two_configs_that_ran():
    gpu = space.create("gpu", "spmm")
    configs = [c for c in gpu.configs() if c != gpu.baseline()][:20]
    times = {c: np.nan for c in gpu.configs()}
    model = _Model(score=lambda c: c.to_json())
    context, _ = _context(configs, times, model)
    context.measure = lambda picked, desc: [MeasureResult(c, None, error="boom") for c in picked]
    outcome = search.Adaptive(measurements=7).search(context)
    assert not outcome.finetuned and model.finetuned_on == [] and len(outcome.measured) == 8


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    return ship(tiny_cpu_model(), tmp_path_factory.mktemp("pretrained"), ops=("spmm",), platform="cpu")


def test_tune_adapts_by_default_on_any_target(shipped):
    """The real tune with the tiny CPU model, on a replayed GPU sweep (the CPU model ranks GPU configs
    zero-shot): adaptive measures baseline + 7 in three rounds and fine-tunes; oneshot measures baseline + 5."""
    gpu = space.create("gpu", "spmm")
    matrix = generate("rmat", 300, seed=2)
    times = {c: 1.0 + zlib.crc32(c.to_json().encode()) % 1000 / 100 for c in gpu.configs()}
    backend = ReplayBackend.from_timings({"m": times}, matrices={"m": matrix}, op="spmm", feat=16, platform="gpu")
    tuned = tuning.tune("spmm", matrix, backend=backend, feat=16, options=tuning.TuneOptions(pretrained_root=shipped))
    assert tuned.search == "adaptive" and tuned.rounds == [3, 2, 2] and len(tuned.measured) == 8
    assert tuned.finetuned and tuned.chosen.time_ms == min(r.time_ms for r in tuned.measured)
    report = tuning.tune_report(tuned, op="spmm", target="cuda", feat=16, matrix_path="m", matrix=matrix, budget=0,
                               top_k=None)
    assert report["search"] == "adaptive" and report["top_k"] == 7 and report["rounds"] == [3, 2, 2]
    oneshot = tuning.tune("spmm", matrix, backend=backend, feat=16,
                          options=tuning.TuneOptions(pretrained_root=shipped, search="oneshot"))
    assert oneshot.search == "oneshot" and len(oneshot.measured) == 6 and not oneshot.finetuned
    assert len(tuning.tune("spmm", matrix, backend=backend, feat=16,
                           options=tuning.TuneOptions(pretrained_root=shipped, top_k=4)).measured) == 5


def test_adaptive_local_takes_the_best_of_the_ranking_near_the_fastest_measured():
    gpu = space.create("gpu", "spmm")
    base = gpu.baseline()
    configs = [c for c in gpu.configs() if c != base]
    far_first = lambda c: (-c.knobs_differing(base), c.to_json())  # noqa: E731  the model ranks far configs first
    times = {c: 1.0 if c == base else 2.0 for c in gpu.configs()}  # the baseline stays the fastest
    context, calls = _context(configs, times, _Model(score=far_first))
    search.Adaptive(measurements=3, first=2, per_round=1, local=1).search(context)
    ranked = sorted(configs, key=far_first)
    assert all(c.knobs_differing(base) > 1 for c in calls[0])
    assert calls[1] == [next(c for c in ranked[2:] if c.knobs_differing(base) == 1)]
    context, calls = _context(configs, times, _Model(score=far_first))
    search.Adaptive(measurements=3, first=2, per_round=1).search(context)
    assert calls[1] == [ranked[2]]
    with pytest.raises(ValueError, match="local must be >= 1"):
        search.Adaptive(local=0)
