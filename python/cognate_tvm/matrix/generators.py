"""A synthetic, SuiteSparse-like corpus of sparse matrices, deterministic by seed.

No internet here, so SuiteSparse cannot be downloaded; these families cover the
kinds of structure it holds (FEM/stencil, banded, block, power-law graph,
road-like, uniform random, rectangular bipartite), each optionally with a random
row/column permutation, which destroys locality and changes the best schedule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp

from ..errors import UnknownKindError
from .io import as_csr

MIN_ROWS = 16
MAX_ROWS = 1 << 21


def _grid_side(rows: int, dims: int) -> int:
    return max(2, int(round(rows ** (1.0 / dims))))


def _stencil_2d(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    """5-point Poisson or 9-point (bilinear FEM) stencil on a square grid."""
    from pyamg.gallery import poisson, stencil_grid

    side = _grid_side(rows, 2)
    if rng.random() < 0.5:
        return poisson((side, side), format="csr")
    stencil = np.array([[-1, -1, -1], [-1, 8, -1], [-1, -1, -1]], dtype=np.float64)
    return stencil_grid(stencil, (side, side), format="csr")


def _stencil_3d(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    """7-point Poisson or 27-point (trilinear FEM) stencil on a cube."""
    from pyamg.gallery import poisson, stencil_grid

    side = _grid_side(rows, 3)
    if rng.random() < 0.5:
        return poisson((side, side, side), format="csr")
    stencil = -np.ones((3, 3, 3))
    stencil[1, 1, 1] = 26.0
    return stencil_grid(stencil, (side, side, side), format="csr")


def _banded(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    """Random diagonals inside a band of random half-width, each kept with probability p."""
    half = int(rng.integers(2, max(3, min(rows // 4, 48))))
    offsets = np.arange(-half, half + 1)
    keep = offsets[(rng.random(offsets.size) < rng.uniform(0.1, 0.5)) | (offsets == 0)]
    return sp.diags([rng.standard_normal(rows - abs(o)) for o in keep], keep.tolist(),
                    shape=(rows, rows), format="csr")


def _block_diagonal(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    """Dense-ish diagonal blocks of random sizes (multi-physics / clustered graphs)."""
    low, high = sorted(rng.integers(4, 40, size=2))
    blocks, total = [], 0
    while total < rows:
        size = min(int(rng.integers(low, high + 1)), rows - total)
        density = rng.uniform(0.2, 0.8)
        blocks.append(sp.random_array((size, size), density=density, rng=rng, format="csr"))
        total += size
    return sp.block_diag(blocks, format="csr")


def _rmat(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    """R-MAT power-law graph (Chakrabarti et al.) with a=0.57, b=c=0.19, average degree 4-16."""
    scale = int(np.ceil(np.log2(rows)))
    edges = rows * int(rng.integers(4, 17))
    probs = np.array([0.57, 0.19, 0.19, 0.05])
    src = np.zeros(edges, dtype=np.int64)
    dst = np.zeros(edges, dtype=np.int64)
    for _ in range(scale):
        quadrant = rng.choice(4, size=edges, p=probs)
        src = (src << 1) | (quadrant >> 1)
        dst = (dst << 1) | (quadrant & 1)
    keep = (src < rows) & (dst < rows)
    data = np.ones(int(keep.sum()), dtype=np.float32)
    return sp.csr_matrix((data, (src[keep], dst[keep])), shape=(rows, rows))


def _uniform(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    degree = rng.uniform(2, 24)
    return sp.random_array((rows, rows), density=min(1.0, degree / rows), rng=rng, format="csr")


def _road(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    """Planar grid graph with ~35% of the streets removed and a few highways: degree ~2-3."""
    side = _grid_side(rows, 2)
    n = side * side
    ids = np.arange(n).reshape(side, side)
    src = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    dst = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    keep = rng.random(src.size) > 0.35
    highways = max(1, n // 200)
    src = np.concatenate([src[keep], rng.integers(0, n, highways)])
    dst = np.concatenate([dst[keep], rng.integers(0, n, highways)])
    adj = sp.csr_matrix((np.ones(src.size, dtype=np.float32), (src, dst)), shape=(n, n))
    return adj + adj.T + sp.eye(n, format="csr")


def _bipartite(rows: int, rng: np.random.Generator) -> sp.spmatrix:
    """Rectangular (rows x ratio*rows) with Zipf-distributed column popularity."""
    ratio = float(rng.choice([0.25, 0.5, 2.0, 4.0]))
    cols = max(1, int(rows * ratio))
    per_row = rng.integers(1, int(rng.integers(4, 40)), size=rows)
    popularity = 1.0 / np.arange(1, cols + 1) ** rng.uniform(0.5, 1.2)
    popularity /= popularity.sum()
    col_ids = rng.choice(cols, size=int(per_row.sum()), p=rng.permutation(popularity))
    row_ids = np.repeat(np.arange(rows), per_row)
    data = rng.standard_normal(row_ids.size).astype(np.float32)
    return sp.csr_matrix((data, (row_ids, col_ids)), shape=(rows, cols))


FAMILIES: dict[str, Callable[[int, np.random.Generator], sp.spmatrix]] = {
    "stencil2d": _stencil_2d,
    "stencil3d": _stencil_3d,
    "banded": _banded,
    "block_diagonal": _block_diagonal,
    "rmat": _rmat,
    "uniform": _uniform,
    "road": _road,
    "bipartite": _bipartite,
}


def _permute(matrix: sp.csr_matrix, rng: np.random.Generator) -> sp.csr_matrix:
    rows, cols = matrix.shape
    row_perm = rng.permutation(rows)
    col_perm = row_perm if rows == cols else rng.permutation(cols)
    return matrix[row_perm][:, col_perm]


def generate(family: str, rows: int, seed: int, *, permute: bool = False) -> sp.csr_matrix:
    """One matrix of `family` with about `rows` rows (stencils round to a grid), canonical CSR."""
    if family not in FAMILIES:
        raise UnknownKindError("matrix family", family, list(FAMILIES))
    if not MIN_ROWS <= rows <= MAX_ROWS:
        raise ValueError(f"rows must be in [{MIN_ROWS}, {MAX_ROWS}], got {rows}")
    rng = np.random.default_rng([seed, rows, sorted(FAMILIES).index(family)])
    matrix = sp.csr_matrix(FAMILIES[family](rows, rng))
    if permute:
        matrix = _permute(matrix, rng)
    return as_csr(matrix, name=f"{family}[{rows}, seed={seed}]")


@dataclass(frozen=True)
class CorpusEntry:
    name: str
    family: str
    rows: int
    seed: int
    permuted: bool

    def build(self) -> sp.csr_matrix:
        return generate(self.family, self.rows, self.seed, permute=self.permuted)


def generate_corpus(count: int, *, seed: int = 0, min_rows: int = 1000, max_rows: int = 100_000,
                    families: list[str] | None = None, permute_fraction: float = 0.25
                    ) -> list[CorpusEntry]:
    """`count` corpus entries cycling through the families, sizes log-uniform in [min_rows, max_rows].

    Returns lightweight recipes; call `.build()` on each to get the matrix, so a
    large corpus can be described, split and resumed without holding all matrices.
    """
    families = list(families or FAMILIES)
    for family in families:
        if family not in FAMILIES:
            raise UnknownKindError("matrix family", family, list(FAMILIES))
    rng = np.random.default_rng(seed)
    entries = []
    for n in range(count):
        family = families[n % len(families)]
        rows = int(np.exp(rng.uniform(np.log(min_rows), np.log(max_rows))))
        permuted = bool(rng.random() < permute_fraction)
        sub_seed = int(rng.integers(2**31))
        name = f"{family}_{rows}_{sub_seed}{'_perm' if permuted else ''}"
        entries.append(CorpusEntry(name, family, rows, sub_seed, permuted))
    return entries
