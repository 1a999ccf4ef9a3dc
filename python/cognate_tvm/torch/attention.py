"""Dot-product graph attention over a sparse pattern, fused where the device has a kernel for it.

For a :class:`~cognate_tvm.torch.SparseMatrix` A (row i attends to the columns
j of its nonzeros; A's values are not used) and per-head queries, keys and
values, ``graph_attention`` computes for every head h::

    O[i, h] = sum_j softmax_j(scale * Q[i, h] . K[j, h]) * V[j, h]

the attention of DGL's DotGatConv and of PyG's TransformerConv (without its
skip connection). On CPU one fused kernel does it
(:mod:`cognate_tvm.kernels.cpu_attention`); elsewhere it is composed of the
tuned SDDMM, :func:`~cognate_tvm.torch.functional.edge_softmax` and the tuned
SpMM. Both are differentiable in Q, K and V.

Backward (per head, with a the attention weights of the forward pass, dO the
output's gradient, S the pattern with values ds)::

    dV = aᵀ @ dO                         an SpMM on Aᵀ
    dp_e = dO[i] . V[j]                   an SDDMM
    ds_e = scale * a_e * (dp_e - dO[i] . O[i])
    dQ = S @ K,  dK = Sᵀ @ Q              SpMMs

so the backward pass runs the tuned SpMM and SDDMM kernels.
"""
from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from ..errors import ShapeError
from ..kernels.cpu_attention import padded_dim
from .functional import edge_softmax


def graph_attention(matrix, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, heads: int = 1,
                    scale: float | None = None, fused: bool = True) -> torch.Tensor:
    """Multi-head dot-product attention over `matrix`'s pattern; see the module docstring.

    Parameters
    ----------
    matrix : SparseMatrix, M x K.
    q : float32 contiguous [M, heads * d]; head h is columns h*d:(h+1)*d.
    k : float32 contiguous [K, heads * d].
    v : float32 contiguous [K, heads * dv].
    heads : the number of heads.
    scale : multiplies the scores; default 1 / sqrt(d).
    fused : False composes SDDMM, edge softmax and SpMM even where a fused kernel exists.

    Returns
    -------
    float32 [M, heads * dv], the heads side by side. A row without nonzeros gets zeros.
    """
    heads = int(heads)
    dim, value_dim = _head_widths(matrix, q, k, v, heads)
    scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    kernel = matrix.kernels.platform.attention_kernel(heads, padded_dim(dim), padded_dim(value_dim)) \
        if fused else None
    if kernel is None:
        return _composed(matrix, q, k, v, heads, scale)
    return _FusedAttention.apply(matrix, kernel, heads, scale, q, k, v)


def _head_widths(matrix, q, k, v, heads: int) -> tuple[int, int]:
    if heads < 1:
        raise ValueError(f"heads must be >= 1, got {heads}")
    rows, cols = matrix.shape
    matrix.check_dense(q, rows=rows, name="q")
    matrix.check_dense(k, rows=cols, name="k", width=q.shape[1])
    matrix.check_dense(v, rows=cols, name="v")
    for name, tensor in (("q", q), ("v", v)):
        if tensor.shape[1] % heads or tensor.shape[1] == 0:
            raise ShapeError(f"{name} has {tensor.shape[1]} columns, which {heads} heads cannot share equally")
    return q.shape[1] // heads, v.shape[1] // heads


def _head(tensor: torch.Tensor, heads: int, h: int) -> torch.Tensor:
    width = tensor.shape[1] // heads
    return tensor[:, h * width:(h + 1) * width].contiguous()


def _composed(matrix, q, k, v, heads: int, scale: float) -> torch.Tensor:
    """The attention from the tuned SDDMM, edge softmax and tuned SpMM (autograd through each)."""
    pattern = matrix.with_values(matrix.ones())
    outputs = []
    for h in range(heads):
        scores = pattern.sddmm(_head(q, heads, h), _head(k, heads, h)) * scale
        outputs.append(matrix.with_values(edge_softmax(matrix, scores)) @ _head(v, heads, h))
    return torch.cat(outputs, dim=1)


def _pad_heads(tensor: torch.Tensor, heads: int, width: int) -> torch.Tensor:
    """[rows, heads * w] -> [rows, heads * width] with zero columns after each head (itself if w == width)."""
    rows, total = tensor.shape
    if total == heads * width:
        return tensor
    padded = torch.nn.functional.pad(tensor.view(rows, heads, total // heads), (0, width - total // heads))
    return padded.reshape(rows, heads * width)


class _FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, matrix, kernel, heads, scale, q, k, v):
        rows, cols = matrix.shape
        value_dim = v.shape[1] // heads
        width = padded_dim(value_dim)
        out = torch.empty(rows, heads * width, dtype=torch.float32, device=matrix.device)
        weights = torch.empty(heads, matrix.nnz, dtype=torch.float32, device=matrix.device)
        if matrix.nnz == 0:
            out.zero_()
        else:
            dim = padded_dim(q.shape[1] // heads)
            indptr, indices = matrix.pattern.csr_tensors(matrix.device)
            kernel(rows, cols, matrix.nnz, scale, indptr, indices, _pad_heads(q, heads, dim),
                   _pad_heads(k, heads, dim), _pad_heads(v, heads, width), out, weights)
        if width != value_dim:
            out = out.view(rows, heads, width)[:, :, :value_dim].reshape(rows, heads * value_dim)
        ctx.matrix, ctx.heads, ctx.scale = matrix, heads, scale
        ctx.save_for_backward(q, k, v, out, weights)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        matrix, heads, scale = ctx.matrix, ctx.heads, ctx.scale
        q, k, v, out, weights = ctx.saved_tensors
        need_q, need_k, need_v = ctx.needs_input_grad[4:7]
        grads = {"q": [], "k": [], "v": []}
        if matrix.nnz == 0:
            return None, None, None, None, *(torch.zeros_like(t) if n else None
                                             for t, n in zip((q, k, v), (need_q, need_k, need_v)))
        order, rows = matrix.transposed_order(), matrix.row_ids()
        grad = grad.contiguous()
        for h in range(heads):
            alpha, grad_h = weights[h], _head(grad, heads, h)
            if need_v:
                grads["v"].append(matrix.run("spmm", alpha[order], grad_h, transposed=True))
            if need_q or need_k:
                dots = matrix.run("sddmm", matrix.ones(), grad_h, _head(v, heads, h))
                own = (grad_h * _head(out, heads, h)).sum(dim=1)
                scores = (alpha * (dots - own[rows]) * scale).contiguous()
                if need_q:
                    grads["q"].append(matrix.run("spmm", scores, _head(k, heads, h)))
                if need_k:
                    grads["k"].append(matrix.run("spmm", scores[order], _head(q, heads, h), transposed=True))
        joined = [torch.cat(grads[name], dim=1) if grads[name] else None for name in ("q", "k", "v")]
        return None, None, None, None, *joined
