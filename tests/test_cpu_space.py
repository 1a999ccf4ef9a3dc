"""The CPU space: size, validity rules, JSON form, baseline, mapping to the shared space."""
import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from cognate_tvm.errors import InvalidConfigError
from cognate_tvm.space import LOOPS, create
from cognate_tvm.space.cpu import (CSR_ORDERS, MAX_PANELS, PANEL_ORDERS, CPUConfig, CPUSpace)


@pytest.fixture(params=["spmm", "sddmm"])
def space(request) -> CPUSpace:
    return create("cpu", request.param)


def test_size_and_validity(space):
    configs = space.configs()
    assert len(configs) >= 200
    assert len(set(configs)) == len(configs)
    for config in configs:
        space.check(config)
    assert space.baseline() in configs


def test_json_round_trip(space):
    for config in space.sample(50, seed=3):
        assert space.config_from_json(config.to_json()) == config
    assert json.loads(space.baseline().to_json())["loop_order"] == list(space.baseline().loop_order)


def test_baseline_is_row_parallel_vectorized_csr(space):
    base = space.baseline()
    assert base.single_panel and base.parallel and base.vector > 1
    assert base.loop_order[0] == "i1" and base.loop_order[-1] == "j0"


@pytest.mark.parametrize("change, rule", [
    ({"i_tile": 3}, "i_tile 3"),
    ({"k_panel": 1000}, "k_panel 1000"),
    ({"j_tile": 24}, "j_tile 24"),
    ({"loop_order": ("k0", "i1", "i0", "k1", "j1", "j0")}, "loop order"),
    ({"loop_order": PANEL_ORDERS[1]}, "plain-CSR orders"),  # with k_panel=0, only CSR_ORDERS
    ({"vector": 32}, "vector 32"),
    ({"k_parts": 3}, "k_parts 3"),
    ({"k_panel": 2048, "k_parts": 2, "loop_order": PANEL_ORDERS[0]}, "k_parts 2"),
    ({"j_tile": 8, "vector": 16}, "wider than the dense tile"),
    ({"loop_order": PANEL_ORDERS[7], "vector": 16}, "vector 16"),
    ({"j_tile": 16, "vector": 16, "unroll": True}, "unroll needs"),
    ({"parallel": False, "chunk": 4}, "chunk 4"),
    ({"chunk": 7}, "chunk 7"),
    ({"parallel": False, "balanced": True}, "balanced ranges need"),
    ({"chunk": 4, "balanced": True}, "balanced ranges need"),
])
def test_invalid_configs_name_the_rule(space, change, rule):
    fields = space.baseline().to_dict()
    fields.update(change)
    config = CPUConfig(**fields)
    with pytest.raises(InvalidConfigError, match=rule):
        space.check(config)
    assert not space.is_valid(config)


def test_balanced_ranges_take_column_panels(space):
    fields = {**space.baseline().to_dict(), "k_parts": 2, "loop_order": PANEL_ORDERS[3], "balanced": True}
    space.check(CPUConfig(**fields))
    with pytest.raises(InvalidConfigError, match="balanced ranges need parallel and chunk 0"):
        space.check(CPUConfig(**{**fields, "chunk": 4}))


def test_check_rejects_foreign_config(space):
    with pytest.raises(InvalidConfigError, match="takes a CPUConfig"):
        space.check(object())


def test_orders_respect_loop_dependencies():
    for order in PANEL_ORDERS + CSR_ORDERS:
        assert sorted(order) == sorted(LOOPS)
        pos = {name: n for n, name in enumerate(order)}
        assert pos["i1"] < pos["i0"] < pos["k0"] and pos["k1"] < pos["k0"] and pos["j1"] < pos["j0"]
    assert len(set(PANEL_ORDERS)) == len(PANEL_ORDERS) and set(CSR_ORDERS) <= set(PANEL_ORDERS)
    # with k1 removed, the CSR orders are distinct programs and cover every panel order
    without_k1 = {tuple(n for n in o if n != "k1") for o in PANEL_ORDERS}
    assert {tuple(n for n in o if n != "k1") for o in CSR_ORDERS} == without_k1
    assert len(CSR_ORDERS) == len(without_k1)


def test_shared_coords_are_the_identity(space):
    for config in space.sample(80, seed=1):
        coords = space.shared_coords(config, rows=5000, cols=3000, feat=128)
        assert coords.log2_i == math.log2(config.i_tile)
        assert coords.log2_j == math.log2(config.j_tile)  # feat 128 >= every J
        width = -(-3000 // config.k_parts) if config.k_panel == 0 else min(3000, config.k_panel)
        assert coords.log2_k == pytest.approx(math.log2(width))
        assert coords.loop_order == config.loop_order
        assert coords.omega().sum() == 6


def test_platform_knobs(space):
    knobs = space.knob_matrix()
    assert knobs.shape == (len(space), len(space.knob_names)) and knobs.dtype == np.float32
    base = space.platform_knobs(space.baseline())
    # log2(16) lanes, no unroll, parallel, contiguous, one row per block, ranges of equal rows, ordinary stores
    assert base.tolist() == [4.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert space.platform_knobs(dataclasses.replace(space.baseline(), balanced=True))[-2] == 1.0
    assert len(np.unique(knobs, axis=0)) > 4


def test_panel_width_is_capped_and_dense_tile_clipped():
    config = CPUSpace("spmm").baseline()
    panels = CPUConfig(**{**config.to_dict(), "k_panel": 2048, "loop_order": PANEL_ORDERS[0]})
    assert panels.panel_width(1000) == 1000          # one panel when the matrix is narrower
    assert panels.panel_width(10_000) == 2048
    wide = 2048 * MAX_PANELS * 3
    assert -(-wide // panels.panel_width(wide)) <= MAX_PANELS
    assert config.panel_width(12345) == 12345        # plain CSR
    parts = CPUConfig(**{**config.to_dict(), "k_parts": 8, "loop_order": PANEL_ORDERS[0]})
    assert parts.panel_width(12345) == 1544 and not parts.single_panel
    assert config.dense_tile(20) == 32 and config.padded_width(20) == 32   # J clipped to 20 -> 2 vectors
    assert config.dense_tile(300) == 128 and config.padded_width(300) == 384
    scalar = CPUConfig(**{**config.to_dict(), "loop_order": PANEL_ORDERS[7], "vector": 1})
    assert scalar.dense_tile(20) == 20 and scalar.padded_width(20) == 20


def test_space_imports_without_torch_or_tvm():
    code = ("import sys; import cognate_tvm.space.cpu as s; s.CPUSpace('spmm').configs(); "
            "print(sorted(m for m in ('torch', 'tvm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_candidates_follow_the_thread_count(space):
    serial, parallel = space.candidates(1), space.candidates(4)
    assert serial and all(not c.parallel and c.chunk == 0 for c in serial)
    assert parallel and all(c.parallel for c in parallel)
    assert sorted(map(str, serial + parallel)) == sorted(map(str, space.configs()))
    assert space.candidates(None) == space.configs()
    spade = create("spade", space.op.name)
    assert spade.candidates(4) == spade.configs()  # no thread knob: nothing narrows
