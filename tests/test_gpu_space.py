"""The GPU configuration space: size, validity rules, JSON form, mapping to shared coordinates."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from cognate_tvm.errors import InvalidConfigError
from cognate_tvm.space import LOOPS, create
from cognate_tvm.space.gpu import ELL_MAX_WIDTH, GPUConfig, GPUSpace


@pytest.fixture(params=["spmm", "sddmm"])
def space(request) -> GPUSpace:
    return create("gpu", request.param)


def test_size_uniqueness_and_baseline(space):
    configs = space.configs()
    assert len(configs) >= 200
    assert len(set(configs)) == len(configs)
    assert space.baseline() in set(configs)
    assert len(space) == {"spmm": 528, "sddmm": 384}[space.op.name]


def test_json_round_trip_of_every_config(space):
    for config in space.configs():
        assert space.config_from_json(config.to_json()) == config


def test_rules(space):
    spmm = space.op.name == "spmm"
    assert space.is_valid(GPUConfig(4, 2, 8, 4, False, True)) == spmm
    # atomics without overlapping partitions, and bucketed partitions without atomics
    assert not space.is_valid(GPUConfig(1, 2, 8, 4, False, True))
    assert space.is_valid(GPUConfig(4, 2, 8, 4, True, False)) == (not spmm)
    with pytest.raises(InvalidConfigError, match="tx=64"):
        space.check(GPUConfig(1, 2, 64, 4, False, False))
    with pytest.raises(InvalidConfigError, match="vec=True"):
        space.check(GPUConfig(1, 2, 8, True, False, False))
    with pytest.raises(InvalidConfigError, match="bucketing must be a bool"):
        space.check(GPUConfig(1, 2, 8, 4, 1, False))
    with pytest.raises(InvalidConfigError, match="takes a GPUConfig"):
        space.check("not a config")


def test_shared_coords(space):
    config = GPUConfig(parts=4, rows_per_block=8, tx=16, vec=2, bucketing=False,
                       atomics=space.op.name == "spmm")
    coords = space.shared_coords(config, rows=1000, cols=1001, feat=128)
    assert coords.log2_i == 3.0
    assert coords.log2_k == pytest.approx(math.log2(251))  # ceil(1001 / 4)
    assert coords.log2_j == 5.0
    narrow = space.shared_coords(config, rows=1000, cols=1001, feat=8)
    assert narrow.log2_j == 3.0  # J never exceeds the dense width
    assert sorted(coords.loop_order) == sorted(LOOPS)
    single = space.shared_coords(space.baseline(), rows=10, cols=10, feat=32)
    assert single.log2_k == pytest.approx(math.log2(10))
    assert single.loop_order[0] == "k1"  # size-1 dummy k1 loop, outermost
    if space.op.name == "spmm":
        serial = GPUConfig(4, 8, 16, 2, False, False)
        assert space.shared_coords(serial, rows=10, cols=100, feat=32).loop_order[-2:] == ("k1", "k0")
    omegas = {space.shared_coords(c, rows=100, cols=100, feat=64).loop_order for c in space.configs()}
    assert len(omegas) == (2 if space.op.name == "spmm" else 1)


def test_platform_knobs(space):
    knobs = space.knob_matrix()
    assert knobs.shape == (len(space), len(space.knob_names)) and knobs.dtype == np.float32
    config = GPUConfig(2, 1, 32, 4, True, space.op.name == "spmm")
    np.testing.assert_array_equal(space.platform_knobs(config),
                                  [5.0, 2.0, 1.0, float(space.op.name == "spmm")])
    # every config differs from every other in shared coords or knobs
    keys = {(space.shared_coords(c, rows=4096, cols=4096, feat=512), tuple(space.platform_knobs(c)))
            for c in space.configs()}
    assert len(keys) == len(space)


def test_bucket_width_is_power_of_two():
    assert ELL_MAX_WIDTH & (ELL_MAX_WIDTH - 1) == 0


def test_module_imports_without_torch_or_tvm():
    code = ("import sys, cognate_tvm.space.gpu as g; g.GPUSpace('spmm').configs(); "
            "print(any(m.split('.')[0] in ('torch', 'tvm') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
