"""Realistic generator families: FEM-like block rows, community graphs, dense rows; their corpus spec."""
import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm.errors import UnknownKindError
from cognate_tvm.matrix import FAMILIES, generate_corpus
from cognate_tvm.matrix.corpus import CorpusSpecError, load_corpus
from cognate_tvm.matrix.realistic import REALISTIC_FAMILIES, generate_realistic, realistic_corpus


@pytest.mark.parametrize("family", sorted(REALISTIC_FAMILIES))
def test_each_family_is_deterministic_square_and_near_its_size(family):
    a, b = generate_realistic(family, 3000, seed=5), generate_realistic(family, 3000, seed=5)
    assert isinstance(a, sp.csr_matrix) and a.shape[0] == a.shape[1]
    assert 0.9 * 3000 <= a.shape[0] <= 3000 and a.nnz > a.shape[0]
    assert (a != b).nnz == 0 and (a != generate_realistic(family, 3000, seed=6)).nnz > 0
    if family != "dense_rows":  # graphs and meshes: structurally symmetric
        pattern = a.astype(bool)
        assert (pattern != pattern.T).nnz == 0


def _row(m, i):
    return m.indices[m.indptr[i]:m.indptr[i + 1]]


def test_fem_blocks_have_block_rows_and_mesh_degrees():
    sizes = set()
    for seed in range(10):
        m = generate_realistic("fem_blocks", 2000, seed=seed)
        block = 1 + next(n for n in range(3) if not np.array_equal(_row(m, n), _row(m, n + 1)))
        degree = np.diff(m.indptr)
        # b rows per mesh node, each touching b columns per neighbour: degrees are multiples of b
        assert np.all(degree % block == 0) and degree.max() <= block * 40
        sizes.add(block)
    assert {2, 3} <= sizes


def test_community_degrees_are_heavy_tailed_and_dense_rows_exist():
    graph = generate_realistic("community", 20000, seed=1)
    degree = np.diff(graph.indptr)
    assert degree.max() > 20 * np.median(degree)
    dense = generate_realistic("dense_rows", 20000, seed=2)
    row_nnz = np.diff(dense.indptr)
    assert row_nnz.max() > 0.05 * dense.shape[1] and np.median(row_nnz) < 40
    base_like = np.sort(row_nnz)[: int(0.99 * row_nnz.size)].sum()
    assert dense.nnz - base_like <= 2.5 * base_like  # the dense rows and columns stay within the base's size


def test_realistic_corpus_and_spec_leave_the_synthetic_corpus_as_it_was():
    entries = realistic_corpus(6, seed=3, min_rows=500, max_rows=2000)
    assert [e.family for e in entries] == list(REALISTIC_FAMILIES) * 2
    assert all(500 <= e.rows <= 2000 for e in entries) and len({e.name for e in entries}) == 6
    assert [e.name for e in load_corpus("realistic:6:3", min_rows=500, max_rows=2000)] == [e.name for e in entries]
    assert load_corpus("synthetic:5:3", min_rows=500, max_rows=2000) == generate_corpus(5, seed=3, min_rows=500,
                                                                                          max_rows=2000)
    assert not set(REALISTIC_FAMILIES) & set(FAMILIES)
    with pytest.raises(CorpusSpecError, match="expected 'realistic:N'"):
        load_corpus("realistic:x")
    with pytest.raises(UnknownKindError, match="unknown realistic matrix family 'mesh'"):
        generate_realistic("mesh", 100, seed=0)
    with pytest.raises(ValueError, match="rows must be in"):
        generate_realistic("community", 4, seed=0)
