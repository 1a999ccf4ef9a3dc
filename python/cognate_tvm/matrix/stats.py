"""Matrix statistics: cheap features of a sparsity pattern.

`locality_profile` describes what a cache sees when the kernel gathers dense rows by
column index: how concentrated the column accesses are, how many distinct columns a
row panel touches, and how close nonzeros sit to the diagonal. The binned pattern
the sparse-convolution featurizer reads loses exactly this at 100k+ columns (a
uniform matrix of 120k columns and one of 550k look alike once binned), and it
decides whether the dense operand fits a cache (SPADE's split and column panels).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class MatrixStats:
    rows: int
    cols: int
    nnz: int
    density: float
    row_len_mean: float
    row_len_max: int
    row_len_std: float
    empty_rows: int
    bandwidth: int            # max |i - j| over the nonzeros
    diagonal_fraction: float  # fraction of nonzeros on the main diagonal

    def as_dict(self) -> dict:
        return asdict(self)

    def as_vector(self) -> np.ndarray:
        """Log-scaled numeric vector (for the XGBoost baseline and the featurizer's MLP)."""
        return np.array([np.log2(1 + self.rows), np.log2(1 + self.cols), np.log2(1 + self.nnz),
                         np.log2(self.density + 1e-12), np.log2(1 + self.row_len_mean),
                         np.log2(1 + self.row_len_max), np.log2(1 + self.row_len_std),
                         self.empty_rows / max(self.rows, 1), np.log2(1 + self.bandwidth),
                         self.diagonal_fraction], dtype=np.float32)


def matrix_stats(matrix: sp.csr_matrix) -> MatrixStats:
    csr = sp.csr_matrix(matrix)
    rows, cols = csr.shape
    row_len = np.diff(csr.indptr)
    row_ids = np.repeat(np.arange(rows), row_len)
    offsets = np.abs(row_ids - csr.indices)
    return MatrixStats(
        rows=rows, cols=cols, nnz=int(csr.nnz),
        density=csr.nnz / max(rows * cols, 1),
        row_len_mean=float(row_len.mean()) if rows else 0.0,
        row_len_max=int(row_len.max()) if rows else 0,
        row_len_std=float(row_len.std()) if rows else 0.0,
        empty_rows=int(np.count_nonzero(row_len == 0)),
        bandwidth=int(offsets.max()) if csr.nnz else 0,
        diagonal_fraction=float(np.count_nonzero(offsets == 0) / csr.nnz) if csr.nnz else 0.0,
    )


# Hot-column prefixes 2^6 .. 2^20 columns, row-panel heights, diagonal distances (log2).
COVER_LOG2 = tuple(range(6, 21))
PANEL_HEIGHTS = (4, 16, 64, 256)
NEAR_LOG2 = (4, 8, 12, 16)
LOCALITY_WIDTH = len(COVER_LOG2) + len(PANEL_HEIGHTS) + len(NEAR_LOG2)


def _canonical_csc(matrix: sp.spmatrix) -> sp.csc_matrix:
    csc = sp.csc_matrix(matrix)
    if not csc.has_canonical_format:  # on a copy: a CSC input is not to be changed
        csc = csc.copy()
        csc.sum_duplicates()
    return csc


def hot_column_cover(matrix: sp.spmatrix) -> np.ndarray:
    """float64 [cols + 1]: entry c is the share of nonzeros in the c most used columns (0 at c = 0;
    all zeros for a matrix without nonzeros). A cache that holds c dense rows, hottest first, serves
    that share of the gathered accesses."""
    csc = _canonical_csc(matrix)
    degree = np.sort(np.diff(csc.indptr))[::-1]
    return np.r_[0.0, np.cumsum(degree) / max(1, csc.nnz)]


def locality_profile(matrix: sp.spmatrix) -> np.ndarray:
    """float32 [LOCALITY_WIDTH], hardware-agnostic (no cache size enters):

    - the share of nonzeros in the 2^j most used columns, j in COVER_LOG2 (a cache of 2^j
      dense rows can hold them);
    - log2(distinct (row panel, column) pairs / nnz) for each height in PANEL_HEIGHTS
      (0: no column repeats within a panel; -log2 h at most: every column repeats h times);
    - the share of nonzeros within 2^j of the diagonal, j in NEAR_LOG2.

    O(nnz) apart from one sort of the column counts.
    """
    csc = _canonical_csc(matrix)
    nnz = int(csc.nnz)
    if nnz == 0:
        return np.zeros(LOCALITY_WIDTH, dtype=np.float32)
    cols = csc.shape[1]
    covered = hot_column_cover(csc)
    cover = [covered[min(cols, 1 << j)] for j in COVER_LOG2]
    # CSC order: by column, rows ascending within a column; a (panel, column) pair is new
    # where the column or the panel changes from the previous nonzero.
    col_of = np.repeat(np.arange(cols), np.diff(csc.indptr))
    new_col = np.r_[True, col_of[1:] != col_of[:-1]]
    distinct = []
    for h in PANEL_HEIGHTS:
        panel = csc.indices // h
        pairs = np.count_nonzero(new_col | np.r_[True, panel[1:] != panel[:-1]])
        distinct.append(np.log2(pairs / nnz))
    offset = np.abs(csc.indices.astype(np.int64) - col_of)
    near = [np.count_nonzero(offset <= (1 << j)) / nnz for j in NEAR_LOG2]
    return np.array(cover + distinct + near, dtype=np.float32)
