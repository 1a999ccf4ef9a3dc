"""The examples run as a user runs them (in a subprocess), against tiny stand-ins for the shipped models."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from cognate_tvm import space
from cognate_tvm.matrix import generate, save_matrix
from cognate_tvm.data import split_by_matrix
from cognate_tvm.matrix.corpus import load_corpus
from cognate_tvm.model import CognateCostModel
from cognate_tvm.model.pretrained import pretrained_path
from cognate_tvm.space.cpu import CPUSpace
from tiny_models import ship, tiny_cpu_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    return ship(tiny_cpu_model(), tmp_path_factory.mktemp("pretrained"))


def test_tune_sh(shipped, tmp_path):
    env = dict(os.environ, COGNATE_PRETRAINED_DIR=str(shipped), PYTHON=sys.executable)
    out = tmp_path / "tuned"
    out.mkdir()
    run = subprocess.run(["bash", str(ROOT / "examples" / "tune.sh"), str(out)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "speedup over the baseline" in run.stdout or "chosen: the baseline" in run.stdout
    config = json.loads((out / "spmm" / "config.json").read_text())
    assert config["target"] == "llvm" and (out / "spmm" / config["kernel"]["library"]).is_file()
    spade = json.loads((out / "spade.json").read_text())
    assert spade["mode"] == "finetuned" and spade["oracle"]["whole_space"] and spade["oracle_fraction"] <= 1.0
    cuda = json.loads((out / "cuda" / "report.json").read_text())
    assert len(cuda["kernels"]) == 3 and (out / "cuda" / "top1.cu").is_file()


def test_metaschedule_example(shipped, tmp_path):
    matrix = save_matrix(generate("rmat", 1500, seed=3), tmp_path / "a.mtx")
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "metaschedule_spmm.py"), "--matrix", str(matrix),
                          "--feat", "32", "--trials", "8", "--pretrained-dir", str(shipped)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    default = re.search(r"default schedule: ([0-9.]+) ms", run.stdout)
    tuned = re.search(r"tuned schedule:\s+([0-9.]+) ms", run.stdout)
    assert default and tuned and float(default.group(1)) > 0 and float(tuned.group(1)) > 0, run.stdout
    assert "output checked against scipy" in run.stdout


def _run_benchmark(script, *args, timeout=600):
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *map(str, args)], capture_output=True,
                         text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_tune_eval_benchmark_at_test_size(shipped, tmp_path):
    out, cpu = tmp_path / "tune_eval", space.create("cpu", "spmm")
    model = CognateCostModel.load(pretrained_path("spmm", "cpu", root=shipped))
    fixed = cpu.candidates(2)[7]  # the training data's best fixed config, as far as tune knows
    model.fixed["cpu"] = [cpu.candidates(1)[7].to_json(), fixed.to_json()]
    shipped = ship(model, tmp_path / "pretrained", ops=("spmm",))
    _run_benchmark("tune_eval.py", "--matrices", 2, "--min-rows", 300, "--max-rows", 400, "--random", 4, "--top-k", 2,
                   "--feat", 32, "--threads", 2, "--retime-rounds", 1, "--beside-budget", 2, "--pretrained-dir", shipped,
                   "--out", out)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and len({r["matrix"] for r in rows}) == 2
    baseline = cpu.baseline().to_json()
    for r in rows:
        assert r["tune_measurements"] <= 3 and r["random_measurements"] == 5
        # tune --budget 2 beside it: the baseline, the 2 sampled configs, then the same search's 2
        assert 3 < r["tune_budget_measurements"] <= 1 + 2 + 2 and r["tune_budget_config"] is not None
        # on 2 threads the serial fixed config is no candidate: the parallel one is measured and is a pick
        assert cpu.config_from_dict(r["train_fixed_config"]) == fixed and r["tune_fixed_measured"] == 1
        # the sweep's own times are kept for the offline baselines: baseline first, 1 + 4 configs
        assert len(r["sweep"]) == 5 and r["sweep"][0][0] == baseline and r["sweep"][0][1] > 0
    summary = json.loads((out / "summary.json").read_text())
    retimed = summary["rows"]
    sweep_configs = [{c for c, _ in r["sweep"]} for r in rows]
    # the sweeps are kept in sweeps.parquet, not repeated in summary.json
    assert all("sweep" not in r for r in retimed)
    table = pd.read_parquet(out / "sweeps.parquet")
    expected = pd.DataFrame([(r["matrix"], c, t) for r in rows for c, t in r["sweep"]],
                            columns=["matrix", "config", "time_ms"]).astype({"time_ms": float})
    pd.testing.assert_frame_equal(table, expected)
    for r, configs in zip(retimed, sweep_configs):
        # every method's pick was re-timed beside the baseline, in one call
        for method in ("tune", "tune_oneshot", "tune_ranking", "tune_budget", "train_fixed", "random",
                       "random_same_budget", "best_fixed"):
            assert r[f"{method}_speedup"] == pytest.approx(r["baseline_ms"] / r[f"{method}_ms"]), method
        for method in ("random", "random_same_budget", "best_fixed"):  # drawn from the sweep
            assert space.create("cpu", "spmm").config_from_dict(r[f"{method}_config"]).to_json() in configs
        assert r["vendor_ms"] > 0 and r["tune_vs_vendor"] == pytest.approx(r["vendor_ms"] / r["tune_ms"])
    geo = float(np.exp(np.mean(np.log([r["tune_speedup"] for r in retimed]))))
    assert summary["tune_speedup_geomean"] == pytest.approx(geo)
    assert summary["random_same_budget_sweep_p10"] <= summary["random_same_budget_sweep_median"] \
        <= summary["random_same_budget_sweep_p90"]
    text = (out / "summary.md").read_text()
    assert "| tune |" in text and "best fixed (other matrices)" in text and "baseline + 2 random" in text
    assert "tune, ranking only" in text and "training data's best fixed" in text
    assert "tune --budget (at most 5 measurements)" in text and summary["tune_budget_speedup_geomean"] > 0
    assert (out / "tune_eval.png").stat().st_size
    # a rerun reuses the finished matrices and re-times them (3 rounds: medians between the rounds' extremes)
    again = _run_benchmark("tune_eval.py", "--matrices", 2, "--min-rows", 300, "--max-rows", 400, "--random", 4,
                           "--top-k", 2, "--feat", 32, "--retime-rounds", 3, "--pretrained-dir", shipped, "--out", out)
    assert len((out / "results.jsonl").read_text().splitlines()) == 2 and "geomean" in again.stdout
    retimed = json.loads((out / "summary.json").read_text())["rows"]
    assert all(r["retime_rounds"] == 3 and r["tune_speedup"] > 0 and r["best_fixed_speedup"] > 0 for r in retimed)
    assert "median of 3 rounds" in (out / "summary.md").read_text()


def test_tune_eval_offline_baselines():
    bench = _load_benchmark("tune_eval.py")
    # three matrices, one sweep each over the same configs: b (baseline), x, y, z
    rows = [{"sweep": [["b", 10.0], ["x", 5.0], ["y", 8.0], ["z", None]]},
            {"sweep": [["b", 10.0], ["x", 4.0], ["y", 2.0], ["z", 1.0]]},
            {"sweep": [["b", 10.0], ["x", 20.0], ["y", 5.0], ["z", 1.0]]}]
    # leave one out, by the mean log speedup on the other two matrices:
    # matrix 0: z (10x, 10x) beats y (5x, 2x) and x (2.5x, 0.5x), but z failed on 0 -> the baseline b;
    # matrix 1: z failed on 0, so y (1.25x, 2x) beats x (2x, 0.5x); matrix 2: y (1.25x, 5x) beats x (2x, 2.5x)
    assert bench.best_fixed_leave_one_out(rows) == ["b", "y", "y"]
    # with the whole budget every draw takes every config: the best of each sweep
    whole = bench.random_same_budget(rows, 3, draws=20)
    best = float(np.exp(np.mean(np.log([10 / 5, 10 / 1, 10 / 1]))))
    assert whole["median"] == pytest.approx(best) and whole["p10"] == pytest.approx(best)
    # one config per draw: between the baseline (1x) and the best, and seeded
    one = bench.random_same_budget(rows, 1, draws=200, seed=4)
    assert 1.0 <= one["p10"] <= one["median"] <= one["p90"] <= best
    assert one == bench.random_same_budget(rows, 1, draws=200, seed=4)


def test_tune_eval_spade_oracle(shipped, tmp_path):
    out = tmp_path / "tune_eval_spade"
    _run_benchmark("tune_eval.py", "--target", "spade", "--oracle", "--no-vendor", "--matrices", 2, "--min-rows", 300,
                   "--max-rows", 400, "--random", 4, "--top-k", 2, "--budget", 3, "--feat", 32, "--retime-rounds", 1,
                   "--pretrained-dir", shipped, "--out", out)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for r in rows:
        # baseline + 3 fine-tuning samples + top-2 (fewer when the ranking's top repeats a measured config)
        assert 4 < r["tune_measurements"] <= 1 + 3 + 2
        assert r["tune_budget_measurements"] is None  # tune itself has a budget: nothing run beside it
        # the simulator is deterministic: the oracle is the fastest of all 256 configs, so no pick beats it
        assert r["oracle_whole_space"] and r["oracle_configs"] == 256 and r["oracle_ms"] > 0
    summary = json.loads((out / "summary.json").read_text())
    # the fractions come from the re-timing only: on the deterministic simulator none is above 1,
    # and the best of the random sweep (it holds the baseline) is at least the baseline
    for r in summary["rows"]:
        assert r["tune_oracle_fraction"] == pytest.approx(r["oracle_ms"] / r["tune_ms"])
        assert all(0 < r[f"{m}_oracle_fraction"] <= 1 + 1e-9
                   for m in ("tune", "random", "random_same_budget", "best_fixed", "baseline"))
        assert r["baseline_oracle_fraction"] <= r["random_oracle_fraction"] + 1e-9
    geo = float(np.exp(np.mean(np.log([r["tune_oracle_fraction"] for r in summary["rows"]]))))
    assert summary["tune_oracle_fraction_geomean"] == pytest.approx(geo)
    assert "| tune / oracle |" in (out / "summary.md").read_text()


def test_metaschedule_compare_at_test_size(shipped, tmp_path):
    out = tmp_path / "ms"
    _run_benchmark("metaschedule_compare.py", "--matrices", 2, "--trials", 4, 8, "--min-rows", 800, "--max-rows", 800,
                   "--feat", 32, "--methods", "cognate", "random", "--finalists", 2, "--retime-rounds", 2,
                   "--pretrained-dir", shipped, "--out", out, timeout=1200)  # 4 searches: minutes on a loaded machine
    searches = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # one search per method and matrix, of the largest trial count, its every measurement logged
    assert [(r["method"], r["max_trials"]) for r in searches] == [("cognate", 8), ("random", 8)] * 2
    assert all(r["error"] is None and r["best_ms"] > 0 and len(r["trials_log"]) == 8 for r in searches), searches
    summary = json.loads((out / "summary.json").read_text())
    views = pd.read_parquet(out / "runs.parquet").to_dict("records")
    assert [(v["method"], v["trials"]) for v in views] == [("cognate", 4), ("cognate", 8), ("random", 4),
                                                            ("random", 8)] * 2
    best = {name: min(v["best_ms"] for v in views if v["matrix"] == name) for name in {v["matrix"] for v in views}}
    for v in views:
        assert v["fraction"] == pytest.approx(best[v["matrix"]] / v["best_ms"])
        assert 1 <= len(v["finalists"]) <= 2 and v["config"] == v["finalists"][0]
    for fewer, more in zip(views[::2], views[1::2]):  # one search's curve: more trials never record worse
        assert more["best_ms"] <= fewer["best_ms"]
    # every finalist of every view re-timed on both matrices in 2 rounds, outputs checked
    retimed = [json.loads(line) for line in (out / "retimed.jsonl").read_text().splitlines()]
    pool = {c for v in views for c in v["finalists"]}
    assert {r["config"] for r in retimed} == pool and len(retimed) == 2 * len(pool)
    assert all(r["error"] is None and len(r["times_ms"]) == 2 and r["time_ms"] > 0 for r in retimed), retimed
    times = {(r["matrix"], r["config"]): r["time_ms"] for r in retimed}
    for v in views:
        own = min(t for (m, _), t in times.items() if m == v["matrix"])
        assert v["retimed_fraction"] == pytest.approx(own / times[(v["matrix"], v["config"])])
        assert v["confirmed_fraction"] == pytest.approx(own / min(times[(v["matrix"], c)] for c in v["finalists"]))
    per_matrix = summary["best_fixed"]["per_matrix"]
    assert len(per_matrix) == 2 and all(0 < x <= 1 for x in per_matrix.values())
    assert set(summary["confirmed_table"]) == {"cognate@4", "cognate@8", "random@4", "random@8"}
    text = (out / "summary.md").read_text()
    assert "cognate" in text and "best fixed config" in text and (out / "metaschedule_compare.png").stat().st_size


def _load_benchmark(script):
    spec = importlib.util.spec_from_file_location(script.replace(".py", "_benchmark"), ROOT / "benchmarks" / script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_metaschedule_best_fixed_leave_one_out():
    bench = _load_benchmark("metaschedule_compare.py")
    times = {"m0": {"a": 1.0, "b": 2.0, "c": None},
             "m1": {"a": 4.0, "b": 2.0, "c": 1.0},
             "m2": {"a": 3.0, "b": 1.0, "c": 1.0}}
    # m0: on m1 and m2, c is best (1, 1) but failed on m0 -> 0; m1: c failed on m0, b (1, 0.5) beats a (0.25, 1/3)
    # -> 1 / 2; m2: b (0.5, 0.25) vs a (1, 0.25): a -> 1 / 3
    assert bench.best_fixed_leave_one_out(times) == pytest.approx({"m0": 0.0, "m1": 0.5, "m2": 1 / 3})


def _ms_search(log, rejected=()):
    return {"matrix": "m", "method": "cognate", "max_trials": len(log), "trials_log": log,
            "rejected": list(rejected), "error": None}


def test_metaschedule_compare_curve_is_the_best_of_the_first_t_measurements():
    bench = _load_benchmark("metaschedule_compare.py")
    log = [["a", 3.0], ["b", None], ["c", 2.0], ["d", 0.5], ["e", 1.0], ["f", 0.1]]
    row = _ms_search(log, rejected=["f"])
    assert bench.at_trials(row, 1)["config"] == "a" and bench.at_trials(row, 1)["best_ms"] == 3.0
    assert bench.at_trials(row, 2)["config"] == "a"          # a failed measurement is no best
    assert bench.at_trials(row, 3)["config"] == "c"
    assert bench.at_trials(row, 6)["config"] == "d"          # "f" was faster, but its output was wrong
    assert bench.at_trials(_ms_search([["a", None]]), 1)["config"] is None
    # finalists: the fastest distinct configs by their best record
    assert bench.at_trials(row, 6, finalists=3)["finalists"] == ["d", "e", "c"]
    assert bench.at_trials(_ms_search([["a", 2.0], ["b", 3.0], ["a", 1.0]]), 3, finalists=2)["finalists"] == ["a", "b"]
    # a search's curve never gets worse with more trials
    times = [bench.at_trials(row, t)["best_ms"] for t in range(1, 7)]
    assert times == sorted(times, reverse=True)


def test_metaschedule_compare_scores_record_retimed_and_confirmed_picks():
    bench = _load_benchmark("metaschedule_compare.py")
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


def test_metaschedule_compare_record_drift_compares_records_with_the_retiming():
    bench = _load_benchmark("metaschedule_compare.py")
    searches = [dict(_ms_search([["a", 2.0], ["b", None], ["c", 9.0], ["b", 3.0]]), matrix="m", method="cognate"),
                dict(_ms_search([["a", 1.0]]), matrix="n", method="cognate"),
                dict(_ms_search([["a", 1.0]]), matrix="m", method="random")]
    times = {"m": {"a": 1.0, "b": 2.0}, "n": {"a": 4.0}}  # "c" was never re-timed
    drift = bench.record_drift(searches, times, ["cognate", "random", "xgb"])
    assert drift["cognate"]["n"] == 3 and drift["cognate"]["median"] == pytest.approx(1.5)  # 2/1, 3/2, 1/4
    assert drift["cognate"]["p10"] == pytest.approx(0.5) and drift["random"] == {"n": 1, "median": 1.0,
                                                                                "p10": 1.0, "p90": 1.0}
    assert drift["xgb"] is None
    summary = dict(bench.summarize([], ["cognate"], [8]), record_drift=drift)
    assert "cognate: 1.50 [0.50," in bench.markdown(summary, ["cognate"], [8])


def test_metaschedule_compare_retimes_every_pick_in_rounds_and_resumes(tmp_path):
    bench = _load_benchmark("metaschedule_compare.py")
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


def test_metaschedule_compare_per_matrix_pool_retimes_only_own_picks(monkeypatch, tmp_path):
    """--per-matrix-pool: each matrix re-times only the picks of its own searches (the default re-times every
    pick on every matrix, for the best fixed config)."""
    import cognate_tvm.metaschedule as msc

    bench = _load_benchmark("metaschedule_compare.py")
    baseline = CPUSpace("spmm").baseline()
    config, other = baseline.to_json(), dataclasses.replace(baseline, i_tile=1).to_json()
    views = [{"matrix": "m0", "config": config, "finalists": [config]},
             {"matrix": "m1", "config": other, "finalists": [other, config]}]
    assert bench.picked(views) == sorted({config, other}) and bench.picked(views[:1]) == [config]
    built = []

    class FakeKernel:
        def __init__(self, op, mod, matrix, feat, target, *, inputs):
            built.append((matrix.shape[0], mod))

        def correct(self):
            return True

    monkeypatch.setattr(msc, "BuiltKernel", FakeKernel)
    monkeypatch.setattr(msc, "device_inputs", lambda *a, **k: [])
    monkeypatch.setattr(msc, "schedule_config", lambda op, matrix, feat, c, workers: c.to_json())
    monkeypatch.setattr(msc, "time_side_by_side", lambda kernels, rounds: [[1.0] * rounds for _ in kernels])
    matrices = [(name, sp.random(n, n, density=0.3, format="csr")) for name, n in (("m0", 10), ("m1", 20))]
    for per_matrix, expected in ((True, {(10, config), (20, other), (20, config)}),
                                 (False, {(10, config), (10, other), (20, other), (20, config)})):
        built.clear()
        times = bench.retime_configs(views, matrices, op="spmm", feat=8, threads=1, rounds=2,
                                     path=tmp_path / f"retimed_{per_matrix}.jsonl", per_matrix=per_matrix)
        assert set(built) == expected and len(built) == len(expected)
        rows_of = {"m0": 10, "m1": 20}
        assert {(rows_of[m], c) for m, row in times.items() for c in row} == expected


def test_metaschedule_fixed_fractions_score_one_config_on_every_matrix():
    bench = _load_benchmark("metaschedule_compare.py")
    times = {"m0": {"a": 1.0, "b": 2.0}, "m1": {"a": 4.0, "b": 2.0}, "m2": {"a": 3.0, "b": None}}
    assert bench.fixed_fractions(times, "b") == pytest.approx({"m0": 0.5, "m1": 1.0, "m2": 0.0})


def test_metaschedule_compare_takes_the_fixed_config_the_shipped_model_keeps(tmp_path):
    from cognate_tvm import metaschedule as msc

    bench = _load_benchmark("metaschedule_compare.py")
    cpu = CPUSpace("spmm")
    panel = next(c for c in cpu.candidates(2) if not c.single_panel)  # no MetaSchedule kernel
    serial = next(c for c in msc.reachable_configs("spmm", 32) if not c.parallel)  # not a 2-thread candidate
    reachable = next(c for c in msc.reachable_configs("spmm", 32) if c.parallel)
    model = tiny_cpu_model()
    model.fixed = {"cpu": [panel.to_json(), serial.to_json(), reachable.to_json()]}
    ship(model, tmp_path, ops=("spmm",), platform=f"{msc.METASCHEDULE_PLATFORM}-2t")
    assert bench.shipped_fixed_config("spmm", 32, 2, tmp_path) == reachable.to_json()


def test_metaschedule_finetune_at_test_size(shipped, tmp_path):
    from cognate_tvm import metaschedule as msc

    root = tmp_path / "pretrained"
    ship(CognateCostModel.load(pretrained_path("spmm", "cpu", root=shipped)), root, ops=("spmm",), platform="cpu-2t")
    data, out = tmp_path / "data", tmp_path / "out"
    args = ["--corpus", "synthetic:6:5", "--min-rows", 500, "--max-rows", 900, "--feat", 32, "--uniform", 16,
            "--top", 2, "--rounds", 1, "--lrs", 1e-3, 2e-3, "--epochs", 2, "--data", data, "--out", out, "--ship",
            "--pretrained-dir", root, "--quiet"]
    _run_benchmark("metaschedule_finetune.py", *args)
    from cognate_tvm.data import load_frame

    frame = load_frame(data)
    assert frame["matrix"].nunique() == 6 and frame["error"].isna().all() and frame["correct"].all()
    assert all(json.loads(b)["kernels"] == "metaschedule" for b in frame["backend"].unique())
    reachable = {c.to_json() for c in msc.reachable_configs("spmm", 32)}
    assert set(frame["config"]) <= reachable | {CPUSpace("spmm").baseline().to_json()}
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["results"]) == {"finetuned", "shipped", "best_fixed", "random"}
    assert summary["lr"] in (1e-3, 2e-3) and summary["measurements"] == len(frame)
    assert sum(len(s) for s in summary["split"]) == 6
    name = f"spmm-{msc.METASCHEDULE_PLATFORM}-2t"
    assert (root / name / "MODEL_CARD.md").read_text().startswith("# cognate-tvm cost model of MetaSchedule")
    assert msc.shipped_platform("spmm", 2, root=root) == msc.METASCHEDULE_PLATFORM
    # a rerun measures nothing again (the dataset resumes) and ships the same data's model
    _run_benchmark("metaschedule_finetune.py", *args)
    assert len(load_frame(data)) == len(frame)


def test_tune_eval_on_a_corpus_spec():
    bench = _load_benchmark("tune_eval.py")
    args = dataclasses.make_dataclass("Args", ["matrix_file", "corpus", "matrices", "min_rows", "max_rows",
                                               ("split", str, "all"), ("split_seed", int, 0)])
    chosen = bench.chosen_matrices(args([], "realistic:2:5:300-400", 10, 2000, 60000))
    # the corpus's own entries, built: one fem_blocks and one community matrix of 300-400 rows
    assert list(chosen) == [e.name for e in load_corpus("realistic:2:5:300-400")]
    assert all(sp.issparse(m) and 250 <= m.shape[0] <= 450 for m in chosen.values())
    # a spec without its own row range takes --min-rows / --max-rows
    ranged = bench.chosen_matrices(args([], "realistic:2:5", 10, 300, 400))
    assert list(ranged) == [e.name for e in load_corpus("realistic:2:5", min_rows=300, max_rows=400)]
    assert all(250 <= m.shape[0] <= 450 for m in ranged.values())
    # --split: only that part of pretrain.py's split of the corpus's names
    names = [e.name for e in load_corpus("realistic:12:5:300-400")]
    parts = [list(bench.chosen_matrices(args([], "realistic:12:5:300-400", 10, 300, 400, part, 0)))
             for part in ("train", "validation", "test")]
    assert [set(p) for p in parts] == [set(p) for p in split_by_matrix(names, seed=0)]
    assert sorted(sum(parts, [])) == sorted(names) and all(parts)
    # without --corpus: the generated evaluation set, as before
    generated = bench.chosen_matrices(args([], None, 2, 300, 400))
    assert len(generated) == 2 and all(name.split("_")[-1].startswith("9000") for name in generated)


def test_corpus_coverage(shipped, tmp_path):
    out = tmp_path / "coverage"
    run = _run_benchmark("corpus_coverage.py", "--model", "spmm-cpu", "--pretrained-dir", shipped,
                         "--max-rows", 600, "--corpus", "ref=synthetic:8:1:300-500",
                         "--corpus", "other=realistic:2:5:300-400", "--corpus", "big=synthetic:2:3:2000-3000",
                         "--out", out)
    result = json.loads((out / "coverage.json").read_text())
    rows = result["rows"]
    # the over-sized corpus is left out entirely; the others keep every matrix
    assert [r["corpus"] for r in rows].count("ref") == 8 and [r["corpus"] for r in rows].count("other") == 2
    assert "big" not in {r["corpus"] for r in rows}
    ref = {r["matrix"] for r in rows if r["corpus"] == "ref"}
    # nearest neighbours are reference matrices, never a reference matrix itself
    assert all(r["nearest"] in ref and r["nearest"] != r["matrix"] and r["distance"] >= 0 for r in rows)
    # distances are in units of the reference's median nearest-neighbour distance
    assert np.median([r["distance"] for r in rows if r["corpus"] == "ref"]) == pytest.approx(1.0)
    assert "| other | 2 |" in run.stdout and (out / "coverage.png").stat().st_size
