"""benchmarks/metaschedule_compare.py: a search's curve read from its measurements in order, and the
side-by-side re-timing that scores every pick (no search runs here: tests/test_metaschedule.py runs one)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from cognate_tvm.matrix import generate


@pytest.fixture
def bench(monkeypatch):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "metaschedule_compare.py"
    spec = importlib.util.spec_from_file_location("metaschedule_compare", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def _search(log, rejected=()):
    return {"matrix": "m", "method": "cognate", "max_trials": len(log), "trials_log": log,
            "rejected": list(rejected), "error": None}


def test_at_trials_is_the_best_of_the_first_t_measurements(bench):
    log = [["a", 3.0], ["b", None], ["c", 2.0], ["d", 0.5], ["e", 1.0], ["f", 0.1]]
    row = _search(log, rejected=["f"])
    assert bench.at_trials(row, 1)["config"] == "a" and bench.at_trials(row, 1)["best_ms"] == 3.0
    assert bench.at_trials(row, 2)["config"] == "a"          # a failed measurement is no best
    assert bench.at_trials(row, 3)["config"] == "c"
    assert bench.at_trials(row, 6)["config"] == "d"          # "f" was faster, but its output was wrong
    assert bench.at_trials(_search([["a", None]]), 1)["config"] is None
    # finalists: the fastest distinct configs by their best record
    assert bench.at_trials(row, 6, finalists=3)["finalists"] == ["d", "e", "c"]
    assert bench.at_trials(_search([["a", 2.0], ["b", 3.0], ["a", 1.0]]), 3, finalists=2)["finalists"] == ["a", "b"]
    # a search's curve never gets worse with more trials
    times = [bench.at_trials(row, t)["best_ms"] for t in range(1, 7)]
    assert times == sorted(times, reverse=True)


def test_summary_scores_the_views_against_each_matrix_best(bench):
    views = [{"matrix": "m", "method": "cognate", "trials": 8, "best_ms": 2.0, "config": "a", "finalists": ["a"]},
             {"matrix": "m", "method": "xgb", "trials": 8, "best_ms": 1.0, "config": "b", "finalists": ["b", "a"]},
             {"matrix": "m", "method": "cognate", "trials": 16, "best_ms": 1.0, "config": "b",
              "finalists": ["b", "c"]},
             {"matrix": "m", "method": "xgb", "trials": 16, "best_ms": None, "config": None, "finalists": []}]
    times = {"m": {"a": 4.0, "b": 2.0, "c": 1.0}}
    bench.add_retimed(views, times)
    # the record's pick re-timed, and the best of the finalists re-timed
    assert [v["retimed_ms"] for v in views] == [4.0, 2.0, 2.0, None]
    assert [v["confirmed_config"] for v in views] == ["a", "b", "c", None]
    summary = bench.summarize(views, ["cognate", "xgb"], [8, 16])
    assert summary["table"]["cognate@8"]["geomean_fraction"] == pytest.approx(0.5)
    assert summary["table"]["cognate@16"]["geomean_fraction"] == pytest.approx(1.0)
    assert summary["table"]["xgb@16"]["failed"] == 1
    assert summary["retimed_table"]["cognate@8"]["geomean_fraction"] == pytest.approx(0.25)
    assert summary["retimed_table"]["cognate@16"]["geomean_fraction"] == pytest.approx(0.5)
    assert summary["confirmed_table"]["cognate@16"]["geomean_fraction"] == pytest.approx(1.0)
    assert summary["trials_to_goal"] == {"cognate": 16, "xgb": 8}
    assert "re-timed" in bench.markdown(summary, ["cognate", "xgb"], [8, 16])


def test_retime_configs_times_every_pick_in_rounds_and_resumes(bench, tmp_path):
    from cognate_tvm import metaschedule as msc

    variant_list = msc.variants("spmm", 16)  # two points MetaSchedule's space reaches at N = 16
    configs = [msc.config_from_knobs({"variant": i, "i_tile": 8, "j_tile": msc.j_tiles(variant_list[i], 16)[0]},
                                     variant_list).to_json() for i in (0, 1)]
    views = [{"matrix": "banded", "config": c} for c in configs]
    matrices = [("banded", generate("banded", 300, seed=3))]
    path = tmp_path / "retimed.jsonl"
    times = bench.retime_configs(views, matrices, op="spmm", feat=16, threads=1, rounds=3, path=path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["config"] for r in lines} == set(configs)
    for r in lines:
        assert r["error"] is None and len(r["times_ms"]) == 3 and r["time_ms"] > 0
        assert times["banded"][r["config"]] == pytest.approx(sorted(r["times_ms"])[1])  # the median
    again = bench.retime_configs(views, matrices, op="spmm", feat=16, threads=1, rounds=3, path=path)
    assert again == times and len(path.read_text().splitlines()) == 2  # nothing re-timed
