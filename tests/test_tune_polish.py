"""Polish: the hill climb over one-knob neighbours of the fastest measured config after tune's search."""
import json

import pytest

from cognate_tvm import space, tuning
from cognate_tvm.backends.base import MeasureResult
from cognate_tvm.backends.spade import SpadeBackend
from cognate_tvm.matrix import generate, load_matrix
from cognate_tvm.ops import get_op
from cognate_tvm.tuning import search
from cognate_tvm.tuning.polish import POLISH_BATCH, polish
from test_tune import SPADE, _main, matrix_path, shipped  # noqa: F401  (fixtures)


class _Ranking:
    """Ranks by a fixed key; records nothing, learns nothing."""

    def __init__(self, key):
        self.key = key

    def rank(self, matrix, configs, *, space, feat):
        return sorted(configs, key=self.key)


def _chain(platform_space):
    """(baseline, a neighbour of it, a neighbour of that two knobs from the baseline)."""
    configs = platform_space.configs()
    start = platform_space.baseline()
    step = next(c for c in configs if c.knobs_differing(start) == 1)
    goal = next(c for c in configs if c.knobs_differing(step) == 1 and c.knobs_differing(start) == 2)
    return start, step, goal


def _setup(times, model):
    gpu = space.create("gpu", "spmm")
    calls = []

    def measure(picked, desc):
        calls.append(list(picked))
        return [MeasureResult(c, times[c]) for c in picked]

    baseline = gpu.baseline()
    context = search.SearchContext(op=get_op("spmm"), matrix=generate("rmat", 100, seed=0), feat=16, space=gpu,
                                   candidates=gpu.configs(), model=model, measure=measure,
                                   measured=[MeasureResult(baseline, times[baseline])])
    outcome = search.SearchOutcome(measured=list(context.measured), predicted_rank=[None], fixed=[], model=model)
    return gpu, context, outcome, calls


def test_polish_climbs_two_steps_to_the_goal():
    gpu = space.create("gpu", "spmm")
    start, step, goal = _chain(gpu)
    times = {c: 10.0 for c in gpu.configs()}
    times.update({start: 5.0, step: 3.0, goal: 1.0})
    # the ranking puts the helpful configs last among the neighbours: the climb must not depend on it
    _, context, outcome, calls = _setup(times, _Ranking(lambda c: (c in (step, goal), c.to_json())))
    spent, moves = polish(context, outcome, 200)
    configs = [r.config for r in outcome.measured]
    assert goal in configs and moves == 2 and spent == len(configs) - 1
    assert len(configs) == len(set(configs))  # nothing measured twice
    assert all(len(batch) <= POLISH_BATCH for batch in calls) and outcome.rounds == [len(b) for b in calls]
    # every batch holds neighbours of the fastest config measured before it
    seen = [outcome.measured[0]]
    for batch in calls:
        centre = min(seen, key=lambda r: r.time_ms).config
        assert all(c.knobs_differing(centre) == 1 for c in batch)
        seen += [MeasureResult(c, times[c]) for c in batch]
    # it stops when the goal's neighbours are all measured (none is faster)
    goal_neighbours = {c for c in gpu.configs() if c.knobs_differing(goal) == 1}
    assert goal_neighbours <= set(configs)
    assert "polish: measured" in outcome.notes[-1] and "changed 2 times" in outcome.notes[-1]
    assert len(outcome.predicted_rank) == len(outcome.measured)


def test_polish_budget_takes_the_model_s_favourite_neighbours():
    gpu = space.create("gpu", "spmm")
    times = {c: 1.0 + len(c.to_json()) % 7 for c in gpu.configs()}
    key = lambda c: c.to_json()  # noqa: E731
    _, context, outcome, calls = _setup(times, _Ranking(key))
    spent, _ = polish(context, outcome, 3)
    neighbours = sorted((c for c in gpu.configs() if c.knobs_differing(gpu.baseline()) == 1), key=key)
    assert spent == 3 and calls == [neighbours[:3]]
    assert outcome.predicted_rank[1:] == [sorted(gpu.configs(), key=key).index(c) + 1 for c in neighbours[:3]]
    _, context, outcome, calls = _setup(times, _Ranking(key))
    assert polish(context, outcome, 0) == (0, 0) and calls == [] and outcome.notes == []
    with pytest.raises(ValueError, match="polish must be >= 0"):
        polish(context, outcome, -1)


def test_polish_with_nothing_measured_that_ran_does_nothing():
    gpu = space.create("gpu", "spmm")
    times = {c: None for c in gpu.configs()}
    _, context, outcome, calls = _setup(times, _Ranking(lambda c: c.to_json()))
    assert polish(context, outcome, 10) == (0, 0) and calls == []


def test_tune_polish_reaches_a_faster_neighbour_on_the_simulator(matrix_path):  # noqa: F811
    """Through `tune` on the SPADE simulator, with a model that ranks the best config last: the search
    alone misses it; the polish finds a config at least as fast as the search's, and the report says so."""
    matrix = load_matrix(matrix_path)
    spade = space.create("spade", "spmm")
    backend = SpadeBackend(workers=1)
    times = {r.config: r.time_ms for r in backend.measure("spmm", matrix, spade.configs(), 32)}
    worst_first = _Ranking(lambda c: -times[c])
    model = type("Fixed", (), {"rank": worst_first.rank, "finetune": lambda self, groups, space: self})()
    plain = tuning.tune("spmm", matrix, backend=backend, feat=32, options=tuning.TuneOptions(model=model, top_k=3,
                                                                                              search="oneshot"))
    polished = tuning.tune("spmm", matrix, backend=backend, feat=32,
                           options=tuning.TuneOptions(model=model, top_k=3, search="oneshot", polish=24))
    assert polished.polished == len(polished.measured) - len(plain.measured) and 0 < polished.polished <= 24
    assert polished.measured[:len(plain.measured)] == plain.measured
    assert polished.best.time_ms < plain.best.time_ms and polished.polish_moves >= 1
    report = tuning.tune_report(polished, op="spmm", target="spade", feat=32, matrix_path=matrix_path, matrix=matrix,
                                budget=0, top_k=None)
    assert (report["polished"], report["polish_moves"], report["top_k"]) == (polished.polished,
                                                                            polished.polish_moves, 3)


def test_polish_flag(matrix_path, shipped):  # noqa: F811
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--pretrained-dir", shipped, "--json",
                           "--polish", 10)
    assert code == 0, err
    report = json.loads(out)
    polished = report["polished"]  # fewer than 10 when the climb runs out of neighbours
    assert 0 < polished <= 10 and report["samples_measured"] == 8 + polished and report["top_k"] == 7
    assert report["rounds"][:3] == [3, 2, 2] and sum(report["rounds"][3:]) == polished
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--pretrained-dir", shipped, "--polish", 10)
    assert code == 0 and f"then {polished} one-knob neighbours of the fastest measured config (polish" in out
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--pretrained-dir", shipped, "--polish", -1)
    assert code == 2 and "--polish must be >= 0" in err
