"""Matrix statistics: cheap features of a sparsity pattern."""
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
