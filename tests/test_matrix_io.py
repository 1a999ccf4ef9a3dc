import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm.errors import MatrixFormatError
from cognate_tvm.matrix import as_csr, load_matrix, save_matrix


def test_mtx_and_npz_round_trip(tmp_path, small_matrices):
    for name, matrix in small_matrices.items():
        for suffix in (".mtx", ".npz"):
            path = save_matrix(matrix, tmp_path / f"{name}{suffix}")
            loaded = load_matrix(path)
            assert loaded.shape == matrix.shape
            assert (loaded != matrix).nnz == 0
            assert loaded.dtype == np.float32 and loaded.indices.dtype == np.int32


def test_edge_list(tmp_path):
    path = tmp_path / "graph.el"
    path.write_text("# comment\n0 1\n1 2 0.5\n\n3 0 2\n")
    m = load_matrix(path)
    assert m.shape == (4, 3)
    assert m[1, 2] == pytest.approx(0.5) and m[0, 1] == 1.0 and m[3, 0] == 2.0


def test_canonical_form_sums_duplicates_and_sorts():
    coo = sp.coo_matrix(([1.0, 2.0, 3.0], ([0, 0, 1], [2, 2, 0])), shape=(2, 3))
    csr = as_csr(coo)
    assert csr.nnz == 2 and csr[0, 2] == 3.0 and csr.has_sorted_indices


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.mtx"):
        load_matrix(tmp_path / "nothere.mtx")


@pytest.mark.parametrize("body, problem", [
    ("%%MatrixMarket matrix coordinate real general\n3 3\n1 1 1.0\n", "header"),
    ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n", "truncated"),
    ("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 abc\n", "non-numeric"),
    ("%%MatrixMarket matrix coordinate real general\n3 3 1\n9 1 1.0\n", "index out of range"),
    ("not a matrix market file\n", "no banner"),
])
def test_malformed_mtx(tmp_path, body, problem):
    path = tmp_path / "bad.mtx"
    path.write_text(body)
    with pytest.raises(MatrixFormatError, match="bad.mtx"):
        load_matrix(path)


def test_nan_values_rejected(tmp_path):
    path = tmp_path / "nan.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 nan\n2 2 1.0\n")
    with pytest.raises(MatrixFormatError, match="non-finite"):
        load_matrix(path)
    with pytest.raises(MatrixFormatError, match="non-finite"):
        as_csr(np.array([[np.inf, 0.0]]))


def test_bad_edge_list_and_suffix(tmp_path):
    bad = tmp_path / "g.txt"
    bad.write_text("0 1\nx y\n")
    with pytest.raises(MatrixFormatError, match="g.txt:2: non-numeric"):
        load_matrix(bad)
    other = tmp_path / "m.xyz"
    other.write_text("1")
    with pytest.raises(MatrixFormatError, match="unknown matrix file type"):
        load_matrix(other)
    npz = tmp_path / "fake.npz"
    npz.write_bytes(b"not a zip")
    with pytest.raises(MatrixFormatError, match="fake.npz"):
        load_matrix(npz)


def test_save_never_leaves_partial_file(tmp_path, small_matrices):
    target = tmp_path / "keep.mtx"
    save_matrix(small_matrices["tall"], target)
    before = target.read_bytes()
    with pytest.raises(MatrixFormatError):
        save_matrix(np.array([[np.nan]]), target)  # rejected before anything is written
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.mtx"]
