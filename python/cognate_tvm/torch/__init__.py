"""PyTorch integration: tuned SpMM / SDDMM kernels as autograd operations on torch tensors.

>>> from cognate_tvm.torch import SparseMatrix                          # doctest: +SKIP
>>> A = SparseMatrix.from_scipy(adjacency, device="cpu")               # doctest: +SKIP
>>> H = A @ X                     # SpMM; tuned once per (pattern, width, target), cached on disk
>>> E = A.sddmm(Q, K)             # SDDMM: A's values * (Q @ K.T) at A's nonzeros
>>> W = edge_softmax(A, E)        # GAT's attention normalisation over each row
>>> O = graph_attention(A, Q, K, V, heads=2)   # softmax(Q.K) @ V over A's pattern, fused on CPU

This subpackage imports torch; the rest of cognate_tvm does not need it. Its
modules import the real ``torch`` by absolute import (a module named
``cognate_tvm.torch`` never shadows it: Python 3 has no implicit relative
imports).
"""
from .cache import CACHE_ENV, ChoiceStore, cache_root
from .attention import graph_attention
from .functional import edge_softmax, sddmm, spmm
from .sparse_matrix import SparseMatrix, kernels_for
from .tuning import Pattern, TunedKernels, TuningFailedError

__all__ = ["CACHE_ENV", "ChoiceStore", "Pattern", "SparseMatrix", "TunedKernels", "TuningFailedError",
           "cache_root", "edge_softmax", "graph_attention", "kernels_for", "sddmm", "spmm"]
