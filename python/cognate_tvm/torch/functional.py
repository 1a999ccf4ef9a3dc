"""SpMM and SDDMM with tuned kernels as torch autograd functions, and the edge softmax of GAT.

For A sparse (values v, pattern P) and dense operands:

- ``spmm(A, B) = A @ B``. Backward: dB = Aᵀ @ dC, an SpMM on Aᵀ's pattern (tuned
  as a matrix of its own); dv = (dC @ Bᵀ) at P, an SDDMM with unit values.
- ``sddmm(A, X, Y) = v * (X @ Yᵀ) at P`` (values in A's CSR order). Backward,
  with S the matrix of pattern P and values v * dO: dX = S @ Y and dY = Sᵀ @ X,
  both SpMMs; dv = dO * (X @ Yᵀ) at P, an SDDMM with values dO.

Only the gradients an input needs are computed. Second derivatives are not
supported (the backward passes are not differentiable themselves).
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, matrix, values, dense):
        ctx.matrix = matrix
        ctx.save_for_backward(values, dense)
        return matrix.run("spmm", values, dense)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        matrix = ctx.matrix
        values, dense = ctx.saved_tensors
        grad = grad.contiguous()
        grad_values = grad_dense = None
        if ctx.needs_input_grad[1]:
            grad_values = matrix.run("sddmm", matrix.ones(), grad, dense)
        if ctx.needs_input_grad[2]:
            grad_dense = matrix.run("spmm", matrix.transposed_values(values), grad, transposed=True)
        return None, grad_values, grad_dense


class _SDDMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, matrix, values, x, y):
        ctx.matrix = matrix
        ctx.save_for_backward(values, x, y)
        return matrix.run("sddmm", values, x, y)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        matrix = ctx.matrix
        values, x, y = ctx.saved_tensors
        grad = grad.contiguous()
        grad_values = grad_x = grad_y = None
        scaled = values * grad if (ctx.needs_input_grad[2] or ctx.needs_input_grad[3]) else None
        if ctx.needs_input_grad[1]:
            grad_values = matrix.run("sddmm", grad, x, y)
        if ctx.needs_input_grad[2]:
            grad_x = matrix.run("spmm", scaled, y)
        if ctx.needs_input_grad[3]:
            grad_y = matrix.run("spmm", scaled[matrix.transposed_order()], x, transposed=True)
        return None, grad_values, grad_x, grad_y


def spmm(matrix, dense: torch.Tensor) -> torch.Tensor:
    """``matrix @ dense`` with the tuned SpMM kernel; differentiable in both.

    Parameters
    ----------
    matrix : SparseMatrix, M x K.
    dense : float32 contiguous tensor [K, N] on the matrix's device.

    Returns
    -------
    float32 tensor [M, N].
    """
    matrix.check_dense(dense, rows=matrix.shape[1], name="dense")
    if not _needs_grad(matrix.values, dense):
        return matrix.run("spmm", matrix.values, dense)
    return _SpMM.apply(matrix, matrix.values, dense)


def sddmm(matrix, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``matrix.values * (x @ y.T)`` at the matrix's nonzeros (CSR order), with the tuned SDDMM kernel.

    Parameters
    ----------
    matrix : SparseMatrix, M x K.
    x, y : float32 contiguous tensors [M, N] and [K, N] on the matrix's device.

    Returns
    -------
    float32 tensor [nnz]; differentiable in the values, `x` and `y`.
    """
    matrix.check_dense(x, rows=matrix.shape[0], name="x")
    matrix.check_dense(y, rows=matrix.shape[1], name="y", width=x.shape[1])
    if not _needs_grad(matrix.values, x, y):
        return matrix.run("sddmm", matrix.values, x, y)
    return _SDDMM.apply(matrix, matrix.values, x, y)


def _needs_grad(*tensors: torch.Tensor) -> bool:
    """Whether autograd must record the call (else the kernel runs without the Function's overhead)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def edge_softmax(matrix, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of `scores` ([nnz] or [nnz, heads], CSR order) over each row's nonzeros.

    The attention normalisation of GAT: every row's weights sum to 1 (a row
    without nonzeros has none). Built from torch's scatter ops, so autograd
    differentiates it.
    """
    matrix.check_values(scores, name="scores", heads=True)
    rows = matrix.row_ids()
    index = rows if scores.dim() == 1 else rows[:, None].expand_as(scores)
    shape = (matrix.shape[0],) + tuple(scores.shape[1:])
    peak = torch.full(shape, float("-inf"), dtype=scores.dtype, device=scores.device)
    peak = peak.scatter_reduce(0, index, scores.detach(), reduce="amax", include_self=True)
    weights = torch.exp(scores - peak.gather(0, index))
    totals = torch.zeros(shape, dtype=scores.dtype, device=scores.device).scatter_add(0, index, weights)
    return weights / totals.gather(0, index)
