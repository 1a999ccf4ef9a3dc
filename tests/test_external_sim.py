"""ExternalSimulator: round trip through tests/data/fake_simulator.py and clean failures."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cognate_tvm.backends.external import ExternalSimulator
from cognate_tvm.matrix import generate, save_matrix
from cognate_tvm.space.spade import SpadeConfig, SpadeSpace

FAKE = Path(__file__).parent / "data" / "fake_simulator.py"


@pytest.fixture(scope="module")
def matrix():
    return generate("banded", 500, seed=4)


@pytest.fixture(scope="module")
def configs():
    return SpadeSpace("spmm").configs()[::64]  # 4 configs


def backend(mode: str = "ok", **kwargs) -> ExternalSimulator:
    return ExternalSimulator(command=[sys.executable, str(FAKE), "--mode", mode], **kwargs)


def expected_cycles(config: SpadeConfig, matrix, feat: int, lanes: int = 16) -> float:
    return matrix.nnz * feat / lanes + config.row_panel * matrix.shape[0] / config.col_panel + config.split


@pytest.mark.parametrize("mode", ["ok", "reverse"])
def test_round_trip(matrix, configs, mode):
    sim = backend(mode, hardware={"clock_ghz": 2.0, "vector_width": 8})
    results = sim.measure("spmm", matrix, configs, 32, check=True)
    assert [r.config for r in results] == configs
    for r, c in zip(results, configs):
        assert r.ok and r.correct is None
        assert r.extra["cycles"] == pytest.approx(expected_cycles(c, matrix, 32, lanes=8))
        assert r.time_ms == pytest.approx(r.extra["cycles"] / 2e6)
        assert r.extra["nnz"] == matrix.nnz and r.extra["op"] == "spmm"


def test_matrix_path_is_passed_through(matrix, configs, tmp_path):
    path = save_matrix(matrix, tmp_path / "m.mtx")
    results = backend().measure("sddmm", str(path), configs[:2], 16)
    assert all(r.ok for r in results) and results[0].extra["op"] == "sddmm"


def test_missing_command(matrix, configs):
    sim = ExternalSimulator(command="/nonexistent/simulator --fast")
    results = sim.measure("spmm", matrix, configs, 8)
    assert all(not r.ok for r in results)
    assert all("cannot run simulator command '/nonexistent/simulator'" in r.error for r in results)


def test_crash_keeps_results_written_before_it(matrix, configs):
    results = backend("crash").measure("spmm", matrix, configs, 8)
    assert [r.ok for r in results] == [True, True, False, False]
    assert "exited with code 3" in results[2].error and "segmentation fault" in results[2].error


def test_timeout_keeps_results_written_before_it(matrix, configs):
    results = backend("hang", timeout_s=3).measure("spmm", matrix, configs, 8)
    assert results[0].ok
    assert all("timed out after 3 s" in r.error for r in results[1:])


def test_malformed_lines(matrix, configs):
    results = backend("malformed").measure("spmm", matrix, configs, 8)
    assert [r.ok for r in results] == [True, False, False, True]
    assert "not JSON" in results[1].error and "no valid 'index'" in results[1].error


def test_per_config_simulator_error(matrix, configs):
    results = backend("error").measure("spmm", matrix, configs, 8)
    assert [r.ok for r in results] == [True, False, True, True]
    assert results[1].error == "simulator: deadlock in tile 17"


def test_invalid_config_is_an_error_result_and_not_sent(matrix, configs):
    bad = SpadeConfig(row_panel=3, col_panel=2048, split=1, barrier=False, bypass=False)
    results = backend().measure("spmm", matrix, [configs[0], bad, configs[1]], 8)
    assert [r.ok for r in results] == [True, False, True]
    assert "row_panel=3" in results[1].error
    assert results[2].extra["cycles"] == pytest.approx(expected_cycles(configs[1], matrix, 8))


def test_string_command_and_metadata():
    sim = ExternalSimulator(command=f"{sys.executable} {FAKE} --mode ok", platform="spade")
    assert sim.command[-2:] == ["--mode", "ok"]
    meta = sim.metadata()
    assert meta["platform"] == "spade" and meta["hardware"]["pes"] == 224
    with pytest.raises(ValueError):
        ExternalSimulator(command=[])
