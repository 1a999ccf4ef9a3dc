"""cognate_tvm.torch: tuned SpMM / SDDMM on torch tensors, their gradients, the choice cache, the errors.

The kernels compute in float32 only, so gradients are checked against float64
dense references (and torch.sparse for the forward) with float32 tolerances:
rtol 1e-4, atol 1e-4 times the largest magnitude of the reference; and with
torch.autograd.gradcheck at the tolerances given in `_gradcheck`. Tuning
itself (the shipped model, real measurements) runs once, on a small matrix.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from torch.autograd.gradcheck import GradcheckError

from cognate_tvm.errors import (DeviceMismatchError, DTypeError, IndexOutOfRangeError, LayoutError,
                                MatrixFormatError, ShapeError)
from cognate_tvm.matrix import generate
from cognate_tvm.space.cpu import CPUConfig, PANEL_ORDERS
from cognate_tvm.torch import SparseMatrix, TunedKernels, edge_softmax
from cognate_tvm.torch.cache import Choice, ChoiceStore

RTOL = 1e-4


def close(got: torch.Tensor, want, rtol: float = RTOL) -> bool:
    want = torch.as_tensor(np.asarray(want), dtype=torch.float64)
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    return torch.allclose(got.detach().double(), want, rtol=rtol, atol=rtol * scale)


def matrix(rows=120, cols=90, density=0.06, seed=0) -> sp.csr_matrix:
    m = sp.random_array((rows, cols), density=density, rng=np.random.default_rng(seed), format="csr",
                        dtype=np.float32)
    m.data = np.random.default_rng(seed + 1).standard_normal(m.nnz).astype(np.float32)
    keep = np.ones(rows, dtype=np.float32)
    keep[3] = 0.0  # an empty row
    out = sp.csr_matrix(sp.diags(keep) @ sp.csr_matrix(m), dtype=np.float32)
    out.eliminate_zeros()
    out.sort_indices()
    return out


@pytest.fixture(scope="module")
def baseline_kernels(tmp_path_factory):
    """Kernels of the space's baseline config: no measuring (tuning has its own test)."""
    return TunedKernels("cpu", num_threads=1, cache_dir=tmp_path_factory.mktemp("cache"), tune=False)


PANELS = CPUConfig(i_tile=4, k_panel=0, k_parts=4, j_tile=16, loop_order=PANEL_ORDERS[0], vector=8,
                   unroll=True, parallel=False, chunk=0)


def stored_kernels(root, configs: dict) -> TunedKernels:
    """Kernels whose choices for `matrix()` and its transpose are `configs[op]`, put in the store."""
    kernels = TunedKernels("cpu", num_threads=1, cache_dir=root)
    for m in (matrix(), matrix().T.tocsr()):
        pattern = SparseMatrix.from_scipy(m, kernels=kernels).pattern
        for op, config in configs.items():
            for feat in (5, 16):
                kernels.store.save(kernels.key(op, pattern, feat), Choice(config, 0.0, 0, None, None, "tuned"))
    return kernels


@pytest.fixture(scope="module")
def panel_kernels(tmp_path_factory):
    """Kernels of a column-panel config (the layout reorders the values), chosen through the store."""
    return stored_kernels(tmp_path_factory.mktemp("panels"), {"spmm": PANELS, "sddmm": PANELS})


# SpMM on register blocks of 2 rows (the layout adds zero fill; SDDMM, which has no blocks, keeps PANELS).
BLOCKED = CPUConfig(i_tile=2, k_panel=0, k_parts=1, j_tile=16, loop_order=PANEL_ORDERS[0], vector=8,
                    unroll=True, parallel=False, chunk=0, block_rows=2)


@pytest.fixture(scope="module")
def blocked_kernels(tmp_path_factory):
    """Kernels of a register-blocked SpMM config, chosen through the store."""
    return stored_kernels(tmp_path_factory.mktemp("blocked"), {"spmm": BLOCKED, "sddmm": PANELS})


@pytest.fixture(params=["baseline", "panels", "blocked"])
def kernels(request, baseline_kernels, panel_kernels, blocked_kernels):
    return {"baseline": baseline_kernels, "panels": panel_kernels, "blocked": blocked_kernels}[request.param]


@pytest.mark.parametrize("feat", [16, 5])
def test_spmm_forward_and_gradients(kernels, feat):
    m = matrix()
    values = torch.from_numpy(m.data.copy()).requires_grad_(True)
    a = SparseMatrix.from_scipy(m, kernels=kernels, values=values)
    b = torch.randn(m.shape[1], feat, generator=torch.Generator().manual_seed(1), requires_grad=True)
    out = a @ b
    assert close(out, torch.sparse.mm(a.to_torch(), b.detach()))
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    (out * weight).sum().backward()
    dense = m.toarray().astype(np.float64)
    rows, cols = m.nonzero()
    assert close(b.grad, dense.T @ weight.double().numpy())
    expected_values = (weight.double().numpy() @ b.detach().double().numpy().T)[rows, cols]
    assert close(values.grad, expected_values)


def test_sddmm_forward_and_gradients(kernels):
    m = matrix()
    values = torch.from_numpy(m.data.copy()).requires_grad_(True)
    a = SparseMatrix.from_scipy(m, kernels=kernels, values=values)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(m.shape[0], 16, generator=gen, requires_grad=True)
    y = torch.randn(m.shape[1], 16, generator=gen, requires_grad=True)
    out = a.sddmm(x, y)
    rows, cols = m.nonzero()
    dots = (x.detach().double() @ y.detach().double().T).numpy()[rows, cols]
    assert close(out, m.data * dots)
    weight = torch.randn(m.nnz, generator=gen)
    (out * weight).sum().backward()
    s = sp.csr_matrix((m.data.astype(np.float64) * weight.double().numpy(), m.indices, m.indptr), shape=m.shape)
    assert close(x.grad, s @ y.detach().double().numpy())
    assert close(y.grad, s.T @ x.detach().double().numpy())
    assert close(values.grad, weight.double().numpy() * dots)


def test_gat_style_chain_matches_dense_autograd(baseline_kernels):
    """SDDMM -> edge softmax -> SpMM with the attention as values, against float64 dense autograd."""
    m = matrix(rows=60, cols=60, density=0.1, seed=5)
    a = SparseMatrix.from_scipy(m, kernels=baseline_kernels)
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(60, 8, generator=gen, requires_grad=True) for _ in range(3))
    alpha = edge_softmax(a, a.with_values(a.ones()).sddmm(q, k))
    (a.with_values(alpha) @ v).square().sum().backward()
    mask = torch.from_numpy(m.toarray() != 0)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    scores = (q64 @ k64.T).masked_fill(~mask, float("-inf"))
    attention = torch.nan_to_num(torch.softmax(scores, dim=1))  # the empty row gets no weights
    (attention @ v64).square().sum().backward()
    for got, want in ((q, q64), (k, k64), (v, v64)):
        assert close(got.grad, want.grad, rtol=1e-3)


def test_transpose_has_its_own_pattern(baseline_kernels):
    m = matrix()
    a = SparseMatrix.from_scipy(m, kernels=baseline_kernels)
    b = torch.randn(m.shape[0], 8)
    assert a.T.shape == (m.shape[1], m.shape[0])
    assert close(a.T @ b, m.T @ b.double().numpy())
    assert a.T.pattern.digest != a.pattern.digest


def test_tunes_inside_an_autograd_forward(tmp_path):
    """A first product whose dense operand requires grad tunes inside the autograd Function's forward,
    where grad mode is off; the adaptive search's fine-tune (4 measurements: a second round) still runs."""
    m = generate("rmat", 300, seed=4)
    kernels = TunedKernels("cpu", num_threads=1, cache_dir=tmp_path, tune_options={"top_k": 4})
    b = torch.randn(m.shape[1], 8, requires_grad=True)
    out = SparseMatrix.from_scipy(m, kernels=kernels) @ b
    out.sum().backward()
    assert close(out, m @ b.detach().double().numpy())
    assert kernels.history[0]["source"] == "tuned" and kernels.history[0]["measured"] >= 4


def test_tunes_once_then_reads_the_choice(tmp_path):
    """The shipped model and tune's defaults (fewer finalists for speed); a second process-like
    object with the same cache directory measures nothing."""
    m = generate("rmat", 400, seed=2)
    b = torch.randn(m.shape[1], 16)
    first = TunedKernels("cpu", num_threads=1, cache_dir=tmp_path, tune_options={"top_k": 2})
    out = SparseMatrix.from_scipy(m, kernels=first) @ b
    assert close(out, m @ b.double().numpy())
    assert [h["source"] for h in first.history] == ["tuned"] and first.history[0]["measured"] >= 2
    stored = list((tmp_path / "choices").glob("*.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["key"]["feat"] == 16
    second = TunedKernels("cpu", num_threads=1, cache_dir=tmp_path, tune_options={"top_k": 2})
    calls = []
    second.platform.backend.measure = lambda *a, **k: calls.append(a)  # must not be called
    again = SparseMatrix.from_scipy(m, kernels=second) @ b
    assert not calls and [h["source"] for h in second.history] == ["cache"]
    assert second.history[0]["config"] == first.history[0]["config"] and close(again, out.double())
    assert second.platform.backend.kernel_cache.hits["built"] == 0  # the kernel came from disk too


def test_stored_choice_of_another_key_is_not_used(tmp_path):
    store = ChoiceStore(tmp_path)
    kernels = TunedKernels("cpu", num_threads=1, cache_dir=tmp_path)
    pattern = SparseMatrix.from_scipy(matrix(), kernels=kernels).pattern
    key = kernels.key("spmm", pattern, 16)
    store.save(key, Choice(PANELS, 1.0, 3, None, None, "tuned"))
    path = store.path(key)
    record = json.loads(path.read_text())
    record["key"]["feat"] = 32
    path.write_text(json.dumps(record))
    assert ChoiceStore(tmp_path).load(key, kernels.platform.space("spmm")) is None
    path.write_text("{ truncated")
    assert ChoiceStore(tmp_path).load(key, kernels.platform.space("spmm")) is None


def test_no_copies_of_dense_operands(baseline_kernels):
    """The kernel reads B and the values where torch keeps them (DLPack), and a constant layout is cached."""
    m = matrix()
    a = SparseMatrix.from_scipy(m, kernels=baseline_kernels)
    b = torch.randn(m.shape[1], 16)
    runner = baseline_kernels.runner("spmm", a.pattern, 16)
    assert runner.width == 16 and runner.order is None  # plain CSR, no padding: nothing to copy
    before = b.clone()
    c = a @ b
    assert torch.equal(b, before) and c.is_contiguous() and c.shape == (m.shape[0], 16)


def test_errors_name_the_bad_operand(baseline_kernels):
    m = matrix()
    a = SparseMatrix.from_scipy(m, kernels=baseline_kernels)
    b = torch.randn(m.shape[1], 8)
    with pytest.raises(DTypeError, match="float64"):
        a @ b.double()
    with pytest.raises(ShapeError, match=r"\[90, N\]"):
        a @ torch.randn(m.shape[1] + 1, 8)
    with pytest.raises(LayoutError, match="contiguous"):
        a @ torch.randn(8, m.shape[1]).T
    with pytest.raises(DeviceMismatchError, match="meta"):
        a @ torch.empty(m.shape[1], 8, device="meta")
    with pytest.raises(ShapeError, match="width|\\[90, 8\\]"):
        a.sddmm(torch.randn(m.shape[0], 8), torch.randn(m.shape[1], 4))
    with pytest.raises(ShapeError, match="nonzeros"):
        a.with_values(torch.ones(m.nnz + 1))
    bad = sp.csr_matrix((np.ones(2, np.float32), np.array([0, 7]), np.array([0, 1, 2])), shape=(2, 7))
    with pytest.raises(IndexOutOfRangeError, match="column index 7"):
        SparseMatrix.from_scipy(bad, kernels=baseline_kernels)
    shuffled = sp.csr_matrix((np.ones(2, np.float32), np.array([3, 1]), np.array([0, 2])), shape=(1, 4))
    with pytest.raises(MatrixFormatError, match="sum_duplicates"):
        SparseMatrix.from_scipy(shuffled, kernels=baseline_kernels, values=torch.ones(2))
    unsorted = torch.sparse_csr_tensor(torch.tensor([0, 2]), torch.tensor([3, 1]), torch.ones(2), size=(1, 4))
    with pytest.raises(MatrixFormatError, match="sorted"):
        SparseMatrix.from_torch(unsorted, kernels=baseline_kernels)


def test_from_torch_keeps_the_values_tensor(baseline_kernels):
    m = matrix()
    t = torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(np.int64)), torch.from_numpy(m.indices.astype(np.int64)),
                                torch.from_numpy(m.data), size=m.shape)
    a = SparseMatrix.from_torch(t, kernels=baseline_kernels)
    b = torch.randn(m.shape[1], 8)
    assert close(a @ b, m @ b.double().numpy())


def test_empty_matrix(baseline_kernels):
    a = SparseMatrix.from_scipy(sp.csr_matrix((5, 4), dtype=np.float32), kernels=baseline_kernels)
    assert torch.equal(a @ torch.ones(4, 3), torch.zeros(5, 3))
    assert a.sddmm(torch.ones(5, 3), torch.ones(4, 3)).shape == (0,)


def test_cuda_device_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the CUDA path is exercised by the GPU tests instead")
    from cognate_tvm.errors import DeviceUnavailableError

    with pytest.raises(DeviceUnavailableError, match="CUDA"):
        TunedKernels("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU and a CUDA build of torch")
def test_cuda_spmm_sddmm_and_gradients(tmp_path):
    m = matrix(rows=500, cols=400, density=0.02)
    kernels = TunedKernels("cuda", cache_dir=tmp_path, tune=False)
    values = torch.from_numpy(m.data.copy()).cuda().requires_grad_(True)
    a = SparseMatrix.from_scipy(m, kernels=kernels, values=values)
    b = torch.randn(m.shape[1], 32, device="cuda", requires_grad=True)
    out = a @ b
    assert close(out.cpu(), m @ b.detach().cpu().double().numpy())
    out.sum().backward()
    assert close(b.grad.cpu(), m.T @ np.ones((m.shape[0], 32)))
    x, y = torch.randn(m.shape[0], 32, device="cuda"), torch.randn(m.shape[1], 32, device="cuda")
    rows, cols = m.nonzero()
    dots = (x.double() @ y.double().T).cpu().numpy()[rows, cols]
    assert close(a.sddmm(x, y).cpu(), m.data * dots)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@pytest.mark.parametrize("parts,bucketing", [(1, False), (4, False), (2, True)])
def test_cuda_value_slots_rebuild_the_prepared_values(op, parts, bucketing):
    """Without a GPU: the CUDA runner gathers each call's values into exactly the arrays the
    kernel's host-side preparation makes (column panels, ELL buckets with padding)."""
    from cognate_tvm.kernels import cuda_prep
    from cognate_tvm.space.gpu import GPUConfig
    from cognate_tvm.torch.runners import cuda_value_slots

    m = generate("rmat", 700, seed=6)
    m.data = np.random.default_rng(0).standard_normal(m.nnz).astype(np.float32)
    config = GPUConfig(parts=parts, rows_per_block=2, tx=8, vec=2, bucketing=bucketing,
                       atomics=bucketing and op == "spmm")
    prepared = cuda_prep.prepare_sparse(op, m, config)
    slots = cuda_value_slots(op, m, config)
    assert len(slots) == (2 if bucketing else 1)
    for n, index in slots:
        rebuilt = np.where(index >= 0, m.data[np.maximum(index, 0)], 0.0)
        assert np.array_equal(rebuilt, prepared.arrays[n])


def _gradcheck(function, inputs) -> bool:
    """torch.autograd.gradcheck on the float32 kernels: the whole Jacobian, one input element at a
    time. Each op is linear in every single element, so central differences are exact but for
    float32 rounding: eps 1e-2 keeps that near 1e-5 of the outputs, inside atol / rtol 2e-3.
    (Its fast mode, a single random direction, lets a 1% error through at these tolerances.)"""
    return torch.autograd.gradcheck(function, inputs, eps=1e-2, atol=2e-3, rtol=2e-3, check_undefined_grad=False)


@pytest.mark.filterwarnings("ignore:Input #")  # gradcheck prefers float64; the kernels are float32
@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_gradcheck_in_values_and_dense_operands(kernels, op):
    m = matrix()
    a = SparseMatrix.from_scipy(m, kernels=kernels)
    gen = torch.Generator().manual_seed(4)
    values = torch.from_numpy(m.data.copy()).requires_grad_(True)
    x = torch.randn(m.shape[0], 5, generator=gen, requires_grad=True)
    y = torch.randn(m.shape[1], 5, generator=gen, requires_grad=True)
    # gradcheck perturbs its inputs through `.data`, which torch's version counter does not see, so a
    # layout's cached gather of the values would miss it; a clone per call is a new tensor
    if op == "spmm":
        assert _gradcheck(lambda v, b: a.with_values(v.clone()) @ b, (values, y))
    else:
        assert _gradcheck(lambda v, p, q: a.with_values(v.clone()).sddmm(p, q), (values, x, y))


@pytest.mark.filterwarnings("ignore:Input #")
def test_gradcheck_catches_a_wrong_gradient(baseline_kernels):
    """The check above can fail: a backward scaled by 1.01 is caught at these tolerances."""
    m = matrix()
    a = SparseMatrix.from_scipy(m, kernels=baseline_kernels)

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, b):
            return b.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad * 1.01

    dense = torch.randn(m.shape[1], 5, generator=torch.Generator().manual_seed(6), requires_grad=True)
    with pytest.raises(GradcheckError):
        _gradcheck(lambda b: a @ Scaled.apply(b), (dense,))


def test_cpu_kernels_make_tvm_workers_sleep_between_kernels(tmp_path):
    """cognate_tvm.torch sets TVM's pool spin count to 0 before the pool starts, unless the user chose one."""
    import subprocess
    import sys

    code = ("import os; from cognate_tvm.torch import TunedKernels; TunedKernels('cpu', num_threads=1, "
            f"cache_dir={str(tmp_path)!r}, tune=False); print(os.environ['TVM_THREAD_POOL_SPIN_COUNT'])")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TVM_THREAD_POOL_SPIN_COUNT"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.split()[-1] == "0"
    env["TVM_THREAD_POOL_SPIN_COUNT"] = "1000"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.split()[-1] == "1000"
