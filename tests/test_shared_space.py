"""Transfer needs overlap: every target platform's mapped configs fall inside the CPU space.

For each target platform (SPADE, GPU), op and matrix shape, the standard mapping
of its whole space must (1) lie inside the per-field ranges of the CPU space's
mapped coordinates and (2) have at least 90% of its distinct mapped coordinates
(size fields and canonical loop order) occur exactly among the CPU's.
Shapes stay at or below MAX_PANELS x 2048 columns, where the CPU space reaches
SPADE's narrowest column panel (wider matrices widen the CPU panels: see
docs/cpu_space.md).
"""
import numpy as np
import pytest

from cognate_tvm import mapper, space
from cognate_tvm.space.cpu import MAX_PANELS

SHAPES = [(1000, 1000), (5000, 3000), (20000, 20000), (60000, 60000), (4000, 2048 * MAX_PANELS)]
FEATS = [32, 128]
TARGETS = [p for p in space.PLATFORMS if p != "cpu"]


def _cpu_distinct(op: str, rows: int, cols: int, feat: int) -> np.ndarray:
    cpu = space.create("cpu", op)
    # Knobs do not enter the shared coordinates: one config per (I, K, J, order) suffices.
    seen, configs = set(), []
    for c in cpu.configs():
        key = (c.i_tile, c.panel_width(cols), c.dense_tile(feat), c.loop_order)
        if key not in seen:
            seen.add(key)
            configs.append(c)
    return np.unique(mapper.create("standard").shared(cpu, configs, rows=rows, cols=cols, feat=feat), axis=0)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@pytest.mark.parametrize("platform", TARGETS)
def test_target_coordinates_are_covered_by_cpu(platform, op):
    target = space.create(platform, op)
    std = mapper.create("standard")
    for rows, cols in SHAPES:
        for feat in FEATS:
            cpu_rows = _cpu_distinct(op, rows, cols, feat)
            mapped = np.unique(std.shared(target, target.configs(), rows=rows, cols=cols, feat=feat), axis=0)
            lo, hi = cpu_rows[:, :mapper.N_FIELDS].min(0), cpu_rows[:, :mapper.N_FIELDS].max(0)
            fields = mapped[:, :mapper.N_FIELDS]
            outside = ~np.all((fields >= lo - 1e-6) & (fields <= hi + 1e-6), axis=1)
            assert not outside.any(), (f"{platform}/{op} at {rows}x{cols}, N={feat}: mapped fields "
                                       f"{fields[outside][:3].tolist()} outside CPU ranges {lo}..{hi}")
            cpu_set = {row.tobytes() for row in cpu_rows}
            exact = np.mean([row.tobytes() in cpu_set for row in mapped])
            assert exact >= 0.9, f"{platform}/{op} at {rows}x{cols}, N={feat}: only {exact:.0%} exact"


def test_cpu_orders_include_every_target_order():
    from cognate_tvm.space.cpu import PANEL_ORDERS

    for platform in TARGETS:
        for op in ("spmm", "sddmm"):
            target = space.create(platform, op)
            orders = {target.shared_coords(c, rows=4096, cols=4096, feat=128).loop_order
                      for c in target.configs()}
            assert orders <= set(PANEL_ORDERS), f"{platform}/{op}: {orders - set(PANEL_ORDERS)}"


def test_sample_covering_covers_every_knob_value():
    cpu = space.create("cpu", "spmm")
    sample = cpu.sample_covering(100, seed=3)
    assert len(set(sample)) == 100
    for n, name in enumerate(type(sample[0]).__dataclass_fields__):
        every = {c.to_json_values()[n] for c in cpu.configs()}
        assert {c.to_json_values()[n] for c in sample} == every, name
    assert sample == cpu.sample_covering(100, seed=3) and sample != cpu.sample_covering(100, seed=4)
