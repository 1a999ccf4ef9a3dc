"""Nonzero-balanced row ranges (the `balanced` knob): each thread takes one contiguous range of row tiles
holding an equal share of the nonzeros, found in the kernel by binary search on the row pointers.

Every balanced config must write every output row exactly as scipy does, also where the split falls on
empty rows (leading, trailing, all rows empty), on one nonzero, and on a power-law matrix whose first
rows hold most nonzeros.
"""
import dataclasses

import numpy as np
import pytest

from cognate_tvm.backends.cpu import LLVMBackend
from cognate_tvm.ops import get_op
from cognate_tvm.space.cpu import PANEL_ORDERS, CPUSpace

from conftest import skewed_matrices, wrong_outputs


def _sample(op, count, seed):
    """`count` balanced plain-CSR configs (the column-panel ones: `_panel_twins`)."""
    balanced = [c for c in CPUSpace(op).configs() if c.balanced and c.single_panel]
    picks = np.random.default_rng(seed).choice(len(balanced), count, replace=False)
    return [balanced[i] for i in picks]


def test_balanced_twins_of_contiguous_configs():
    space = CPUSpace("spmm")
    configs = [c for c in space.configs() if not c.stream]  # the stream twins come after (test_cpu_stream)
    balanced = [c for c in configs if c.balanced]
    contiguous = [c for c in configs if c.parallel and c.chunk == 0 and not c.balanced]
    assert {dataclasses.replace(c, balanced=False) for c in balanced} == set(contiguous)
    assert all(c.chunk == 0 and "balanced" in c.to_json() for c in balanced)
    assert "balanced" not in contiguous[0].to_json()  # stored configs without the knob keep their form
    assert space.config_from_json(balanced[0].to_json()) == balanced[0]
    assert all(c.parallel for c in balanced)
    assert any(c.block_rows > 1 for c in balanced)  # register blocks split by nonzeros too
    assert configs[:len(configs) - len(balanced)] == [c for c in configs if not c.balanced]  # appended
    # the plain-CSR twins come first, so the configs stored before the panel twins keep their places
    panels = [c.single_panel for c in balanced]
    assert panels == sorted(panels, reverse=True) and not all(panels)
    assert all(c in space.candidates(2) and c not in space.candidates(1) for c in balanced[::300])


def _panel_twins(op, seed):
    """One balanced column-panel config per (loop order, panels by count or by width): the nest cuts
    each panel's share where the panel loop is outside the row loop, all panels' share where inside."""
    configs = [c for c in CPUSpace(op).configs() if c.balanced and not c.single_panel]
    chosen = {}
    for i in np.random.default_rng(seed).permutation(len(configs)):
        chosen.setdefault((tuple(configs[i].loop_order), configs[i].k_panel > 0), configs[i])
    return list(chosen.values())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_balanced_configs_match_scipy(op, dtype):
    op = get_op(op)
    backend = LLVMBackend(num_threads=2, cache_dir=None, repeats=1, warmup=0, min_seconds=0.0, dtype=dtype)
    configs = _sample(op, 10, seed=1) + _panel_twins(op, seed=1)[::3]
    if op.name == "spmm":
        blocked = [c for c in CPUSpace(op).configs() if c.balanced and c.block_rows > 1]
        configs.append(blocked[len(blocked) // 2])
    failures = wrong_outputs(backend, op, configs)
    assert not failures, failures[:3]


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_balanced_panel_configs_match_scipy(op):
    """Every panel order, cut per panel and over all panels, on the usual edge cases and skewed rows."""
    op = get_op(op)
    backend = LLVMBackend(num_threads=2, cache_dir=None, repeats=1, warmup=0, min_seconds=0.0)
    configs = _panel_twins(op, seed=2)
    assert len(configs) == 2 * len(PANEL_ORDERS)  # every panel order, by count and by width
    failures = wrong_outputs(backend, op, configs)
    assert not failures, failures[:3]


def _panel_config(order):
    return dataclasses.replace(CPUSpace("spmm").baseline(), k_parts=4, loop_order=PANEL_ORDERS[order], i_tile=2,
                               balanced=True)


# plain CSR; panels outside the row loop (a share per panel); panels inside it (a share of all panels)
@pytest.mark.parametrize("make", [lambda: _sample("spmm", 1, seed=2)[0], lambda: _panel_config(3),
                                  lambda: _panel_config(0)], ids=["plain_csr", "per_panel", "all_panels"])
def test_balanced_and_contiguous_agree_on_three_threads(make):
    """More workers than the two the tests usually run: every row is still written once."""
    config = make()
    CPUSpace("spmm").check(config)
    backend = LLVMBackend(num_threads=3, cache_dir=None, repeats=1, warmup=0, min_seconds=0.0)
    matrix = skewed_matrices()["heavy_first_rows"]
    dense = get_op("spmm").make_dense_inputs(matrix, 16, seed=0)
    balanced = backend.run("spmm", config, matrix, dense)
    contiguous = backend.run("spmm", dataclasses.replace(config, balanced=False), matrix, dense)
    np.testing.assert_allclose(balanced, contiguous, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(balanced, matrix @ dense[0], rtol=1e-4, atol=1e-4)
