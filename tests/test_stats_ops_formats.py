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
