"""GNN layers on a :class:`~cognate_tvm.torch.SparseMatrix`: GCN and dot-product graph attention.

`GCNConv` computes ``A @ (X W) + b`` (Kipf and Welling; A the normalised
adjacency). It only needs ``adjacency @ dense``, so it also runs on a torch
sparse tensor, which is how the benchmark compares with torch.sparse.

`GATConv` is graph attention with dot-product scores (as DGL's DotGatConv):
per head, ``e = sddmm(A, Q, K) / sqrt(d)`` on the edges, ``alpha =
edge_softmax(A, e)``, ``out = A_alpha @ V``: an SDDMM, a softmax over each row's
edges and an SpMM, all differentiable.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .functional import edge_softmax


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
    """Dot-product graph attention with `heads` heads of `out_features` each (concatenated)."""

    def __init__(self, in_features: int, out_features: int, *, heads: int = 1):
        super().__init__()
        self.heads, self.out_features = int(heads), int(out_features)
        self.qkv = nn.Linear(in_features, 3 * heads * out_features, bias=False)

    def forward(self, x: torch.Tensor, adjacency) -> torch.Tensor:
        n, d = x.shape[0], self.out_features
        q, k, v = self.qkv(x).view(n, 3, self.heads, d).unbind(1)
        outputs = []
        for head in range(self.heads):
            qh, kh, vh = (t[:, head].contiguous() for t in (q, k, v))
            scores = adjacency.with_values(adjacency.ones()).sddmm(qh, kh) / math.sqrt(d)
            alpha = edge_softmax(adjacency, scores)
            outputs.append(adjacency.with_values(alpha) @ vh)
        return torch.cat(outputs, dim=1)


class GAT(nn.Module):
    """Two attention layers (ELU between them); the second has one head of `classes` outputs."""

    def __init__(self, in_features: int, hidden: int, classes: int, *, heads: int = 2, dropout: float = 0.5):
        super().__init__()
        self.conv1 = GATConv(in_features, hidden, heads=heads)
        self.conv2 = GATConv(hidden * heads, classes, heads=1)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, adjacency) -> torch.Tensor:
        h = nn.functional.elu(self.conv1(x, adjacency))
        h = nn.functional.dropout(h, self.dropout, self.training)
        return self.conv2(h, adjacency)
