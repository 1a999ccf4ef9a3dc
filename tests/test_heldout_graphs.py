"""benchmarks/heldout_graphs.py: matrices from generators no training corpus uses, read back as a corpus."""
from __future__ import annotations

import numpy as np
import pytest

from benchmark_loader import load_benchmark
from cognate_tvm.matrix.corpus import load_corpus


@pytest.fixture(scope="module")
def heldout():
    return load_benchmark("heldout_graphs")


def test_written_matrices_load_as_a_corpus(heldout, tmp_path):
    assert heldout.main(["--out", str(tmp_path), "--scale", "0.005"]) == 0
    entries = load_corpus(tmp_path)
    assert sorted(entry.name for entry in entries) == sorted(heldout.NAMES)
    for entry in entries:
        matrix = entry.build()
        assert matrix.shape[0] == matrix.shape[1] and matrix.nnz > 0, entry.name
        assert np.isfinite(matrix.data).all(), entry.name
        # every family here is an undirected graph or a symmetric stiffness matrix
        assert abs(matrix - matrix.T).max() < 1e-4 * abs(matrix).max(), entry.name


def test_shuffled_graph_is_the_same_graph_renumbered(heldout):
    graph = heldout.build("barabasi_albert", 0.01)
    shuffled = heldout.build("barabasi_albert_shuffled", 0.01)
    assert shuffled.nnz == graph.nnz
    assert sorted(np.diff(shuffled.indptr)) == sorted(np.diff(graph.indptr))
    assert (shuffled != graph).nnz > 0  # renumbered, not the identity
    # hubs come first in arrival order and anywhere once shuffled
    assert np.argmax(np.diff(graph.indptr)) < graph.shape[0] // 10


def test_builds_are_deterministic_and_names_checked(heldout):
    first, second = heldout.build("watts_strogatz", 0.01), heldout.build("watts_strogatz", 0.01)
    assert (first != second).nnz == 0
    with pytest.raises(ValueError, match="unknown held-out matrix 'grid'"):
        heldout.build("grid")
