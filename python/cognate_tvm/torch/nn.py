"""GNN layers on a :class:`~cognate_tvm.torch.SparseMatrix`: GCN and dot-product graph attention.

`GCNConv` computes ``A @ (X W) + b`` (Kipf and Welling; A the normalised
adjacency). It only needs ``adjacency @ dense``, so it also runs on a torch
sparse tensor, which is how the benchmark compares with torch.sparse.

`GATConv` is graph attention with dot-product scores (as DGL's DotGatConv):
per head, ``e = sddmm(A, Q, K) / sqrt(d)`` on the edges, ``alpha =
edge_softmax(A, e)``, ``out = A_alpha @ V``: an SDDMM, a softmax over each row's
edges and an SpMM, all differentiable; one fused kernel on CPU
(:func:`~cognate_tvm.torch.attention.graph_attention`).
"""
from __future__ import annotations

import torch
from torch import nn

from .attention import graph_attention


class GCNConv(nn.Module):
    """One graph convolution: ``adjacency @ (x @ W) + b``."""

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor, adjacency) -> torch.Tensor:
        out = adjacency @ self.linear(x)
        return out if self.bias is None else out + self.bias


class GCN(nn.Module):
    """Two GCN layers with ReLU and dropout between them; returns class logits."""

    def __init__(self, in_features: int, hidden: int, classes: int, *, dropout: float = 0.5):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(in_features, hidden), GCNConv(hidden, classes)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, adjacency) -> torch.Tensor:
        h = torch.relu(self.conv1(x, adjacency))
        h = nn.functional.dropout(h, self.dropout, self.training)
        return self.conv2(h, adjacency)


class GATConv(nn.Module):
    """Dot-product graph attention with `heads` heads of `out_features` each (concatenated).

    `fused=False` composes the tuned SDDMM, edge softmax and SpMM instead of the fused kernel.
    """

    def __init__(self, in_features: int, out_features: int, *, heads: int = 1, fused: bool = True):
        super().__init__()
        self.heads, self.out_features, self.fused = int(heads), int(out_features), bool(fused)
        self.qkv = nn.Linear(in_features, 3 * heads * out_features, bias=False)

    def forward(self, x: torch.Tensor, adjacency) -> torch.Tensor:
        n, width = x.shape[0], self.heads * self.out_features
        q, k, v = (t.reshape(n, width).contiguous() for t in self.qkv(x).view(n, 3, width).unbind(1))
        return graph_attention(adjacency, q, k, v, heads=self.heads, fused=self.fused)


class GAT(nn.Module):
    """Two attention layers (ELU between them); the second has one head of `classes` outputs."""

    def __init__(self, in_features: int, hidden: int, classes: int, *, heads: int = 2, dropout: float = 0.5,
                 fused: bool = True):
        super().__init__()
        self.conv1 = GATConv(in_features, hidden, heads=heads, fused=fused)
        self.conv2 = GATConv(hidden * heads, classes, heads=1, fused=fused)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, adjacency) -> torch.Tensor:
        h = nn.functional.elu(self.conv1(x, adjacency))
        h = nn.functional.dropout(h, self.dropout, self.training)
        return self.conv2(h, adjacency)
