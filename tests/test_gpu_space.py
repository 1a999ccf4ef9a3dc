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
    assert len(space) == {"spmm": 912, "sddmm": 768}[space.op.name]
    plain = [c for c in configs if not c.chunked]
    assert len(plain) == {"spmm": 528, "sddmm": 384}[space.op.name]  # the space before chunking, unchanged
    assert len(configs) - len(plain) == 384


def test_old_config_dicts_load_and_keep_their_form(space):
    """Dicts stored before the chunked fields existed load as the same plain kernel, and back."""
    old = {"parts": 2, "rows_per_block": 4, "tx": 8, "vec": 4, "bucketing": False,
           "atomics": space.op.name == "spmm"}
    config = space.config_from_dict(old)
    assert not config.chunked and config.cols_per_thread == 1 and not (config.swizzle or config.cache)
    assert config.to_dict() == old and config.dense_tile == 32
    assert config == GPUConfig(2, 4, 8, 4, False, space.op.name == "spmm")
    chunked = GPUConfig(4, 8, 16, 4, False, False, chunk=32, swizzle=True, cache=True, cols_per_thread=2)
    assert space.config_from_json(chunked.to_json()) == chunked
    assert set(chunked.to_dict()) == set(old) | {"chunk", "swizzle", "cache", "cols_per_thread"}
    with pytest.raises(InvalidConfigError, match="unknown fields"):
        space.config_from_dict({**old, "warps": 2})


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
    # chunked: own grid of knobs, no bucketing or atomics; the chunk knobs need chunk > 0
    assert space.is_valid(GPUConfig(8, 16, 8, 4, False, False, 128, True, False, 4))
    with pytest.raises(InvalidConfigError, match="bucketing and atomics"):
        space.check(GPUConfig(8, 8, 32, 4, True, False, 128))
    with pytest.raises(InvalidConfigError, match="chunk=64"):
        space.check(GPUConfig(1, 8, 32, 4, False, False, 64))
    with pytest.raises(InvalidConfigError, match="vec=2 not in"):
        space.check(GPUConfig(1, 8, 32, 2, False, False, 32))
    with pytest.raises(InvalidConfigError, match=r"rows_per_block=4 not in \(8, 16\)"):
        space.check(GPUConfig(1, 4, 32, 4, False, False, 32))
    with pytest.raises(InvalidConfigError, match=r"\(tx, cols_per_thread\)=\(32, 2\)"):
        space.check(GPUConfig(1, 8, 32, 4, False, False, 32, False, False, 2))
    with pytest.raises(InvalidConfigError, match="need chunk > 0"):
        space.check(GPUConfig(1, 4, 32, 4, False, False, 0, True))
    with pytest.raises(InvalidConfigError, match="cache must be a bool"):
        space.check(GPUConfig(1, 4, 32, 4, False, False, 32, False, 1))


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
    assert len(omegas) == 2  # SpMM: serial / parallel panels (chunked: parallel); SDDMM: plain / chunked
    wide = GPUConfig(1, 8, 16, 4, False, False, 32, False, False, 2)
    assert space.shared_coords(wide, rows=10, cols=10, feat=512).log2_j == 7.0  # 16 lanes * 4 * 2


def test_platform_knobs(space):
    knobs = space.knob_matrix()
    assert knobs.shape == (len(space), len(space.knob_names)) and knobs.dtype == np.float32
    config = GPUConfig(2, 1, 32, 4, True, space.op.name == "spmm")
    np.testing.assert_array_equal(space.platform_knobs(config),
                                  [5.0, 2.0, 1.0, float(space.op.name == "spmm"), 0, 0, 0, 0])
    chunked = GPUConfig(2, 4, 8, 4, False, False, 128, True, False, 2)
    np.testing.assert_array_equal(space.platform_knobs(chunked), [3.0, 2.0, 0, 0, 7.0, 1.0, 0, 1.0])
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
