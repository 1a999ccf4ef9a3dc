"""The sparse operations as data: SpMM and SDDMM.

For A sparse M x K (CSR) and dense width N (`feat`):
- SpMM:  C[i, j] = sum_k A[i, k] * B[k, j]               B: K x N, C: M x N
- SDDMM: O[i, k] = A[i, k] * sum_j X[i, j] * Y[k, j]      X: M x N, Y: K x N,
         O has A's sparsity pattern (its values are returned in A's nnz order).
Every backend takes an `Op` and never branches on SpMM vs SDDMM beyond what the
descriptor says.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp

from .errors import ShapeError, UnknownKindError


@dataclass(frozen=True)
class Op:
    """Descriptor of a sparse operation."""

    name: str
    # Shapes of the dense inputs as functions of (rows, cols, feat).
    dense_shapes: Callable[[int, int, int], tuple[tuple[int, int], ...]]
    reference: Callable[..., np.ndarray]

    def make_dense_inputs(self, matrix: sp.csr_matrix, feat: int, seed: int = 0) -> list[np.ndarray]:
        """Seeded float32 dense operands for `matrix` and width `feat`."""
        rng = np.random.default_rng(seed)
        rows, cols = matrix.shape
        return [rng.standard_normal(shape, dtype=np.float32) for shape in self.dense_shapes(rows, cols, feat)]

    def check_dense_inputs(self, matrix: sp.csr_matrix, dense: list[np.ndarray], feat: int) -> None:
        want = self.dense_shapes(*matrix.shape, feat)
        got = tuple(np.shape(d) for d in dense)
        if got != want:
            raise ShapeError(f"{self.name}: dense operands have shapes {got}, expected {want} "
                             f"for a {matrix.shape[0]}x{matrix.shape[1]} matrix and feat={feat}")

    def flops(self, nnz: int, feat: int) -> int:
        """Multiply-add pairs counted as 2 flops: both ops do nnz * feat of them."""
        return 2 * nnz * feat


def _spmm_reference(matrix: sp.csr_matrix, b: np.ndarray) -> np.ndarray:
    return np.asarray(matrix @ b, dtype=np.float32)


def _sddmm_reference(matrix: sp.csr_matrix, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    dots = np.einsum("nj,nj->n", x[rows], y[matrix.indices], dtype=np.float64)
    return (matrix.data * dots).astype(np.float32)


SPMM = Op(name="spmm", dense_shapes=lambda m, k, n: ((k, n),), reference=_spmm_reference)
SDDMM = Op(name="sddmm", dense_shapes=lambda m, k, n: ((m, n), (k, n)), reference=_sddmm_reference)

OPS: dict[str, Op] = {op.name: op for op in (SPMM, SDDMM)}


def get_op(op: str | Op) -> Op:
    """Return the descriptor for an op name (or pass one through)."""
    if isinstance(op, Op):
        return op
    try:
        return OPS[op]
    except KeyError:
        raise UnknownKindError("op", op, list(OPS)) from None
