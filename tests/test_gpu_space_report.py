"""benchmarks/gpu_space_report.py: best plain vs chunked schedule and the HBM floor, by hand."""
from __future__ import annotations

import json

import pandas as pd
import pytest

import gpu_space_report
from gpu_check import HBM_BYTES_PER_S


def _frame() -> pd.DataFrame:
    plain = json.dumps({"parts": 1, "rows_per_block": 4, "tx": 32, "vec": 1, "bucketing": False, "atomics": False})
    chunked = json.dumps({"parts": 1, "rows_per_block": 8, "tx": 8, "vec": 4, "bucketing": False, "atomics": False,
                          "chunk": 32, "swizzle": True, "cache": True, "cols_per_thread": 2})
    base = {"matrix": "rmat_a", "rows": 1000, "cols": 1000, "nnz": 2_000_000, "op": "spmm", "feat": 128}
    return pd.DataFrame([{**base, "config": plain, "time_ms": 0.4},
                         {**base, "config": chunked, "time_ms": 0.1},
                         {**base, "config": chunked.replace("32", "128"), "time_ms": None}])


def test_rows_by_hand():
    (row,) = gpu_space_report.matrix_rows(_frame())
    assert row["configs"] == 2  # the failed (None) timing is not a config that ran
    assert row["chunked_gain"] == pytest.approx(4.0)
    moved = 4 * 1001 + 8 * 2_000_000 + 4 * 128 * 2000  # indptr + (index, value) per nonzero + B and C
    assert row["floor_fraction"] == pytest.approx(1e3 * moved / HBM_BYTES_PER_S / 0.1)
    totals = gpu_space_report.summary([row])
    assert totals["spmm"]["chunked_gain_rmat"] == pytest.approx(4.0)
    assert totals["spmm"]["floor_fraction_1m_max"] == pytest.approx(row["floor_fraction"])
