"""CSR -> ELL buckets (C++) against a numpy reference."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm.formats import ColumnPanelCSR, column_panels, ell_buckets
from cognate_tvm.matrix import as_csr


def _matrix(rows: int, cols: int, seed: int) -> sp.csr_matrix:
    """Rows of very different lengths (0 up to ~3 * cols / 4), some empty."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.choice([0, 1, 2, 3, 5, 9, 17, 40, cols * 3 // 4], size=rows), cols)
    row_ids = np.repeat(np.arange(rows), lengths)
    col_ids = np.concatenate([rng.choice(cols, size=n, replace=False) for n in lengths])
    vals = rng.standard_normal(row_ids.size).astype(np.float32)
    return as_csr(sp.coo_matrix((vals, (row_ids, col_ids)), shape=(rows, cols)))


def _reference(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, num_buckets: int):
    """Pure numpy version of the bucket layout, bucket by bucket."""
    indptr = indptr.reshape(-1, indptr.shape[-1])
    buckets = [[] for _ in range(num_buckets)]
    rest = []
    for panel in indptr:
        for i in range(panel.size - 1):
            lo, hi = int(panel[i]), int(panel[i + 1])
            if hi == lo:
                continue
            b = int(np.ceil(np.log2(hi - lo)))
            (buckets[b] if b < num_buckets else rest).append((i, lo, hi))
    out = []
    for b, entries in enumerate(buckets):
        w = 1 << b
        rows = np.array([e[0] for e in entries], dtype=np.int32)
        cols = np.zeros((len(entries), w), np.int32)
        vals = np.zeros((len(entries), w), np.float32)
        pos = np.full((len(entries), w), -1, np.int32)
        for r, (_, lo, hi) in enumerate(entries):
            cols[r, :hi - lo] = indices[lo:hi]
            vals[r, :hi - lo] = data[lo:hi]
            pos[r, :hi - lo] = np.arange(lo, hi)
        out.append((rows, cols, vals, pos))
    return out, np.array(rest, dtype=np.int32).reshape(-1, 3)


@pytest.mark.parametrize("num_buckets", [1, 3, 6])
@pytest.mark.parametrize("panel_width", [None, 7, 64])
def test_matches_numpy_reference(num_buckets, panel_width):
    matrix = _matrix(rows=60, cols=50, seed=num_buckets)
    source = matrix if panel_width is None else column_panels(matrix, panel_width)
    ell = ell_buckets(source, num_buckets=num_buckets)
    buckets, rest = _reference(np.asarray(source.indptr), source.indices, source.data, num_buckets)
    assert ell.widths == tuple(1 << b for b in range(num_buckets))
    assert ell.counts.tolist() == [len(b[0]) for b in buckets]
    for b, expected in enumerate(buckets):
        for got, want in zip(ell.bucket(b), expected):
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.stack([ell.rest_rows, ell.rest_start, ell.rest_end], axis=1), rest)


@pytest.mark.parametrize("panel_width", [3, 1000])
def test_buckets_and_rest_reassemble_matrix(panel_width):
    matrix = _matrix(rows=45, cols=33, seed=7)
    panels = column_panels(matrix, panel_width)
    ell = ell_buckets(panels, num_buckets=4)
    rebuilt = np.zeros(matrix.shape, np.float64)
    for b in range(ell.num_buckets):
        rows, cols, vals, _ = ell.bucket(b)
        np.add.at(rebuilt, (np.repeat(rows, cols.shape[1]), cols.ravel()), vals.ravel())
    for row, lo, hi in zip(ell.rest_rows, ell.rest_start, ell.rest_end):
        np.add.at(rebuilt, (np.full(hi - lo, row), panels.indices[lo:hi]), panels.data[lo:hi])
    np.testing.assert_allclose(rebuilt, matrix.toarray(), rtol=0, atol=1e-6)
    # every source position appears exactly once, in a bucket slot or a remainder range
    seen = np.concatenate([ell.pos[ell.pos >= 0]] +
                          [np.arange(lo, hi) for lo, hi in zip(ell.rest_start, ell.rest_end)])
    np.testing.assert_array_equal(np.sort(seen), np.arange(matrix.nnz))


def test_empty_and_single_nonzero():
    empty = as_csr(sp.csr_matrix((5, 4), dtype=np.float32))
    ell = ell_buckets(empty, num_buckets=3)
    assert ell.counts.tolist() == [0, 0, 0] and ell.rows.size == 0 and ell.rest_rows.size == 0
    single = as_csr(sp.csr_matrix(([2.5], ([3], [1])), shape=(5, 4)))
    ell = ell_buckets(single, num_buckets=3)
    assert ell.counts.tolist() == [1, 0, 0]
    assert ell.rows.tolist() == [3] and ell.cols.tolist() == [1] and ell.vals.tolist() == [2.5]
    assert ell.pos.tolist() == [0]


def test_bad_arguments_raise():
    matrix = _matrix(rows=8, cols=8, seed=1)
    with pytest.raises(ValueError, match="num_buckets"):
        ell_buckets(matrix, num_buckets=0)
    broken = ColumnPanelCSR((2, 2), 2, np.array([[0, 3, 1]], np.int32), np.zeros(1, np.int32),
                            np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="panel 0, row 0"):
        ell_buckets(broken, num_buckets=2)
    with pytest.raises(IndexError, match="bucket 5"):
        ell_buckets(matrix, num_buckets=2).bucket(5)
