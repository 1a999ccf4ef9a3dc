"""benchmarks/runner_drift.py: its configs are MetaSchedule schedules that compute the right output, and
its summary is the ratio and spread of the times it logged (the timing itself runs in the benchmark)."""
from __future__ import annotations

import numpy as np
import pytest

from benchmark_loader import load_benchmark
from cognate_tvm.kernels.cpu import cpu_target
from cognate_tvm.matrix import generate
from cognate_tvm.metaschedule import BuiltKernel
from cognate_tvm.space.cpu import CPUSpace


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("runner_drift")


def test_sampled_configs_are_distinct_schedules_with_the_right_output(bench):
    matrix = generate("rmat", 300, seed=3).astype(np.float32)
    picks = bench.sample_configs("spmm", matrix, 32, 2, 3, seed=0)
    configs = [c for c, _ in picks]
    assert len(set(configs)) == 3 and set(configs) <= set(CPUSpace("spmm").candidates(2))
    assert all(c.k_panel == 0 for c in configs)  # column panels are no schedule of the CSR workload
    assert all(BuiltKernel("spmm", mod, matrix, 32, cpu_target(2)).correct() for _, mod in picks)
    assert [c for c, _ in bench.sample_configs("spmm", matrix, 32, 2, 3, seed=0)] == configs  # seeded


def test_summary_is_the_ratio_and_spread_of_the_logged_times(bench):
    rows = [{"matrix": "m", "config": "a", "round": 0, "runner_ms": 2.0, "process_ms": 1.0},
            {"matrix": "m", "config": "a", "round": 1, "runner_ms": 6.0, "process_ms": 2.0},
            {"matrix": "m", "config": "b", "round": 0, "runner_ms": 1.0, "process_ms": 1.0},
            {"matrix": "m", "config": "b", "round": 1, "runner_ms": 1.0, "process_ms": 1.0},
            {"matrix": "n", "config": "a", "round": 0, "runner_ms": 1.0, "process_ms": 4.0}]
    summary = bench.summarize(rows)
    m = summary["per_matrix"]["m"]
    assert m["ratio"]["n"] == 4 and m["ratio"]["median"] == pytest.approx(1.5)  # 2, 3, 1, 1
    assert m["runner_spread"] == pytest.approx(2.0)   # a: 6/2, b: 1/1
    assert m["process_spread"] == pytest.approx(1.5)  # a: 2/1, b: 1/1
    assert summary["all"]["ratio"]["n"] == 5 and summary["all"]["ratio"]["p10"] == pytest.approx(0.55)  # 0.25 (n), 1, 1, 2, 3
    assert summary["all"]["runner_spread"] == pytest.approx(1.0)  # (m, a): 3, (m, b): 1, (n, a): 1
    text = bench.markdown(summary)
    assert "| m | 1.50 [" in text and "| all |" in text


def test_a_rerun_measures_only_the_matrices_it_lacks(bench, tmp_path, monkeypatch):
    measured = []

    def fake_measure(name, matrix, **_):
        measured.append(name)
        return [{"matrix": name, "config": "a", "round": 0, "runner_ms": 1.0, "process_ms": 1.0}]

    monkeypatch.setattr(bench, "measure_matrix", fake_measure)
    args = ["--matrices", "2", "--min-rows", "300", "--max-rows", "300", "--out", str(tmp_path)]
    assert bench.main(args) == 0 and len(measured) == 2
    first = (tmp_path / "times.jsonl").read_text().splitlines()
    (tmp_path / "times.jsonl").write_text(first[0] + "\n")  # killed after the first matrix
    assert bench.main(args) == 0 and measured[2:] == measured[1:2]
    assert (tmp_path / "times.jsonl").read_text().splitlines() == first
    assert "| all |" in (tmp_path / "summary.md").read_text()
