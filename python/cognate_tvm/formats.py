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


@dataclass(frozen=True)
class ELLBuckets:
    """Short rows grouped into padded ELL buckets of widths 2^b, long rows kept in CSR.

    Built from a CSR matrix or a ColumnPanelCSR: every non-empty (panel, row)
    with L nonzeros goes to bucket ceil(log2 L) when that is < len(widths), else
    to the remainder. Buckets are stored back to back (see `bucket`); `pos`
    gives each slot's position in the source `indices`/`data` arrays (-1 for
    padding, whose column is 0 and value 0), and the remainder lists
    (row, start, end) ranges of those arrays.
    """

    shape: tuple[int, int]
    widths: tuple[int, ...]  # 1, 2, 4, ..., 2^(num_buckets - 1)
    counts: np.ndarray       # int32 [num_buckets]: rows per bucket
    rows: np.ndarray         # int32 [sum(counts)]: row id of each bucket row
    cols: np.ndarray         # int32 [sum(counts * widths)]
    vals: np.ndarray         # float32 [sum(counts * widths)]
    pos: np.ndarray          # int32 [sum(counts * widths)]
    rest_rows: np.ndarray    # int32 [rest]
    rest_start: np.ndarray   # int32 [rest]
    rest_end: np.ndarray     # int32 [rest]

    @property
    def num_buckets(self) -> int:
        return len(self.widths)

    def row_offsets(self) -> np.ndarray:
        """int64 [num_buckets + 1]: bucket b's rows are rows[off[b]:off[b + 1]]."""
        return np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)])

    def slot_offsets(self) -> np.ndarray:
        """int64 [num_buckets + 1]: bucket b's slots are cols[off[b]:off[b + 1]]."""
        sizes = self.counts.astype(np.int64) * np.asarray(self.widths, dtype=np.int64)
        return np.concatenate([[0], np.cumsum(sizes)])

    def bucket(self, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Views (rows [n], cols [n, w], vals [n, w], pos [n, w]) of bucket `b`."""
        if not 0 <= b < self.num_buckets:
            raise IndexError(f"bucket {b} out of range [0, {self.num_buckets})")
        r0, r1 = self.row_offsets()[b:b + 2]
        s0, s1 = self.slot_offsets()[b:b + 2]
        w = self.widths[b]
        return (self.rows[r0:r1], self.cols[s0:s1].reshape(-1, w), self.vals[s0:s1].reshape(-1, w),
                self.pos[s0:s1].reshape(-1, w))


def ell_buckets(source: sp.csr_matrix | ColumnPanelCSR, *, num_buckets: int) -> ELLBuckets:
    """Bucket the rows of canonical CSR `source` (or of each of its column panels) by length.

    Rows with up to 2^(num_buckets - 1) nonzeros (per panel) land in buckets of
    widths 1, 2, 4, ...; longer rows form the CSR remainder.
    """
    counts, rows, cols, vals, pos, rest_rows, rest_start, rest_end = _formats.csr_to_ell_buckets(
        source.indptr, source.indices, source.data, int(num_buckets))
    widths = tuple(1 << b for b in range(int(num_buckets)))
    return ELLBuckets(tuple(source.shape), widths, counts, rows, cols, vals, pos, rest_rows,
                      rest_start, rest_end)


@dataclass(frozen=True)
class RowBlockCSR:
    """CSR over blocks of `rows` consecutive rows: block g covers rows g*rows .. g*rows + rows - 1 and
    holds the union of their column indices; each (block, column) slot stores one value per row of the
    block, 0 where that row has no nonzero in the column (BCSR with rows x 1 blocks).

    Block g's slots are [indptr[g], indptr[g + 1]) of `indices`; slot s's value for row r of the block
    is ``data[s * rows + r]`` and its position in the source CSR ``pos[s * rows + r]`` (-1 for fill).
    """

    shape: tuple[int, int]
    rows: int
    indptr: np.ndarray   # int32 [blocks + 1]
    indices: np.ndarray  # int32 [slots]
    data: np.ndarray     # float32 [slots * rows]
    pos: np.ndarray      # int64 [slots * rows]

    @property
    def blocks(self) -> int:
        return self.indptr.shape[0] - 1

    @property
    def fill(self) -> float:
        """Stored values per nonzero of the source (1.0: no fill)."""
        nnz = int(np.count_nonzero(self.pos >= 0))
        return self.data.size / max(1, nnz)


def row_blocks(matrix: sp.csr_matrix, rows: int) -> RowBlockCSR:
    """Group canonical CSR `matrix` into blocks of `rows` consecutive rows (see RowBlockCSR).

    Written with numpy rather than in src/formats: it is a sort by (block, column) and a scatter,
    which numpy runs at memory speed, and it is built once per matrix and config.
    """
    rows = int(rows)
    if rows < 1:
        raise ValueError(f"rows per block must be >= 1, got {rows}")
    m, n = matrix.shape
    blocks = -(-m // rows)
    row_of = np.repeat(np.arange(m, dtype=np.int64), np.diff(matrix.indptr))
    key = (row_of // rows) * max(1, n) + matrix.indices.astype(np.int64)
    slots, slot_of = np.unique(key, return_inverse=True)
    block_of_slot = slots // max(1, n)
    indptr = np.zeros(blocks + 1, dtype=np.int64)
    np.add.at(indptr, block_of_slot + 1, 1)
    where = slot_of * rows + row_of % rows
    data = np.zeros(slots.size * rows, dtype=np.float32)
    data[where] = matrix.data
    pos = np.full(slots.size * rows, -1, dtype=np.int64)
    pos[where] = np.arange(matrix.nnz, dtype=np.int64)
    return RowBlockCSR(tuple(matrix.shape), rows, np.cumsum(indptr).astype(np.int32),
                       (slots % max(1, n)).astype(np.int32), data, pos)
