"""Realistic generator families: FEM-like block rows, community graphs, dense rows, scikit-fem
stiffness matrices, import-graph pieces; their corpus spec."""
import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm.errors import UnknownKindError
from cognate_tvm.matrix import FAMILIES, generate_corpus
from cognate_tvm.matrix.corpus import CorpusSpecError, load_corpus
from cognate_tvm.matrix.fem import fem_elasticity, fem_scalar
from cognate_tvm.matrix.import_graph import load_snapshot, python_import_graph, write_snapshot
from cognate_tvm.matrix.realistic import REALISTIC_FAMILIES, generate_realistic, realistic_corpus

# meshes come in whole cells: a scikit-fem matrix's size is within this factor of the asked one
MESH_SIZE_FACTOR = 1.6


@pytest.mark.parametrize("family", sorted(REALISTIC_FAMILIES))
def test_each_family_is_deterministic_square_and_near_its_size(family):
    a, b = generate_realistic(family, 3000, seed=5), generate_realistic(family, 3000, seed=5)
    assert isinstance(a, sp.csr_matrix) and a.shape[0] == a.shape[1]
    assert np.isfinite(a.data).all() and a.nnz > a.shape[0]
    low, high = (3000 / MESH_SIZE_FACTOR, 3000 * MESH_SIZE_FACTOR) if family.startswith("fem_") else (2700, 3000)
    assert low <= a.shape[0] <= high
    other = generate_realistic(family, 3000, seed=6)
    assert (a != b).nnz == 0 and (a.shape != other.shape or (a != other).nnz > 0)
    if family not in ("dense_rows", "import_graph"):  # graphs and meshes: structurally symmetric
        assert _structurally_symmetric(a)


def _structurally_symmetric(m) -> bool:
    """Stored entries (a stiffness matrix stores the zeros that cancel out) mirror across the diagonal."""
    pattern = sp.csr_matrix((np.ones(m.nnz), m.indices, m.indptr), shape=m.shape)
    return (pattern != pattern.T).nnz == 0


def test_fem_matrices_are_stiffness_matrices_of_several_elements():
    """Laplacian rows sum to zero (constants are in its kernel); elasticity rows come in blocks of 2 or 3."""
    degrees = set()
    for seed in range(6):
        scalar = fem_scalar(2000, np.random.default_rng(seed))
        assert np.allclose(np.asarray(scalar.sum(axis=1)).ravel(), 0, atol=1e-8 * abs(scalar).max())
        assert np.allclose((scalar - scalar.T).data, 0, atol=1e-9 * abs(scalar).max())
        degrees.add(int(np.median(np.diff(scalar.indptr))))
    assert len(degrees) >= 3  # different elements and dimensions: different row lengths
    blocks = set()
    for seed in range(6):
        rng = np.random.default_rng(seed)
        elastic = fem_elasticity(2000, rng)
        assert np.isfinite(elastic.data).all() and (elastic.diagonal() > 0).all()
        assert _structurally_symmetric(elastic)
        # unknowns sit node by node: every row length is a multiple of the unknowns per node
        blocks.add(int(np.gcd.reduce(np.diff(elastic.indptr))))
    assert all(b % 2 == 0 or b % 3 == 0 for b in blocks)


@pytest.mark.parametrize("source", ["this environment", "shipped snapshot"])
def test_import_graph_has_hub_columns(source):
    names, graph = python_import_graph() if source == "this environment" else load_snapshot()
    assert graph.shape == (len(names), len(names)) and len(names) > 1000 and list(names) == sorted(names)
    assert {"numpy", "typing", "json", "json.decoder"} <= set(names)
    imported = np.asarray(graph.sum(axis=0)).ravel()
    assert imported[names.index("typing")] > 0.05 * len(names)  # a hub column
    # json/__init__.py: `from .decoder import ...`, a relative import, resolved
    assert graph[names.index("json"), names.index("json.decoder")] == 1


def test_import_graph_pieces_come_from_the_snapshot_whatever_is_installed(monkeypatch):
    piece = generate_realistic("import_graph", 5000, seed=1)
    assert piece.shape == (5000, 5000) and np.all(piece.diagonal() == 1)
    # the environment's own graph is never read for a piece: a different installation builds the same
    def no_scan(*_):
        raise AssertionError("the running environment was scanned")
    monkeypatch.setattr("cognate_tvm.matrix.import_graph.python_import_graph", no_scan)
    assert (generate_realistic("import_graph", 5000, seed=1) != piece).nnz == 0


def test_import_graph_snapshot_round_trip(tmp_path):
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from .core import run\nimport json\n")
    (root / "pkg" / "core.py").write_text("import os, json.decoder\nfrom . import util\n")
    (root / "pkg" / "util.py").write_text("")
    path = write_snapshot(tmp_path / "graph.npz", roots=(str(root),))
    names, graph = load_snapshot(path)
    # json.decoder is no module under the root: its import points at json; `from . import util` at pkg
    assert names == ("json", "os", "pkg", "pkg.core", "pkg.util")
    edges = {(names[i], names[j]) for i, j in zip(*graph.nonzero())}
    assert edges == {("pkg", "pkg.core"), ("pkg", "json"), ("pkg.core", "os"), ("pkg.core", "json"),
                     ("pkg.core", "pkg")}


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
    assert [e.family for e in entries] == list(REALISTIC_FAMILIES)
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


def test_a_spec_with_its_row_range_names_the_same_matrices_whatever_the_callers_range():
    ranged = load_corpus("realistic:5:7:600-900", min_rows=1000, max_rows=1_000_000)
    assert [e.name for e in ranged] == [e.name for e in realistic_corpus(5, seed=7, min_rows=600, max_rows=900)]
    assert all(600 <= e.rows <= 900 for e in ranged)
    assert [e.name for e in load_corpus("synthetic:4:1:600-900")] == \
        [e.name for e in generate_corpus(4, seed=1, min_rows=600, max_rows=900)]
    with pytest.raises(CorpusSpecError, match="MIN-MAX"):
        load_corpus("realistic:5:7:900")
