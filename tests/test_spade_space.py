"""The SPADE configuration space: size, validity, baseline, mapping, JSON round trip."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from cognate_tvm.errors import InvalidConfigError
from cognate_tvm.space import LOOPS, create
from cognate_tvm.space.spade import (BARRIERS, BYPASSES, COL_PANELS, ROW_PANELS, SPLITS, SpadeConfig,
                                     SpadeSpace)


@pytest.fixture(params=["spmm", "sddmm"])
def space(request) -> SpadeSpace:
    return create("spade", request.param)


def test_space_has_256_distinct_valid_configs(space):
    configs = space.configs()
    assert len(configs) == len(space) == 256
    assert len(set(configs)) == 256
    assert all(space.is_valid(c) for c in configs)
    assert (len(ROW_PANELS), len(COL_PANELS), len(SPLITS), len(BARRIERS), len(BYPASSES)) == (4, 4, 4, 2, 2)
    assert configs == space.configs()  # a fixed order


def test_baseline_is_in_the_space(space):
    base = space.baseline()
    assert base in space.configs()
    assert base == SpadeConfig(row_panel=64, col_panel=1 << 20, split=1, barrier=False, bypass=False)


@pytest.mark.parametrize("bad", [
    dict(row_panel=5), dict(col_panel=1000), dict(split=3), dict(barrier=1), dict(bypass="yes"),
    dict(row_panel=True),
])
def test_check_rejects_values_outside_the_space(space, bad):
    config = dataclasses.replace(space.baseline(), **bad)
    with pytest.raises(InvalidConfigError, match=next(iter(bad))):
        space.check(config)
    assert not space.is_valid(config)


def test_check_rejects_other_config_types(space):
    @dataclasses.dataclass(frozen=True)
    class Other:
        row_panel: int = 16

    with pytest.raises(InvalidConfigError, match="SpadeConfig"):
        space.check(Other())


def test_json_round_trip(space):
    for config in space.configs()[::17]:
        assert space.config_from_json(config.to_json()) == config
    with pytest.raises(InvalidConfigError):
        space.config_from_dict({**space.baseline().to_dict(), "split": 16})


def test_shared_coords_follow_design():
    space = SpadeSpace("spmm")
    barrier = SpadeConfig(row_panel=64, col_panel=2048, split=4, barrier=True, bypass=False)
    coords = space.shared_coords(barrier, rows=10_000, cols=50_000, feat=128)
    assert coords.log2_i == 6 and coords.log2_k == 11 and coords.log2_j == 5  # J = 128 / 4
    assert coords.loop_order == ("k1", "i1", "j1", "i0", "k0", "j0")
    free = dataclasses.replace(barrier, barrier=False)
    assert space.shared_coords(free, rows=10_000, cols=50_000, feat=128).loop_order == (
        "i1", "k1", "j1", "i0", "k0", "j0")
    # Panels larger than the matrix are capped at its size.
    wide = SpadeConfig(row_panel=256, col_panel=1 << 20, split=1, barrier=False, bypass=False)
    capped = space.shared_coords(wide, rows=100, cols=3000, feat=64)
    assert capped.log2_i == pytest.approx(np.log2(100)) and capped.log2_k == pytest.approx(np.log2(3000))
    assert sorted(coords.loop_order) == sorted(LOOPS)
    assert coords.omega().sum() == 6


def test_platform_knobs_are_bypass_and_barrier():
    space = SpadeSpace("spmm")
    assert space.knob_names == ("bypass", "barrier")
    knobs = space.knob_matrix()
    assert knobs.shape == (256, 2) and knobs.dtype == np.float32
    assert set(map(tuple, knobs.tolist())) == {(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)}
    config = SpadeConfig(row_panel=4, col_panel=2048, split=2, barrier=True, bypass=False)
    assert space.platform_knobs(config).tolist() == [0.0, 1.0]


def test_sample_is_seeded_and_distinct():
    space = SpadeSpace("spmm")
    a, b = space.sample(20, seed=3), space.sample(20, seed=3)
    assert a == b and len(set(a)) == 20
    assert space.sample(20, seed=4) != a


def test_space_imports_without_torch_or_tvm():
    code = ("import sys; import cognate_tvm.space.spade as s; s.SpadeSpace('spmm').configs(); "
            "bad = [m for m in ('torch', 'tvm') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
