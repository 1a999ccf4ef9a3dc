"""`SparseMatrix`: a graph's CSR pattern and values, with tuned SpMM / SDDMM kernels behind ``@``.

>>> A = SparseMatrix.from_scipy(adjacency, device="cpu")     # doctest: +SKIP
>>> H = A @ X                      # tuned on first use per dense width, then cached on disk
>>> O = A.sddmm(X, Y)              # values * (X @ Y.T) at A's nonzeros
>>> A2 = A.with_values(weights)    # same pattern and kernels, other (differentiable) values

The kernels compute in float32; operands must be float32, contiguous and on
the matrix's device (typed errors from :mod:`cognate_tvm.errors` otherwise).
The pattern is checked once, when the matrix is made.
"""
from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import (DeviceMismatchError, DTypeError, IndexOutOfRangeError, LayoutError, MatrixFormatError,
                      ShapeError)
from . import functional
from .runners import GatherCache
from .tuning import Pattern, TunedKernels

_KERNEL_SETS: dict[tuple, TunedKernels] = {}


def kernels_for(device: str | torch.device = "cpu", **options) -> TunedKernels:
    """The shared `TunedKernels` of `device` and options (one per process and setting)."""
    key = (str(torch.device(device)), tuple(sorted((k, repr(v)) for k, v in options.items())))
    if key not in _KERNEL_SETS:
        _KERNEL_SETS[key] = TunedKernels(device, **options)
    return _KERNEL_SETS[key]


def check_pattern(indptr: np.ndarray, indices: np.ndarray, shape: tuple[int, int]) -> None:
    """Raise unless (indptr, indices) is a CSR pattern of `shape` with indices inside it."""
    rows, cols = shape
    if indptr.ndim != 1 or indptr.shape[0] != rows + 1:
        raise ShapeError(f"indptr has shape {indptr.shape}; a {rows}x{cols} matrix needs ({rows + 1},)")
    if indptr[0] != 0 or indptr[-1] != indices.shape[0] or np.any(np.diff(indptr) < 0):
        raise MatrixFormatError(f"indptr must start at 0, never decrease and end at nnz={indices.shape[0]}; "
                                f"got start {indptr[0]}, end {indptr[-1]}")
    if indices.size and (indices.min() < 0 or indices.max() >= cols):
        bad = int(indices.min()) if indices.min() < 0 else int(indices.max())
        raise IndexOutOfRangeError(f"column index {bad} outside [0, {cols}) of a {rows}x{cols} matrix")
    if np.iinfo(np.int32).max < max(rows, cols, indices.shape[0]):
        raise ShapeError(f"a {rows}x{cols} matrix with {indices.shape[0]} nonzeros exceeds the kernels' "
                         f"int32 indices")


class SparseMatrix:
    """A sparse matrix whose products run the tuned kernels of its device.

    Made with :meth:`from_scipy` or :meth:`from_torch`. `values` may require
    grad: ``A @ B`` and :meth:`sddmm` differentiate in them and in the dense
    operands (:mod:`cognate_tvm.torch.functional`).
    """

    def __init__(self, pattern: Pattern, values: torch.Tensor, kernels: TunedKernels):
        self.pattern, self.kernels = pattern, kernels
        self.check_values(values, name="values")
        self.values = values
        self._ones: torch.Tensor | None = None
        self._gather = GatherCache()

    # -- making one ----------------------------------------------------------------
    @classmethod
    def from_scipy(cls, matrix: sp.spmatrix, *, device: str | torch.device = "cpu", values: torch.Tensor | None = None,
                   kernels: TunedKernels | None = None, num_threads: int | None = None, arch: str | None = None,
                   cache_dir: str | os.PathLike | None = None, tune: bool = True,
                   tune_options: dict | None = None) -> "SparseMatrix":
        """A matrix with `matrix`'s pattern (duplicates summed, columns sorted) on `device`.

        `values` (float32 [nnz] in `matrix`'s CSR order, which must then be
        canonical) default to `matrix`'s own. `kernels` defaults to the shared :class:`TunedKernels`
        of the device and the remaining options (see there).
        """
        csr = sp.csr_matrix(matrix, copy=True)
        if values is not None and not csr.has_canonical_format:
            raise MatrixFormatError("values are given in CSR order, but the matrix's CSR has unsorted or duplicate "
                                    "column indices; call matrix.sum_duplicates() first")
        csr.sum_duplicates()
        check_pattern(csr.indptr, csr.indices, csr.shape)
        if kernels is None:
            kernels = kernels_for(device, num_threads=num_threads, arch=arch, cache_dir=cache_dir, tune=tune,
                                  tune_options=tune_options)
        if values is None:
            values = torch.from_numpy(np.asarray(csr.data, dtype=np.float32)).to(kernels.device)
        return cls(Pattern(csr), values, kernels)

    @classmethod
    def from_torch(cls, tensor: torch.Tensor, *, kernels: TunedKernels | None = None, **options) -> "SparseMatrix":
        """A matrix from a torch sparse CSR tensor (sorted column indices, no duplicates), on its device.

        Its values tensor is used as it is (so gradients reach it); `options` as in :meth:`from_scipy`.
        """
        if tensor.layout != torch.sparse_csr:
            raise LayoutError(f"from_torch takes a sparse CSR tensor (torch.sparse_csr), got layout {tensor.layout}")
        indptr = tensor.crow_indices().cpu().numpy()
        indices = tensor.col_indices().cpu().numpy()
        shape = tuple(tensor.shape)
        check_pattern(indptr, indices, shape)
        csr = sp.csr_matrix((np.ones(indices.shape[0], np.float32), indices, indptr), shape=shape)
        if not csr.has_canonical_format:
            raise MatrixFormatError("the CSR tensor's rows need sorted, distinct column indices")
        kernels = kernels or kernels_for(tensor.device, **options)
        return cls(Pattern(csr), tensor.values(), kernels)

    def with_values(self, values: torch.Tensor) -> "SparseMatrix":
        """The same pattern and kernels with other values (float32 [nnz], CSR order)."""
        return SparseMatrix(self.pattern, values, self.kernels)

    # -- what it is ------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return self.pattern.shape

    @property
    def nnz(self) -> int:
        return self.pattern.nnz

    @property
    def device(self) -> torch.device:
        return self.kernels.device

    def __repr__(self) -> str:
        return f"SparseMatrix(shape={self.shape}, nnz={self.nnz}, device={self.device})"

    def to_torch(self) -> torch.Tensor:
        """A torch sparse CSR tensor with the same pattern and values (int64 indices)."""
        csr = self.pattern.csr
        return torch.sparse_csr_tensor(torch.from_numpy(csr.indptr.astype(np.int64)),
                                       torch.from_numpy(csr.indices.astype(np.int64)), self.values.detach().cpu(),
                                       size=self.shape).to(self.device)

    # -- products ----------------------------------------------------------------------
    def __matmul__(self, dense: torch.Tensor) -> torch.Tensor:
        return functional.spmm(self, dense)

    def sddmm(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``values * (x @ y.T)`` at the nonzeros, in CSR order (see :func:`functional.sddmm`)."""
        return functional.sddmm(self, x, y)

    def t(self) -> "SparseMatrix":
        """Aᵀ as a matrix of its own (its own tuned kernels), values gathered differentiably."""
        return SparseMatrix(self.pattern.transpose()[0], self.values[self.transposed_order()], self.kernels)

    @property
    def T(self) -> "SparseMatrix":  # noqa: N802 - torch's and numpy's name
        return self.t()

    def prepare(self, feats, *, ops=("spmm",), backward: bool = True) -> None:
        """Tune and build now (not on first use) the kernels of `ops` at each dense width in `feats`.

        With `backward`, also those of the backward passes: SpMM on Aᵀ for SpMM
        and SDDMM; SDDMM for SpMM when the values require grad, SpMM for SDDMM.
        """
        for feat in [feats] if isinstance(feats, int) else feats:
            for op in ops:
                self.kernels.runner(op, self.pattern, feat)
                if not backward:
                    continue
                self.kernels.runner("spmm", self.pattern.transpose()[0], feat)
                if op == "sddmm" or self.values.requires_grad:
                    self.kernels.runner("sddmm" if op == "spmm" else "spmm", self.pattern, feat)

    # -- used by the autograd functions ------------------------------------------------
    def run(self, op: str, values: torch.Tensor, *dense: torch.Tensor, transposed: bool = False) -> torch.Tensor:
        """The tuned `op` kernel of A (or of Aᵀ, `values` then in Aᵀ's CSR order) on `dense`.

        No autograd and no checks: the functions of :mod:`functional` call it.
        """
        pattern = self.pattern.transpose()[0] if transposed else self.pattern
        if pattern.nnz == 0:
            shape = (0,) if op == "sddmm" else (pattern.shape[0], dense[0].shape[1])
            return torch.zeros(shape, dtype=torch.float32, device=self.device)
        return self.kernels.runner(op, pattern, dense[0].shape[1])(values.detach(), *dense)

    def transposed_order(self) -> torch.Tensor:
        """int64 [nnz] on the device: Aᵀ's values in its CSR order are A's values[order]."""
        return self.pattern.transpose_order(self.device)

    def transposed_values(self, values: torch.Tensor) -> torch.Tensor:
        """values[transposed_order()], kept while the values do not change."""
        return self._gather(values.detach(), self.transposed_order())

    def ones(self) -> torch.Tensor:
        if self._ones is None:
            self._ones = torch.ones(self.nnz, dtype=torch.float32, device=self.device)
        return self._ones

    def row_ids(self) -> torch.Tensor:
        return self.pattern.row_ids(self.device)

    # -- checks ----------------------------------------------------------------------
    def _check_tensor(self, tensor, name: str) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.device != self.device:
            raise DeviceMismatchError(f"{name} is on {tensor.device}, the matrix's kernels on {self.device}")
        if tensor.dtype != torch.float32:
            raise DTypeError(f"{name} has dtype {tensor.dtype}; the kernels compute in torch.float32")
        if not tensor.is_contiguous():
            raise LayoutError(f"{name} (shape {tuple(tensor.shape)}, strides {tensor.stride()}) is not "
                              f"contiguous; pass {name}.contiguous()")

    def check_dense(self, tensor, *, rows: int, name: str, width: int | None = None) -> None:
        """Raise unless `tensor` is a float32, contiguous [rows, N] tensor on the device (N = width if given)."""
        self._check_tensor(tensor, name)
        if tensor.dim() != 2 or tensor.shape[0] != rows or (width is not None and tensor.shape[1] != width):
            want = f"[{rows}, {'N' if width is None else width}]"
            raise ShapeError(f"{name} has shape {tuple(tensor.shape)}; a {self.shape[0]}x{self.shape[1]} "
                             f"matrix needs {want}")

    def check_values(self, tensor, *, name: str, heads: bool = False) -> None:
        """Raise unless `tensor` is float32 [nnz] (or [nnz, heads] with `heads`) on the device."""
        self._check_tensor(tensor, name)
        if tensor.shape[:1] != (self.nnz,) or tensor.dim() > (2 if heads else 1):
            raise ShapeError(f"{name} has shape {tuple(tensor.shape)}; the matrix has {self.nnz} nonzeros, "
                             f"so it needs [{self.nnz}{', heads' if heads else ''}]")
