"""benchmarks/gpu_tune_eval.py's table: every search strategy side by side with the same-count random rows."""
import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_each_search_gets_its_tune_and_same_count_random_rows():
    evaluate = _load("gpu_tune_eval")
    keys = [row.key for row in evaluate.rows_of(["adaptive", "oneshot"])]
    assert keys == ["top1", "top5", "tune_adaptive", "random_same_adaptive", "tune_oneshot", "random_same_oneshot",
                    "random48", "fixed", "oracle"]
    summary = {key: 0.5 + n / 100 for n, key in enumerate(keys)}
    summary.update(mean_measured_adaptive=8.0, mean_measured_oneshot=6.0, min_tune_adaptive=0.25,
                   min_tune_oneshot=0.75)
    text = evaluate.markdown([{"op": "spmm", "held_out": 4, "searches": ["adaptive", "oneshot"],
                               "summary": summary}], "cmd")
    rows = {line.split(" | ")[2]: line for line in text.splitlines() if line.startswith("| spmm")}
    assert rows["tune (adaptive)"] == "| spmm | 4 | tune (adaptive) | 8.0 | 0.520 | 0.250 |"
    assert rows["random, same measurements (oneshot)"] == "| spmm | 4 | random, same measurements (oneshot) | 6.0 | 0.550 |  |"
    assert rows["tune (oneshot)"].endswith("| 6.0 | 0.540 | 0.750 |")
    assert rows["model top-1"] == "| spmm | 4 | model top-1 | 0 | 0.500 |  |"


def test_every_search_is_run_by_default_the_default_first():
    from cognate_tvm.tuning import search

    searches = _load("gpu_tune_eval").default_searches()
    assert searches[0] == search.DEFAULT_STRATEGY and sorted(searches) == sorted(search.STRATEGIES)
