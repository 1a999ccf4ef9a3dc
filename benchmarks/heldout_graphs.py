"""Write large matrices from generators that no training corpus uses, for judging `tune` off its corpora.

    python benchmarks/heldout_graphs.py --out DIR
    python benchmarks/tune_eval.py --threads 2 --corpus DIR --beside-budget 0 --out OUT

The training corpora come from the project's own generators (`matrix.generators`,
`matrix.realistic`), so a held-out split of them shares their families. These matrices come from
networkx's random-graph models and pyamg's elasticity gallery instead, at sizes where B (N = 128,
float32) does not fit a 32 MB L3 cache (at --scale 1):

- barabasi_albert: preferential attachment, 150k nodes, 6 edges per new node, numbered by arrival
  (hubs first);
- barabasi_albert_shuffled: the same graph numbered at random;
- watts_strogatz: a ring lattice of 200k nodes and degree 10 with 20% of the edges rewired;
- random_geometric: 120k points in the unit square joined within a radius that gives degree 12,
  numbered in the random order of the points;
- powerlaw_cluster: Holme-Kim power-law graph with triangles, 100k nodes;
- elasticity_2d: pyamg's 2-D linear elasticity (Q1, 300 x 300 elements).

Each is written as `<name>.npz` (scipy), float32 values of 1 for the graphs. The seeds are fixed.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import scipy.sparse as sp
from tqdm import tqdm

from cognate_tvm.matrix import as_csr

SEED = 5


def _graph_matrix(graph: nx.Graph) -> sp.csr_matrix:
    return nx.to_scipy_sparse_array(graph, nodelist=range(graph.number_of_nodes()), dtype=np.float32,
                                    format="csr")


def _shuffled(matrix: sp.csr_matrix, seed: int) -> sp.csr_matrix:
    order = np.random.default_rng(seed).permutation(matrix.shape[0])
    return matrix[order][:, order].tocsr()


def _elasticity(side: int) -> sp.csr_matrix:
    from pyamg.gallery import linear_elasticity
    return linear_elasticity((side, side), format="csr")[0].astype(np.float32)


def _random_geometric(nodes: int) -> sp.csr_matrix:
    radius = math.sqrt(12.0 / (math.pi * nodes))
    return _graph_matrix(nx.random_geometric_graph(nodes, radius, seed=SEED))


def _size(rows: int, scale: float) -> int:
    return max(16, int(rows * scale))


# name -> the matrix at a size scale
MAKERS = {
    "barabasi_albert": lambda scale: _graph_matrix(nx.barabasi_albert_graph(_size(150_000, scale), 6, seed=SEED)),
    "barabasi_albert_shuffled": lambda scale: _shuffled(build("barabasi_albert", scale), SEED),
    "watts_strogatz": lambda scale: _graph_matrix(nx.watts_strogatz_graph(_size(200_000, scale), 10, 0.2, seed=SEED)),
    "random_geometric": lambda scale: _random_geometric(_size(120_000, scale)),
    "powerlaw_cluster": lambda scale: _graph_matrix(nx.powerlaw_cluster_graph(_size(100_000, scale), 5, 0.3,
                                                                               seed=SEED)),
    "elasticity_2d": lambda scale: _elasticity(max(4, int(300 * math.sqrt(scale)))),
}
NAMES = tuple(MAKERS)


def build(name: str, scale: float = 1.0) -> sp.csr_matrix:
    """The matrix `name` with its size times `scale`, as canonical CSR."""
    if name not in MAKERS:
        raise ValueError(f"unknown held-out matrix {name!r}; known: {', '.join(NAMES)}")
    return as_csr(MAKERS[name](scale), name=name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the .npz files")
    parser.add_argument("--matrices", nargs="+", choices=NAMES, default=list(NAMES))
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every matrix's size")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in tqdm(args.matrices, desc="held-out matrices"):
        matrix = build(name, args.scale)
        sp.save_npz(args.out / f"{name}.npz", matrix)
        tqdm.write(f"{name}: {matrix.shape[0]} x {matrix.shape[1]}, {matrix.nnz} nonzeros")
    return 0


if __name__ == "__main__":
    sys.exit(main())
