"""PyTorch Geometric interop: graphs as :class:`SparseMatrix`, and drop-in layers on tuned kernels.

PyG describes a graph by ``edge_index`` ([2, E]: source row 0, target row 1)
and passes messages from sources to targets. The propagation matrix is then
A[target, source] = edge weight, so ``A @ X`` sums each node's incoming
messages. This module builds that matrix, and layers whose constructor,
parameters (``state_dict`` keys and shapes) and outputs are those of PyG's, so
a PyG model moves to tuned kernels by changing one import::

    from torch_geometric.nn import GCNConv          # before
    from cognate_tvm.torch.pyg import GCNConv      # after

The layers take ``edge_index`` as PyG does (the matrix is built once per
edge_index tensor and kept while the tensor is unchanged) or a
:class:`SparseMatrix`, used as the propagation matrix as it is. Nothing here
imports torch_geometric: it is only needed for :func:`from_data`'s input.

Differences from PyG, each raising a clear error where it applies: duplicate
edges are merged (their weights summed, which GCN's sum aggregation does too;
attention then sees one edge); TransformerConv has no edge features, no
attention dropout, no ``beta`` gate and does not return attention weights.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from ..errors import IndexOutOfRangeError, MatrixFormatError, ShapeError
from .attention import graph_attention
from .sparse_matrix import SparseMatrix

# Matrices built from edge_index tensors, newest last; a small bound keeps memory in check when a
# loader yields a new graph per batch.
_CACHE_SIZE = 8
_ADJACENCY_CACHE: list[tuple[tuple, torch.Tensor, SparseMatrix]] = []


def _edge_arrays(edge_index: torch.Tensor, edge_weight: torch.Tensor | None, shape: tuple[int, int]):
    """(targets, sources, weights) as numpy arrays, checked against `shape` (targets x sources)."""
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        got = tuple(edge_index.shape) if isinstance(edge_index, torch.Tensor) else type(edge_index).__name__
        raise ShapeError(f"edge_index must be a [2, E] integer tensor, got {got}")
    if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
        raise MatrixFormatError(f"edge_index must hold integers, got {edge_index.dtype}")
    sources, targets = edge_index.detach().cpu().numpy().astype(np.int64)
    for name, ids, count in (("source", sources, shape[1]), ("target", targets, shape[0])):
        if ids.size and (ids.min() < 0 or ids.max() >= count):
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise IndexOutOfRangeError(f"edge_index has {name} node {bad} outside [0, {count})")
    if edge_weight is None:
        weights = np.ones(sources.size, dtype=np.float32)
    else:
        weights = edge_weight.detach().cpu().numpy().astype(np.float32).reshape(-1)
        if weights.size != sources.size:
            raise ShapeError(f"edge_weight has {weights.size} entries for {sources.size} edges")
        if not np.all(np.isfinite(weights)):
            raise MatrixFormatError("edge_weight holds NaN or infinite values")
    return targets, sources, weights


def _shape(edge_index: torch.Tensor, num_nodes: int | None, size: tuple[int, int] | None) -> tuple[int, int]:
    """(targets, sources) of the matrix: PyG's `size` is (sources, targets)."""
    if size is not None:
        return int(size[1]), int(size[0])
    if num_nodes is None:
        num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 0
    return int(num_nodes), int(num_nodes)


def from_edge_index(edge_index: torch.Tensor, num_nodes: int | None = None, *,
                    edge_weight: torch.Tensor | None = None, size: tuple[int, int] | None = None,
                    **options) -> SparseMatrix:
    """The propagation matrix A[target, source] = weight of PyG's `edge_index` (duplicates summed).

    `num_nodes` defaults to the largest index + 1 (as PyG's ``maybe_num_nodes``);
    `size` = (sources, targets) for a bipartite graph. `options` go to
    :meth:`SparseMatrix.from_scipy` (``kernels``, ``num_threads``, ``cache_dir``,
    ``tune``, ...); the matrix lives on edge_index's device unless ``device`` is given.
    """
    shape = _shape(edge_index, num_nodes, size)
    targets, sources, weights = _edge_arrays(edge_index, edge_weight, shape)
    matrix = sp.csr_matrix((weights, (targets, sources)), shape=shape)
    options.setdefault("device", edge_index.device)
    return SparseMatrix.from_scipy(matrix, **options)


def gcn_adjacency(edge_index: torch.Tensor, num_nodes: int | None = None, *,
                  edge_weight: torch.Tensor | None = None, improved: bool = False, add_self_loops: bool = True,
                  **options) -> SparseMatrix:
    """PyG's ``gcn_norm`` as a matrix: D^-1/2 (A + fill I) D^-1/2, D the weighted in-degrees.

    With `add_self_loops`, every node gets a self-loop: one already present keeps
    its weight, the others get 1 (2 when `improved`). Options as in :func:`from_edge_index`.
    """
    shape = _shape(edge_index, num_nodes, None)
    targets, sources, weights = _edge_arrays(edge_index, edge_weight, shape)
    if add_self_loops:
        loops = np.full(shape[0], 2.0 if improved else 1.0, dtype=np.float32)
        is_loop = targets == sources
        loops[targets[is_loop]] = weights[is_loop]
        keep = ~is_loop
        nodes = np.arange(shape[0])
        targets, sources = np.concatenate([targets[keep], nodes]), np.concatenate([sources[keep], nodes])
        weights = np.concatenate([weights[keep], loops])
    degree = np.bincount(targets, weights=weights, minlength=shape[0])
    with np.errstate(divide="ignore"):
        scale = np.where(degree > 0, degree ** -0.5, 0.0)
    values = (scale[sources] * weights * scale[targets]).astype(np.float32)
    matrix = sp.csr_matrix((values, (targets, sources)), shape=shape)
    options.setdefault("device", edge_index.device)
    return SparseMatrix.from_scipy(matrix, **options)


def from_data(data, *, normalize: str | None = None, **options) -> SparseMatrix:
    """The propagation matrix of a ``torch_geometric.data.Data`` (its edge_index, num_nodes and
    edge_weight when it has one); ``normalize="gcn"`` gives :func:`gcn_adjacency` instead."""
    weight = getattr(data, "edge_weight", None)
    if normalize is None:
        return from_edge_index(data.edge_index, data.num_nodes, edge_weight=weight, **options)
    if normalize == "gcn":
        return gcn_adjacency(data.edge_index, data.num_nodes, edge_weight=weight, **options)
    raise ValueError(f"normalize must be None or 'gcn', got {normalize!r}")


def cached_matrix(build, edge_index: torch.Tensor, edge_weight: torch.Tensor | None, **kwargs) -> SparseMatrix:
    """`build(edge_index, edge_weight=..., **kwargs)`, reused while the same unchanged tensors come back.

    Tensors are recognised by their memory and torch's version counter (an in-place
    write makes a new matrix); the cache keeps them alive, so their memory is not reused meanwhile.
    """
    def identity(t):
        return None if t is None else (t.data_ptr(), t._version, tuple(t.shape), str(t.device))

    key = (build.__name__, identity(edge_index), identity(edge_weight), tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    for n, (stored, _, matrix) in enumerate(_ADJACENCY_CACHE):
        if stored == key:
            _ADJACENCY_CACHE.append(_ADJACENCY_CACHE.pop(n))
            return matrix
    matrix = build(edge_index, edge_weight=edge_weight, **kwargs)
    _ADJACENCY_CACHE.append((key, (edge_index, edge_weight), matrix))
    del _ADJACENCY_CACHE[:-_CACHE_SIZE]
    return matrix


class GCNConv(nn.Module):
    """PyG's ``GCNConv`` (Kipf and Welling) on tuned kernels: ``Â (x W) + b``, Â = gcn_norm(A).

    The constructor, ``lin.weight`` / ``bias`` and the output match
    ``torch_geometric.nn.GCNConv``; `normalize=False` propagates with the edge
    weights as given. `kernel_options` (``kernels``, ``num_threads``,
    ``cache_dir``, ``tune``, ...) choose the kernels, as in :meth:`SparseMatrix.from_scipy`.
    """

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False, cached: bool = False,
                 add_self_loops: bool | None = None, normalize: bool = True, bias: bool = True,
                 **kernel_options):
        super().__init__()
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.improved, self.normalize = bool(improved), bool(normalize)
        self.add_self_loops = normalize if add_self_loops is None else bool(add_self_loops)
        self.cached = cached  # accepted for PyG's signature: matrices are always kept per edge_index
        self.kernel_options = kernel_options
        self.lin = nn.Linear(self.in_channels, self.out_channels, bias=False)
        self.bias = nn.Parameter(torch.empty(self.out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)  # PyG initialises GCNConv's weight with glorot
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def adjacency(self, edge_index, num_nodes: int, edge_weight=None) -> SparseMatrix:
        if isinstance(edge_index, SparseMatrix):
            return edge_index
        if self.normalize:
            return cached_matrix(gcn_adjacency, edge_index, edge_weight,
                                 num_nodes=num_nodes, improved=self.improved, add_self_loops=self.add_self_loops,
                                 **self.kernel_options)
        return cached_matrix(from_edge_index, edge_index, edge_weight, num_nodes=num_nodes,
                             **self.kernel_options)

    def forward(self, x: torch.Tensor, edge_index, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        out = self.adjacency(edge_index, x.shape[0], edge_weight) @ self.lin(x).contiguous()
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}"


class TransformerConv(nn.Module):
    """PyG's ``TransformerConv`` (dot-product graph attention) on the fused attention kernel.

    out_i = lin_skip(x_i) + sum_j softmax_j(q_i . k_j / sqrt(C)) v_j over the edges j -> i, per
    head; the heads concatenated (`concat`) or averaged. Constructor, parameter names
    and outputs match ``torch_geometric.nn.TransformerConv`` for the settings it takes.
    `fused=False` composes the tuned SDDMM, edge softmax and SpMM instead of the fused kernel;
    `kernel_options` as in :class:`GCNConv`.
    """

    def __init__(self, in_channels: int | tuple[int, int], out_channels: int, heads: int = 1, concat: bool = True,
                 beta: bool = False, dropout: float = 0.0, edge_dim: int | None = None, bias: bool = True,
                 root_weight: bool = True, fused: bool = True, **kernel_options):
        super().__init__()
        unsupported = {"beta": beta, "dropout": dropout, "edge_dim": edge_dim}
        for name, value in unsupported.items():
            if value:
                raise ValueError(f"TransformerConv({name}={value!r}) is not supported by the fused attention "
                                 f"kernel; use torch_geometric.nn.TransformerConv for it")
        source, target = (in_channels, in_channels) if isinstance(in_channels, int) else in_channels
        self.in_channels, self.out_channels, self.heads = in_channels, int(out_channels), int(heads)
        self.concat, self.root_weight, self.fused = bool(concat), bool(root_weight), bool(fused)
        self.kernel_options = kernel_options
        width = self.heads * self.out_channels
        self.lin_key = nn.Linear(source, width, bias=bias)
        self.lin_query = nn.Linear(target, width, bias=bias)
        self.lin_value = nn.Linear(source, width, bias=bias)
        # PyG keeps lin_skip in the state dict even without root_weight
        self.lin_skip = nn.Linear(target, width if concat else self.out_channels, bias=bias)

    def forward(self, x, edge_index) -> torch.Tensor:
        source, target = (x, x) if isinstance(x, torch.Tensor) else x
        if isinstance(edge_index, SparseMatrix):
            matrix = edge_index
        else:
            matrix = cached_matrix(from_edge_index, edge_index, None,
                                   size=(source.shape[0], target.shape[0]), **self.kernel_options)
        out = graph_attention(matrix, self.lin_query(target).contiguous(), self.lin_key(source).contiguous(),
                              self.lin_value(source).contiguous(), heads=self.heads,
                              scale=1.0 / math.sqrt(self.out_channels), fused=self.fused)
        if not self.concat:
            out = out.view(-1, self.heads, self.out_channels).mean(dim=1)
        return out + self.lin_skip(target) if self.root_weight else out

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, heads={self.heads}"


__all__ = ["GCNConv", "TransformerConv", "cached_matrix", "from_data", "from_edge_index", "gcn_adjacency"]
