"""benchmarks/gpu_transfer.py's splits and benchmarks/gpu_tune_eval.py's random baseline (no training here)."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from cognate_tvm.data import Group
from cognate_tvm.matrix import generate
from cognate_tvm.space import create as create_space

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _groups(count=12):
    space = create_space("gpu", "spmm")
    configs = tuple(space.configs()[:30])
    if space.baseline() not in configs:
        configs = (space.baseline(),) + configs[1:]
    return [Group(f"m{n}", generate("banded", 50 + 10 * n, seed=n), 128, configs,
                  np.linspace(1.0, 2.0, len(configs)) * (n + 1)) for n in range(count)]


def test_splits_keep_validation_fixed_and_matrices_apart():
    bench = _load("gpu_transfer")
    params, _ = bench.parse_args(["--data", "d_{op}", "--out", "o", "--cpu-data", "c", "--cpu-corpus", "x",
                                  "--train-configs", "10", "--val-configs", "0"])
    groups, space = _groups(), create_space("gpu", "spmm")
    val = bench.fixed_validation(groups, 3, seed=0)
    first, second = (bench.make_split(groups, val, seed, 7, params, space) for seed in (0, 1))
    for split in (first, second):
        names = split.names()
        assert sorted(names["val"]) == sorted(val) and len(names["train"]) == 7 and len(names["test"]) == 2
        assert not set(names["train"]) & set(names["test"]) and not set(names["val"]) & set(names["train"])
        assert all(len(g.configs) == 11 and space.baseline() in g.configs for g in split.train)
        assert all(len(g.configs) == 30 for g in [*split.val, *split.test])  # every config
    assert first.names()["train"] != second.names()["train"]
    assert bench.make_split(groups, val, 0, 7, params, space).names() == first.names()
    with pytest.raises(ValueError, match="only 9 are not validation"):
        bench.make_split(groups, val, 0, 9, params, space)


def test_random_baseline_is_the_mean_best_of_the_baseline_and_k_draws():
    evaluate = _load("gpu_tune_eval")
    times = np.array([4.0, 1.0, 2.0, 4.0])
    # with every other config drawn, the best is always found; with none better than the baseline, never
    assert evaluate.random_best(times, 0, 3, 20, seed=0) == pytest.approx(1.0)
    assert evaluate.random_best(np.array([1.0, 2.0, 3.0]), 0, 1, 20, seed=0) == pytest.approx(1.0)
    one = evaluate.random_best(times, 0, 1, 4000, seed=0)
    assert one == pytest.approx((1.0 + 0.5 + 0.25) / 3, abs=0.02)


def test_a_pool_of_another_sweep_only_trains_and_the_fixed_config_sees_every_config():
    bench = _load("gpu_transfer")
    params, _ = bench.parse_args(["--data", "d_{op}", "--out", "o", "--cpu-data", "c", "--cpu-corpus", "x",
                                  "--train-configs", "10", "--val-configs", "0"])
    groups, space = _groups(), create_space("gpu", "spmm")
    pool = [Group(f"pool{n}", g.matrix, g.feat, g.configs, g.times_ms) for n, g in enumerate(_groups(3))]
    val = bench.fixed_validation(groups, 3, seed=0)
    split = bench.make_split(groups, val, 0, 5, params, space, pool=pool)
    names = split.names()
    assert sorted(names["train"][5:]) == ["pool0", "pool1", "pool2"] and len(names["test"]) == 4
    assert not {"pool0", "pool1", "pool2"} & set(names["val"] + names["test"])
    assert [g.name for g in split.fixed_on] == names["train"][:5] + [g.name for g in split.val]
    assert all(len(g.configs) == 30 for g in split.fixed_on)  # every config, not the training sample
