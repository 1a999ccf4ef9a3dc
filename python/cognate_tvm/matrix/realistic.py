"""Generator families that mimic structures of real matrices the synthetic corpus lacks.

The families of `generators` are regular (stencils on grids, bands, R-MAT,
uniform); matrices met in practice add structure they do not have:

- ``fem_blocks``: an unstructured mesh's node graph (each node joined to its
  nearest neighbours among random points in 2-D or 3-D), nodes numbered along
  a coarse space-filling order so that neighbours are near but not adjacent,
  each node a dense block of 1-3 unknowns (vector problems such as elasticity:
  block rows);
- ``community``: a graph of communities with power-law sizes and power-law
  degrees, most edges inside a community (software, social and gene networks);
- ``dense_rows``: a sparse base (banded or uniform) plus a few rows and columns
  that touch a large share of the columns (constraints, hub nodes), holding
  together at most as many nonzeros as the base;
- ``fem_scalar`` and ``fem_elasticity``: stiffness matrices assembled with
  scikit-fem (Lagrange elements of order 1-3 in 2-D and 3-D; vector elasticity,
  whose rows come in blocks), see `fem`;
- ``import_graph``: pieces of the import graph of a Python environment's packages
  (hub columns, package clusters), cut from the scan the package ships, see `import_graph`.

Each is deterministic by seed, on any machine; `realistic_corpus` describes a corpus of them,
cycling through the families, as `generators.generate_corpus` does for its own.
These families are separate from `generators.FAMILIES`, so the corpora built
from those stay as they are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp

from ..errors import UnknownKindError
from .fem import fem_elasticity, fem_scalar
from .generators import MAX_ROWS, MIN_ROWS
from .import_graph import import_graph_matrix
from .io import as_csr


def _fem_blocks(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    """Mesh node graph (k nearest neighbours of random points) with dense b x b blocks per node pair."""
    from scipy.spatial import cKDTree

    block = int(rng.choice([1, 2, 3], p=[0.4, 0.3, 0.3]))
    dims = int(rng.choice([2, 3]))
    nodes = max(8, rows // block)
    points = rng.random((nodes, dims))
    # number the nodes cell by cell of a coarse grid, in random order inside a cell: neighbours get
    # nearby but scattered indices, as a mesh generator's numbering gives them
    cells = max(2, int(round(nodes ** (1.0 / dims) / 4)))
    cell = np.floor(points * cells).astype(np.int64) @ (cells ** np.arange(dims))
    points = points[np.lexsort((rng.random(nodes), cell))]
    neighbours = int(rng.integers(6, 13 if dims == 2 else 20))
    _, index = cKDTree(points).query(points, k=min(neighbours + 1, nodes))
    src = np.repeat(np.arange(nodes), index.shape[1])
    graph = sp.csr_matrix((np.ones(src.size), (src, index.ravel())), shape=(nodes, nodes))
    graph = ((graph + graph.T) > 0).astype(np.float64)
    return sp.kron(graph, np.ones((block, block)), format="csr")


def _community(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    """Power-law community sizes and degrees; a share `mixing` of the edges leaves the community."""
    sizes = []
    while sum(sizes) < rows:
        sizes.append(int(min(rows - sum(sizes), max(4, rng.pareto(1.5) * 20))))
    community = np.repeat(np.arange(len(sizes)), sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    degree = np.minimum(np.maximum(1, (rng.pareto(1.2, rows) * 3).astype(np.int64)), max(1, rows // 10))
    mixing = rng.uniform(0.05, 0.3)
    src = np.repeat(np.arange(rows), degree)
    outside = rng.random(src.size) < mixing
    own = community[src]
    inside_dst = starts[own] + (rng.random(src.size) * (starts[own + 1] - starts[own])).astype(np.int64)
    # edges that leave go to popular nodes: targets drawn in proportion to degree
    popular = rng.choice(rows, size=src.size, p=degree / degree.sum())
    dst = np.where(outside, popular, inside_dst)
    graph = sp.csr_matrix((np.ones(src.size), (src, dst)), shape=(rows, rows))
    return ((graph + graph.T) > 0).astype(np.float64)


def _dense_rows(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    """A banded or uniform sparse base plus a few rows and columns that cover up to 60% of the columns
    (together no more nonzeros than the base)."""
    if rng.random() < 0.5:
        half = int(rng.integers(1, 8))
        base = sp.diags([np.ones(rows - abs(o)) for o in range(-half, half + 1)], list(range(-half, half + 1)),
                        shape=(rows, rows), format="csr")
    else:
        base = sp.random_array((rows, rows), density=min(1.0, rng.uniform(2, 8) / rows), rng=rng, format="csr")
    count = int(rng.integers(1, 2 + int(np.sqrt(rows) / 8)))
    dense = rng.choice(rows, size=count, replace=False)
    width = rows * rng.uniform(0.1, 0.6, count)
    # the dense rows and columns together hold at most as many nonzeros as the base
    width = np.maximum(1, width * min(1.0, base.nnz / (2 * width.sum()))).astype(np.int64)
    src = np.repeat(dense, width)
    dst = np.concatenate([rng.choice(rows, size=w, replace=False) for w in width])
    extra = sp.csr_matrix((np.ones(src.size), (src, dst)), shape=(rows, rows))
    return ((base + extra + extra.T) != 0).astype(np.float64)


REALISTIC_FAMILIES: dict[str, Callable[[int, np.random.Generator], sp.spmatrix]] = {
    "fem_blocks": _fem_blocks,
    "community": _community,
    "dense_rows": _dense_rows,
    "fem_scalar": fem_scalar,
    "fem_elasticity": fem_elasticity,
    "import_graph": import_graph_matrix,
}


def generate_realistic(family: str, rows: int, seed: int) -> sp.csr_matrix:
    """One matrix of realistic `family` with about `rows` rows (block sizes and meshes round it; an
    ``import_graph`` piece is at most the whole graph), canonical CSR."""
    if family not in REALISTIC_FAMILIES:
        raise UnknownKindError("realistic matrix family", family, list(REALISTIC_FAMILIES))
    if not MIN_ROWS <= rows <= MAX_ROWS:
        raise ValueError(f"rows must be in [{MIN_ROWS}, {MAX_ROWS}], got {rows}")
    rng = np.random.default_rng([seed, rows, sorted(REALISTIC_FAMILIES).index(family)])
    return as_csr(sp.csr_matrix(REALISTIC_FAMILIES[family](rows, rng)), name=f"{family}[{rows}, seed={seed}]")


@dataclass(frozen=True)
class RealisticEntry:
    """A realistic corpus entry: built when asked."""

    name: str
    family: str
    rows: int
    seed: int

    def build(self) -> sp.csr_matrix:
        return generate_realistic(self.family, self.rows, self.seed)


def realistic_corpus(count: int, *, seed: int = 0, min_rows: int = 1000, max_rows: int = 100_000
                     ) -> list[RealisticEntry]:
    """`count` entries cycling through `REALISTIC_FAMILIES`, sizes log-uniform in [min_rows, max_rows]."""
    if count < 1 or not 1 <= min_rows <= max_rows:
        raise ValueError(f"need count >= 1 and 1 <= min_rows <= max_rows, got {count}, {min_rows}, {max_rows}")
    rng = np.random.default_rng(seed)
    families = list(REALISTIC_FAMILIES)
    entries = []
    for n in range(count):
        rows = int(np.exp(rng.uniform(np.log(min_rows), np.log(max_rows))))
        sub_seed = int(rng.integers(2**31))
        family = families[n % len(families)]
        entries.append(RealisticEntry(f"{family}_{rows}_{sub_seed}", family, rows, sub_seed))
    return entries
