"""graph_attention: the fused CPU kernel and the composed path against float64 dense attention; gradients
by gradcheck and against dense autograd; edge cases (empty rows, one nonzero, rectangular, head widths
that are not a multiple of the vector width); bad operands."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from cognate_tvm.errors import DTypeError, ShapeError
from cognate_tvm.kernels.cpu_attention import AttentionSpec, attention_source, lanes_for, padded_dim
from cognate_tvm.torch import SparseMatrix, TunedKernels, graph_attention
from cognate_tvm.torch.nn import GAT


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return TunedKernels("cpu", num_threads=2, cache_dir=tmp_path_factory.mktemp("cache"), tune=False)


def pattern(rows, cols, density, seed, *, empty=(3,)) -> sp.csr_matrix:
    m = sp.random_array((rows, cols), density=density, rng=np.random.default_rng(seed), format="csr",
                        dtype=np.float32)
    m = sp.csr_matrix(m)
    for r in empty:
        m.data[m.indptr[r]:m.indptr[r + 1]] = 0.0
    m.eliminate_zeros()
    m.sort_indices()
    return m


def single_nonzero() -> sp.csr_matrix:
    return sp.csr_matrix((np.ones(1, np.float32), ([2], [4])), shape=(5, 7))


CASES = {
    "square-empty-row": (pattern(60, 60, 0.1, 1), 2, 8, 8),
    "rectangular-wide": (pattern(30, 80, 0.08, 2), 3, 20, 7),
    "rectangular-tall": (pattern(90, 25, 0.15, 3, empty=(0, 89)), 1, 16, 40),
    "single-nonzero": (single_nonzero(), 2, 5, 3),
    "hub-row": (sp.csr_matrix(sp.vstack([np.ones((1, 50)), pattern(40, 50, 0.05, 4)]), dtype=np.float32),
                1, 33, 16),
}


def operands(m, heads, d, dv, seed=0, grad=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(m.shape[0], heads * d, generator=gen)
    k = torch.randn(m.shape[1], heads * d, generator=gen)
    v = torch.randn(m.shape[1], heads * dv, generator=gen)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def dense_attention(m, q, k, v, heads, scale):
    """float64 reference: a masked softmax per head (a row without nonzeros gets zeros)."""
    mask = torch.from_numpy(m.toarray() != 0)
    outs = []
    for qh, kh, vh in zip(q.chunk(heads, 1), k.chunk(heads, 1), v.chunk(heads, 1)):
        scores = (qh @ kh.T * scale).masked_fill(~mask, float("-inf"))
        outs.append(torch.nan_to_num(torch.softmax(scores, dim=1)) @ vh)
    return torch.cat(outs, dim=1)


def close(got, want, rtol=1e-4):
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    return torch.allclose(got.detach().double(), want.detach().double(), rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("fused", [True, False])
def test_forward_matches_dense(kernels, case, fused):
    m, heads, d, dv = CASES[case]
    a = SparseMatrix.from_scipy(m, kernels=kernels)
    q, k, v = operands(m, heads, d, dv)
    out = graph_attention(a, q, k, v, heads=heads, fused=fused)
    assert out.shape == (m.shape[0], heads * dv)
    want = dense_attention(m, q.double(), k.double(), v.double(), heads, d ** -0.5)
    assert close(out, want)
    empty = np.flatnonzero(np.diff(m.indptr) == 0)
    assert torch.all(out[empty] == 0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_gradients_match_dense_autograd(kernels, case):
    m, heads, d, dv = CASES[case]
    a = SparseMatrix.from_scipy(m, kernels=kernels)
    q, k, v = operands(m, heads, d, dv, seed=1, grad=True)
    weight = torch.randn(m.shape[0], heads * dv, generator=torch.Generator().manual_seed(2))
    (graph_attention(a, q, k, v, heads=heads, scale=0.3) * weight).sum().backward()
    ref = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    (dense_attention(m, *ref, heads, 0.3) * weight.double()).sum().backward()
    for got, want in zip((q, k, v), ref):
        assert close(got.grad, want.grad, rtol=1e-3)


@pytest.mark.filterwarnings("ignore:Input #")
def test_fused_gradcheck(kernels):
    """The whole Jacobian by central differences (float32 kernels: eps 1e-3, tolerances 5e-3)."""
    m, heads, d, dv = pattern(12, 10, 0.3, 7, empty=(4,)), 2, 3, 2
    a = SparseMatrix.from_scipy(m, kernels=kernels)
    q, k, v = operands(m, heads, d, dv, seed=3, grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v: graph_attention(a, q, k, v, heads=heads), (q, k, v),
                                    eps=1e-3, atol=5e-3, rtol=5e-3)


@pytest.mark.filterwarnings("ignore:Input #")
def test_gradcheck_catches_a_wrong_backward(kernels, monkeypatch):
    """The check above can fail: a backward whose q gradient is 5% off fails it."""
    from cognate_tvm.torch import attention

    real_backward = attention._FusedAttention.backward

    class OffByFivePercent(attention._FusedAttention):
        @staticmethod
        def backward(ctx, grad):
            grads = list(real_backward(ctx, grad))
            grads[4] = grads[4] * 1.05
            return tuple(grads)

    m = pattern(12, 10, 0.3, 7, empty=(4,))
    a = SparseMatrix.from_scipy(m, kernels=kernels)
    q, k, v = operands(m, 1, 3, 2, seed=3, grad=True)
    monkeypatch.setattr(attention, "_FusedAttention", OffByFivePercent)
    assert not torch.autograd.gradcheck(lambda q, k, v: graph_attention(a, q, k, v), (q, k, v), eps=1e-3,
                                        atol=5e-3, rtol=5e-3, raise_exception=False)


def test_bfloat16_kernels_backward_within_bound(tmp_path):
    """With bfloat16 dense operands the forward stays float32 (fused); the backward's SpMM/SDDMM round."""
    kernels = TunedKernels("cpu", num_threads=1, cache_dir=tmp_path, tune=False, dtype="bfloat16")
    m, heads, d, dv = CASES["square-empty-row"]
    a = SparseMatrix.from_scipy(m, kernels=kernels)
    q, k, v = operands(m, heads, d, dv, seed=4, grad=True)
    graph_attention(a, q, k, v, heads=heads).sum().backward()
    ref = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    dense_attention(m, *ref, heads, d ** -0.5).sum().backward()
    for got, want in zip((q, k, v), ref):
        assert close(got.grad, want.grad, rtol=3e-2)


def test_gat_model_fused_and_composed_agree(kernels):
    m = pattern(50, 50, 0.1, 9)
    a = SparseMatrix.from_scipy(m, kernels=kernels)
    torch.manual_seed(0)
    fused = GAT(6, 4, 3, heads=2, dropout=0.0)
    composed = GAT(6, 4, 3, heads=2, dropout=0.0, fused=False)
    composed.load_state_dict(fused.state_dict())
    x = torch.randn(50, 6)
    assert close(fused(x, a), composed(x, a).double())


def test_bad_operands_are_named(kernels):
    m, heads, d, dv = CASES["square-empty-row"]
    a = SparseMatrix.from_scipy(m, kernels=kernels)
    q, k, v = operands(m, heads, d, dv)
    with pytest.raises(ShapeError, match="3 heads"):
        graph_attention(a, q, k, v, heads=3)
    with pytest.raises(ShapeError, match="k has shape"):
        graph_attention(a, q, k[:, :-1].contiguous(), v, heads=heads)
    with pytest.raises(DTypeError):
        graph_attention(a, q.double(), k, v, heads=heads)
    with pytest.raises(ValueError, match="heads"):
        graph_attention(a, q, k, v, heads=0)


def test_padding_and_spec():
    assert [lanes_for(d) for d in (1, 3, 8, 9, 16, 40)] == [1, 4, 8, 16, 16, 16]
    assert [padded_dim(d) for d in (1, 3, 7, 16, 20, 33)] == [1, 4, 8, 16, 32, 48]
    with pytest.raises(ValueError, match="not padded"):
        AttentionSpec(1, 20, 16, "llvm", 2)
    source = attention_source(AttentionSpec(2, 16, 8, "llvm", 2))
    assert "T.exp" in source and "T.parallel(2)" in source

