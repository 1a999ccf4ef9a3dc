import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm.errors import ShapeError, UnknownKindError
from cognate_tvm.formats import column_panels
from cognate_tvm.matrix import as_csr, matrix_stats
from cognate_tvm.ops import SDDMM, SPMM, get_op


def test_stats_by_hand():
    m = as_csr(np.array([[1, 0, 0, 2], [0, 0, 0, 0], [0, 3, 4, 0]], dtype=float))
    s = matrix_stats(m)
    assert (s.rows, s.cols, s.nnz, s.empty_rows, s.row_len_max) == (3, 4, 4, 1, 2)
    assert s.row_len_mean == pytest.approx(4 / 3)
    assert s.bandwidth == 3 and s.diagonal_fraction == pytest.approx(0.5)  # (0,0) and (2,2)
    assert s.as_vector().shape == (10,)


def test_ops_reference_matches_dense():
    m = as_csr(sp.random_array((20, 30), density=0.2, rng=np.random.default_rng(0)))
    (b,) = SPMM.make_dense_inputs(m, 8)
    np.testing.assert_allclose(SPMM.reference(m, b), m.toarray() @ b, rtol=1e-5, atol=1e-5)
    x, y = SDDMM.make_dense_inputs(m, 8)
    dense = m.toarray() * (x @ y.T)
    np.testing.assert_allclose(SDDMM.reference(m, x, y), dense[m.nonzero()], rtol=1e-4, atol=1e-5)
    assert SPMM.flops(m.nnz, 8) == 2 * m.nnz * 8


def test_op_errors():
    with pytest.raises(UnknownKindError, match="unknown op 'spmv'"):
        get_op("spmv")
    m = as_csr(np.eye(4))
    with pytest.raises(ShapeError, match=r"\(5, 8\)"):
        SPMM.check_dense_inputs(m, [np.zeros((5, 8))], 8)
    SDDMM.check_dense_inputs(m, [np.zeros((4, 8)), np.zeros((4, 8))], 8)


def _column_panels_reference(m: sp.csr_matrix, width: int):
    """Slow but obvious: slice each panel with scipy and concatenate."""
    panels = max(1, -(-m.shape[1] // width))
    ptrs, idx, val, offset = [], [], [], 0
    for p in range(panels):
        part = m[:, p * width:(p + 1) * width].tocsr()
        part.sort_indices()
        ptrs.append(part.indptr + offset)
        idx.append(part.indices + p * width)
        val.append(part.data)
        offset += part.nnz
    return np.stack(ptrs), np.concatenate(idx), np.concatenate(val)


@pytest.mark.parametrize("width", [1, 3, 16, 64, 10_000])
def test_column_panels_match_reference(small_matrices, width):
    for name, m in small_matrices.items():
        got = column_panels(m, width)
        ptr, idx, val = _column_panels_reference(m, width)
        assert got.panels == ptr.shape[0], name
        np.testing.assert_array_equal(got.indptr, ptr)
        np.testing.assert_array_equal(got.indices, idx)
        np.testing.assert_array_equal(got.data, val)


def test_column_panels_reject_bad_input():
    m = as_csr(np.eye(3))
    with pytest.raises(ValueError, match="width must be >= 1"):
        column_panels(m, 0)
    broken = sp.csr_matrix(m)
    broken.indices = broken.indices.copy()
    broken.indices[0] = 7
    with pytest.raises(ValueError, match="column index 7 out of range"):
        column_panels(broken, 2)


def test_hot_column_cover_by_hand():
    from cognate_tvm.matrix import hot_column_cover

    # column 2 holds 3 nonzeros, column 0 two (one of them a duplicate entry, summed), column 1 one
    m = sp.coo_matrix((np.ones(7), ([0, 1, 2, 0, 1, 1, 3], [2, 2, 2, 0, 0, 0, 1])), shape=(4, 4))
    assert hot_column_cover(m).tolist() == pytest.approx([0, 3 / 6, 5 / 6, 1, 1])
    assert hot_column_cover(sp.csr_matrix((3, 2))).tolist() == [0, 0, 0]


def test_locality_profile_by_hand():
    from cognate_tvm.matrix import LOCALITY_WIDTH, locality_profile
    from cognate_tvm.matrix.stats import COVER_LOG2, NEAR_LOG2, PANEL_HEIGHTS

    cover, panels = slice(0, len(COVER_LOG2)), slice(len(COVER_LOG2), len(COVER_LOG2) + len(PANEL_HEIGHTS))
    near = slice(len(COVER_LOG2) + len(PANEL_HEIGHTS), LOCALITY_WIDTH)
    # four nonzeros in four columns, each column used once: no reuse in any panel
    m = as_csr(np.array([[1, 0, 0, 2], [0, 0, 0, 0], [0, 3, 4, 0]], dtype=float))
    v = locality_profile(m)
    assert v.shape == (LOCALITY_WIDTH,) and v.dtype == np.float32
    assert np.allclose(v[cover], 1.0) and np.allclose(v[panels], 0.0) and np.allclose(v[near], 1.0)
    # one column read by 8 consecutive rows: panels of 4 rows see it twice, of 16 once
    col = as_csr(sp.csr_matrix((np.ones(8), (np.arange(8), np.zeros(8, dtype=int))), shape=(8, 2)))
    assert locality_profile(col)[panels].tolist() == [-2.0, -3.0, -3.0, -3.0]  # log2(2 / 8), log2(1 / 8)
    # 2^10 columns used 4 times each and 2^12 columns once: the 2^10 hottest hold half the nonzeros
    n = 1 << 12
    hot = np.repeat(np.arange(1 << 10), 4)
    rows = np.r_[np.arange(hot.size), np.arange(n)]
    cols = np.r_[hot, (1 << 10) + np.arange(n)]
    wide = as_csr(sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, (1 << 10) + n)))
    assert locality_profile(wide)[COVER_LOG2.index(10)] == pytest.approx(0.5)
    # a symmetric permutation keeps the column counts (cover) and scatters the off-diagonal nonzeros
    band = as_csr(sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(5000, 5000)))
    perm = np.random.default_rng(0).permutation(5000)
    shuffled = as_csr(band[perm][:, perm])
    a, b = locality_profile(band), locality_profile(shuffled)
    assert np.allclose(a[cover], b[cover]) and a[near][0] == 1.0 and b[near][0] < 0.4  # only the diagonal stays
    assert np.all(np.diff(a[cover]) >= 0)
    assert np.array_equal(locality_profile(sp.csr_matrix((3, 5))), np.zeros(LOCALITY_WIDTH, dtype=np.float32))


def test_locality_profile_sums_duplicates_without_changing_its_input():
    from cognate_tvm.matrix import locality_profile

    dup = sp.csc_matrix((np.ones(3), ([0, 0, 1], [0, 0, 1])), shape=(2, 2))  # (0, 0) twice
    before = (dup.data.copy(), dup.indices.copy(), dup.indptr.copy())
    assert np.array_equal(locality_profile(dup), locality_profile(sp.eye(2, format="csr")))
    assert all(np.array_equal(a, b) for a, b in zip(before, (dup.data, dup.indices, dup.indptr)))
