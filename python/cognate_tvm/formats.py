"""Thin wrapper over the C++ format conversions (src/formats)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import _formats


@dataclass(frozen=True)
class ColumnPanelCSR:
    """A CSR matrix cut into column panels of `width` columns, stored back to back.

    Panel p, row i holds nonzeros [indptr[p, i], indptr[p, i + 1]) of `indices`
    and `data`; column ids are global.
    """

    shape: tuple[int, int]
    width: int
    indptr: np.ndarray   # int32 [panels, rows + 1]
    indices: np.ndarray  # int32 [nnz]
    data: np.ndarray     # float32 [nnz]

    @property
    def panels(self) -> int:
        return self.indptr.shape[0]


def column_panels(matrix: sp.csr_matrix, width: int) -> ColumnPanelCSR:
    """Split canonical CSR `matrix` into column panels of `width` columns."""
    indptr, indices, data = _formats.csr_to_column_panels(
        matrix.indptr, matrix.indices, matrix.data, matrix.shape[1], int(width))
    return ColumnPanelCSR(tuple(matrix.shape), int(width), indptr, indices, data)
