"""Node-classification graphs made offline, for the GNN examples and benchmark.

Two kinds, both seeded:

- ``community``: a planted partition: each node draws `degree` edges, each of
  which stays inside its community with probability `p_in`; features are the
  community's random centroid plus noise. A GCN can learn the labels.
- ``rmat``: the R-MAT power-law graph of :func:`cognate_tvm.matrix.generate`
  (the skewed degrees of real social and web graphs), labels drawn at random
  (for timing, not accuracy);
- ``social``: the realistic ``community`` family of
  :mod:`cognate_tvm.matrix.realistic` (power-law community sizes and degrees,
  edges to popular nodes), labels drawn at random (for timing).

Edges are made undirected, self-loops added, and the adjacency normalised as
GCN does: D^-1/2 (A + I) D^-1/2.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import UnknownKindError
from ..matrix import generate
from ..matrix.realistic import generate_realistic

GRAPHS = ("community", "rmat", "social")


@dataclass
class NodeGraph:
    """A graph with node features and labels; `adjacency` is GCN-normalised, float32 canonical CSR."""

    name: str
    adjacency: sp.csr_matrix
    features: torch.Tensor  # float32 [nodes, features]
    labels: torch.Tensor    # int64 [nodes]
    train: torch.Tensor     # bool [nodes]
    classes: int

    @property
    def nodes(self) -> int:
        return self.adjacency.shape[0]


def gcn_normalize(adjacency: sp.spmatrix) -> sp.csr_matrix:
    """D^-1/2 (A + I) D^-1/2 of the undirected graph of `adjacency` (pattern only), float32 CSR."""
    pattern = sp.csr_matrix(adjacency, dtype=np.float32)
    pattern.data[:] = 1.0
    pattern = pattern + pattern.T + sp.eye(pattern.shape[0], dtype=np.float32, format="csr")
    pattern.data[:] = 1.0
    scale = sp.diags(np.asarray(pattern.sum(axis=1)).ravel() ** -0.5)
    out = sp.csr_matrix(scale @ pattern @ scale, dtype=np.float32)
    out.sum_duplicates()
    return out


def _community_edges(nodes: int, communities: int, degree: int, p_in: float, rng: np.random.Generator):
    label = rng.integers(0, communities, size=nodes)
    members = [np.flatnonzero(label == c) for c in range(communities)]
    src = np.repeat(np.arange(nodes), degree)
    inside = rng.random(src.size) < p_in
    dst = rng.integers(0, nodes, size=src.size)
    for c in range(communities):
        pick = inside & (label[src] == c)
        if members[c].size:
            dst[pick] = members[c][rng.integers(0, members[c].size, size=int(pick.sum()))]
    return sp.csr_matrix((np.ones(src.size, np.float32), (src, dst)), shape=(nodes, nodes)), label


def make_graph(kind: str, nodes: int, *, features: int = 64, classes: int = 8, degree: int = 8,
               p_in: float = 0.8, train_fraction: float = 0.5, seed: int = 0) -> NodeGraph:
    """A `kind` graph (one of GRAPHS) of `nodes` nodes with features, labels and a train mask."""
    rng = np.random.default_rng([seed, nodes])
    if kind == "community":
        adjacency, label = _community_edges(nodes, classes, degree, p_in, rng)
        centroids = rng.standard_normal((classes, features)).astype(np.float32)
        feats = centroids[label] + 2.0 * rng.standard_normal((nodes, features)).astype(np.float32)
    elif kind in ("rmat", "social"):
        adjacency = generate("rmat", nodes, seed) if kind == "rmat" else generate_realistic("community", nodes, seed)
        label = rng.integers(0, classes, size=adjacency.shape[0])
        feats = rng.standard_normal((adjacency.shape[0], features)).astype(np.float32)
    else:
        raise UnknownKindError("graph", kind, GRAPHS)
    train = rng.random(label.size) < train_fraction
    return NodeGraph(f"{kind}-{label.size}", gcn_normalize(adjacency), torch.from_numpy(feats),
                     torch.from_numpy(label.astype(np.int64)), torch.from_numpy(train), int(classes))
