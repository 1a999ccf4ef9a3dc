"""A config whose output is wrong is never picked: MeasureResult.ok, pick_checked, the CPU space benchmark."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from cognate_tvm.backends.base import WRONG_OUTPUT, Backend, MeasureResult, check_output, pick_checked
from cognate_tvm.matrix import generate
from cognate_tvm.ops import SPMM, get_op
from toy_space import ToySpace, synthetic_time_ms


class WrongOutputBackend(Backend):
    """Computes each config's output with numpy and times it synthetically; `wrong` configs corrupt it.

    The wrong configs are made the fastest of all (a bug that skips work looks fast).
    """

    target = "fake"
    platform = "toy"

    def __init__(self, space, *, wrong=()):
        self.space, self.wrong = space, set(wrong)
        self.checked: list = []  # configs measured with check=True, in order

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        op = get_op(op)
        dense = op.make_dense_inputs(matrix, feat, seed=seed)
        out = []
        for config in configs:
            output = op.reference(matrix, *dense)
            time_ms = synthetic_time_ms(matrix, self.space, config, feat)
            if config in self.wrong:
                output = output.copy()
                output.flat[0] += 1.0  # one element off: the check must see it
                time_ms *= 0.01
            correct = None
            if check:
                self.checked.append(config)
                correct = check_output(op, matrix, dense, output)
            out.append(MeasureResult(config, time_ms, correct=correct))
        return out


@pytest.fixture
def setting():
    space = ToySpace("spmm")
    matrix = generate("rmat", 300, seed=2)
    configs = [space.baseline()] + [c for c in space.sample(24, 0) if c != space.baseline()]
    return space, matrix, configs


def test_ok_excludes_a_failed_output_check(setting):
    config = setting[2][0]
    assert MeasureResult(config, 1.0).ok  # not checked
    assert MeasureResult(config, 1.0, correct=True).ok
    assert not MeasureResult(config, 1.0, correct=False).ok
    assert not MeasureResult(config, None).ok and not MeasureResult(config, 1.0, error="boom").ok


def test_a_fast_wrong_config_is_rejected_and_the_next_best_is_picked(setting):
    space, matrix, configs = setting
    feat = 32
    honest = WrongOutputBackend(space).measure(SPMM, matrix, configs, feat)
    by_time = sorted(honest, key=lambda r: r.time_ms)
    wrong = by_time[1].config  # a fast config that is not the baseline's ...
    wrong = wrong if wrong != space.baseline() else by_time[2].config
    backend = WrongOutputBackend(space, wrong={wrong})
    sweep = backend.measure(SPMM, matrix, configs, feat)  # unchecked, as sweeps are
    assert min(sweep, key=lambda r: r.time_ms).config == wrong  # ... made the sweep's winner

    pick = pick_checked(backend, SPMM, matrix, sweep, feat, beside=space.baseline())
    expected = min((r for r in honest if r.config != wrong), key=lambda r: r.time_ms).config
    assert pick.best.config == expected and pick.best.correct is True
    assert [r.config for r in pick.rejected] == [wrong]
    assert pick.rejected[0].error == WRONG_OUTPUT and pick.rejected[0].correct is False
    assert not pick.rejected[0].ok
    assert pick.beside.config == space.baseline() and pick.beside.correct is True
    assert backend.checked[:2] == [space.baseline(), wrong]  # checked once each, beside the baseline


def test_no_correct_config_picks_nothing(setting):
    space, matrix, configs = setting
    backend = WrongOutputBackend(space, wrong=configs[:3])
    sweep = backend.measure(SPMM, matrix, configs[:3], 32)
    pick = pick_checked(backend, SPMM, matrix, sweep, 32)
    assert pick.best is None and pick.beside is None
    assert {r.config for r in pick.rejected} == set(configs[:3])


def _load_benchmark(monkeypatch, name: str):
    """benchmarks/<name>.py as module <name>_benchmark (in sys.modules for this test only)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)
    spec.loader.exec_module(bench)
    return bench


class _Entry:
    name, family, permuted = "rmat_test", "rmat", False

    def build(self):
        return generate("rmat", 300, seed=2)


def test_cpu_space_benchmark_never_reports_a_wrong_winner(setting, monkeypatch):
    bench = _load_benchmark(monkeypatch, "cpu_space")
    space, matrix, configs = setting
    honest = WrongOutputBackend(space).measure(SPMM, matrix, configs, 32)
    fastest = min(honest, key=lambda r: r.time_ms).config
    wrong = fastest if fastest != space.baseline() else sorted(honest, key=lambda r: r.time_ms)[1].config
    backend = WrongOutputBackend(space, wrong={wrong})
    row = bench.measure_matrix(_Entry(), "spmm", backend, configs, 32, 0, None, None)
    assert row["best_config"] != wrong.to_dict() and row["best_correct"] is True
    assert row["wrong_configs"] == [{"index": configs.index(wrong), "error": WRONG_OUTPUT}]
    best_honest = min((r for r in honest if r.config != wrong), key=lambda r: r.time_ms)
    assert row["best_config"] == best_honest.config.to_dict()
    assert row["best_ms"] == pytest.approx(best_honest.time_ms)
    assert row["worst_ms"] == max(r.time_ms for r in honest)
    assert np.isclose(row["baseline_ms"], honest[0].time_ms)


def test_spade_space_benchmark_leaves_out_matrices_without_a_simulated_baseline(monkeypatch):
    bench = _load_benchmark(monkeypatch, "spade_space")
    from cognate_tvm.space import create as create_space

    space = create_space("spade", "spmm")
    configs = space.configs()
    base = configs.index(space.baseline())
    cycles = [1000.0 + n for n in range(len(configs))]
    fastest = next(n for n in range(len(configs)) if n != base)
    cycles[fastest] = 10.0
    failed_fastest = list(cycles)
    failed_fastest[fastest] = None  # the would-be winner failed to simulate
    runner_up = int(np.argmin([np.inf if c is None else c for c in failed_fastest]))
    no_baseline = list(cycles)
    no_baseline[base] = None

    def record(name, values):
        return {"name": name, "family": "rmat", "cycles": values}

    summary = bench.summarize([record("a", cycles), record("b", failed_fastest), record("c", no_baseline),
                               record("d", [None] * len(configs))], "spmm")
    assert summary["left_out"] == ["c", "d"] and summary["matrices"] == 2
    assert summary["_winners"] == {fastest: 1, runner_up: 1} and runner_up != fastest
    assert summary["_speedups"] == pytest.approx([cycles[base] / 10.0, cycles[base] / cycles[runner_up]])
    with pytest.raises(RuntimeError, match="left out: d"):
        bench.summarize([record("d", [None] * len(configs))], "spmm")
