"""Config mappers: every config of a space maps; the CPU-like mapping is the identity on shared coords."""
import math

import numpy as np
import pytest

from cognate_tvm import mapper
from cognate_tvm.errors import UnknownKindError
from cognate_tvm.space import LOOPS
from toy_space import ToyAccelSpace, ToySpace, real_spaces

ROWS, COLS, FEAT = 1000, 800, 64


SPACES = [ToySpace("spmm"), ToyAccelSpace("spmm"), *real_spaces(("spmm", "sddmm"))]


@pytest.mark.parametrize("kind", mapper.MAPPER_KINDS)
@pytest.mark.parametrize("space", SPACES, ids=repr)
def test_every_config_maps(kind, space):
    m = mapper.create(kind)
    configs = space.configs()
    shared, knobs = m(space, configs, rows=ROWS, cols=COLS, feat=FEAT)
    assert shared.shape == (len(configs), mapper.SHARED_WIDTH) and shared.dtype == np.float32
    assert knobs.shape == (len(configs), m.knob_width(space))
    assert np.all(np.isfinite(shared)) and np.all(np.isfinite(knobs))
    if kind != "none":
        omega = shared[:, mapper.N_FIELDS:].reshape(-1, 6, 6)
        assert np.all(omega.sum(1) == 1) and np.all(omega.sum(2) == 1)  # still permutation matrices


def test_standard_is_identity_on_cpu_like_space():
    space = ToySpace("spmm")
    configs = space.configs()
    shared = mapper.create("standard").shared(space, configs, rows=ROWS, cols=COLS, feat=FEAT)
    n = mapper.N_FIELDS
    for row, c in zip(shared, configs):
        k, j = math.log2(c.k), math.log2(min(c.j, FEAT))
        assert row[:n].tolist() == pytest.approx([math.log2(c.i), k, j, k - math.log2(COLS), j - math.log2(FEAT)])
        order = [LOOPS[int(np.argmax(r))] for r in row[n:].reshape(6, 6)]
        expected = space.shared_coords(c, rows=ROWS, cols=COLS, feat=FEAT).canonical(cols=COLS, feat=FEAT)
        assert tuple(order) == expected.loop_order


@pytest.mark.parametrize("space", [s for s in SPACES if s.platform == "cpu"] or
                         [pytest.param(None, marks=pytest.mark.skip(reason="space/cpu.py not written yet"))])
def test_standard_is_identity_on_real_cpu_space(space):
    configs = space.sample(2000, seed=0)
    shared = mapper.create("standard").shared(space, configs, rows=ROWS, cols=COLS, feat=FEAT)
    n = mapper.N_FIELDS
    for row, c in zip(shared, configs):
        coords = space.shared_coords(c, rows=ROWS, cols=COLS, feat=FEAT)
        assert row[:3].tolist() == pytest.approx([coords.log2_i, coords.log2_k, coords.log2_j])
        assert np.array_equal(row[n:].reshape(6, 6), coords.canonical(cols=COLS, feat=FEAT).omega())


def test_random_permutation_is_seeded_and_consistent():
    space = ToyAccelSpace("spmm")
    configs = space.configs()
    std = mapper.create("standard").shared(space, configs, rows=ROWS, cols=COLS, feat=FEAT)
    a = mapper.create("random", seed=3)
    b = mapper.create("random", seed=3)
    shuffled = a.shared(space, configs, rows=ROWS, cols=COLS, feat=FEAT)
    assert np.array_equal(shuffled, b.shared(space, configs, rows=ROWS, cols=COLS, feat=FEAT))
    assert not np.array_equal(shuffled, std)
    # same information, moved: the fields are a permutation of the standard ones
    n = mapper.N_FIELDS
    assert np.array_equal(shuffled[:, a.field_perm], std[:, :n])
    omega_std = std[:, n:].reshape(-1, 6, 6)
    omega_shuf = shuffled[:, n:].reshape(-1, 6, 6)
    assert np.array_equal(omega_shuf[:, :, a.loop_perm], omega_std)
    other = mapper.create("random", seed=4)
    assert not (np.array_equal(other.field_perm, a.field_perm) and np.array_equal(other.loop_perm, a.loop_perm))


def test_no_mapper_pads_raw_fields():
    space = ToySpace("spmm")
    c = space.configs()[5]
    row = mapper.create("none").shared(space, [c], rows=ROWS, cols=COLS, feat=FEAT)[0]
    # sorted fields: i, j, k, order (6 strings), parallel, unroll -> 11 numbers, then zeros
    assert row[0] == pytest.approx(math.log2(1 + c.i)) and row[2] == pytest.approx(math.log2(1 + c.k))
    assert np.all(row[11:] == 0) and np.any(row[3:9] != 0)
    assert mapper.create("none").knob_width(space) == 0
    distinct = mapper.create("none").shared(space, space.configs(), rows=ROWS, cols=COLS, feat=FEAT)
    assert len(np.unique(distinct, axis=0)) == len(space.configs())


def test_factory_and_round_trip():
    with pytest.raises(UnknownKindError, match="unknown mapper 'magic'"):
        mapper.create("magic")
    m = mapper.create("random", seed=7)
    assert mapper.create(m) is m
    again = mapper.from_dict(m.to_dict())
    assert np.array_equal(again.field_perm, m.field_perm) and np.array_equal(again.loop_perm, m.loop_perm)
