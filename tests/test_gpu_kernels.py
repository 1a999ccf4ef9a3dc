"""CUDA kernels: format preparation (CPU), lowering + nvcc PTX for every config, timing, GPU execution.

Without nvcc the PTX tests skip; without a GPU the execution tests skip. "No
GPU" is what the NVIDIA driver says (libcuda.so.1), never what TVM says: on a
machine whose driver sees a GPU, a TVM that cannot load its CUDA runtime (e.g.
no libcudart.so.13) fails the GPU tests instead of skipping them. Every kernel
variant of both ops is built into one TVM module per arch and the whole CUDA
source goes through one nvcc call per arch (the two archs in parallel).
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import re
import time

import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm import backends
from cognate_tvm.backends.cuda import time_launches as bcuda_time_launches
from cognate_tvm.errors import DeviceUnavailableError, InvalidConfigError
from cognate_tvm.kernels import cuda as kcuda
from cognate_tvm.kernels import cuda_prep
from cognate_tvm.matrix import as_csr, generate
from cognate_tvm.ops import get_op
from cognate_tvm.space import create
from cognate_tvm.space.gpu import GPUConfig


def torch_int32():
    import torch

    return torch.int32

OPS = ("spmm", "sddmm")
NVCC = kcuda.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH, /usr/local/cuda/bin)")


# TVM compiles device code when a module is loaded on a GPU: with NVRTC (cuda-bindings) or
# nvcc. The tests choose it the way the backend and benchmarks/gpu_check.py do.
COMPILE_MODE = kcuda.select_compile_mode()
GPU_COUNT, GPU_DETAIL = kcuda.driver_gpu_count()


needs_gpu = pytest.mark.skipif(GPU_COUNT == 0, reason=f"no NVIDIA GPU: {GPU_DETAIL}")


def _edge_matrices() -> dict[str, sp.csr_matrix]:
    """Empty rows and columns, a single nonzero, rectangular shapes, rows longer than any bucket."""
    rng = np.random.default_rng(0)
    lengths = rng.choice([0, 0, 1, 2, 3, 6, 13, 33, 70], size=90)
    rows = np.repeat(np.arange(90), lengths)
    cols = np.concatenate([rng.choice(150, size=n, replace=False) for n in lengths])
    skewed = sp.coo_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(90, 150))
    return {
        "skewed_wide": as_csr(skewed),
        "single_nonzero": as_csr(sp.csr_matrix(([1.5], ([4], [2])), shape=(7, 5))),
        "tall_empty_rows": as_csr(sp.random_array((120, 9), density=0.15, rng=rng)),
        "graph": generate("rmat", 200, seed=3),
    }


# -- CPU side: keys and format preparation ---------------------------------------------
@pytest.mark.parametrize("op", OPS)
def test_every_config_has_a_kernel_variant(op):
    space = create("gpu", op)
    keys = {kcuda.kernel_key(op, c) for c in space.configs()}
    assert keys == set(kcuda.all_keys(op))
    assert len(keys) == {"spmm": 60, "sddmm": 36}[op]
    assert sum(k.layout == "chunk" for k in keys) == 12
    with pytest.raises(InvalidConfigError, match="GPUConfig"):
        kcuda.kernel_key(op, object())


@pytest.mark.parametrize("op", OPS)
def test_prepared_layouts_compute_the_op(op):
    """The prepared arrays, indexed as the kernels index them, give scipy's result."""
    op = get_op(op)
    configs = {}  # one config per prepared layout and vector width
    for config in create("gpu", op.name).configs():
        configs.setdefault((cuda_prep.layout_key(config), config.vec), config)
    assert len(configs) == 4 * 2 * 3 + 4 * 2 * 2  # plain (parts, bucketing, vec) + chunked (parts, chunk, swizzle)
    for name, matrix in _edge_matrices().items():
        dense = op.make_dense_inputs(matrix, 13, seed=1)  # 13: not a multiple of vec
        expected = op.reference(matrix, *dense)
        for config in configs.values():
            got = cuda_prep.emulate(op, matrix, config, dense)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} {config}")


@pytest.mark.parametrize("parts", [1, 3, 8])
def test_partitions_and_buckets_reassemble_matrix(parts):
    matrix = _edge_matrices()["skewed_wide"]
    config = GPUConfig(parts, 1, 4, 1, True, parts > 1)
    args = cuda_prep.prepare_sparse("sddmm", matrix, config)
    ell_rows, ell_cols, ell_vals, ell_pos, rest_rows, rest_start, rest_end, indices, data, pos = args.arrays
    counts, q = args.scalars[:-1], args.scalars[-1]
    rebuilt = np.zeros(matrix.shape)
    seen = []
    r0 = e0 = 0
    for width, n in zip(kcuda.ELL_WIDTHS, counts):
        for r in range(n):
            for s in range(e0 + r * width, e0 + (r + 1) * width):
                if ell_pos[s] >= 0:
                    rebuilt[ell_rows[r0 + r], ell_cols[s]] += ell_vals[s]
                    seen.append(ell_pos[s])
                    assert matrix.indices[ell_pos[s]] == ell_cols[s]
        r0, e0 = r0 + n, e0 + n * width
    for r in range(q):
        for n in range(rest_start[r], rest_end[r]):
            rebuilt[rest_rows[r], indices[n]] += data[n]
            seen.append(pos[n])
            assert rest_end[r] - rest_start[r] > kcuda.ELL_WIDTHS[-1]
    np.testing.assert_allclose(rebuilt, matrix.toarray(), atol=1e-6)
    assert sorted(seen) == list(range(matrix.nnz))
    width = cuda_prep.panel_width(matrix.shape[1], parts)
    assert all(matrix.indices[p] // width == indices[n] // width for n, p in enumerate(pos))


@pytest.mark.parametrize("op", OPS)
def test_kernel_args_bind_to_every_variant_signature(op):
    """What TVM's argument binder checks: count, dtypes, ranks and consistent shape variables."""
    matrix = _edge_matrices()["skewed_wide"]
    dense = get_op(op).make_dense_inputs(matrix, 13, seed=0)
    by_key = {}
    for config in create("gpu", op).configs():
        by_key.setdefault(kcuda.kernel_key(op, config), config)
    for key, config in by_key.items():
        func = kcuda.make_prim_func(key)
        sparse = cuda_prep.prepare_sparse(op, matrix, config)
        padded, nvec = cuda_prep.pad_dense(dense, config.vec)
        output = cuda_prep.empty_output(sparse, nvec, config.vec)
        args = cuda_prep.kernel_args(sparse, padded, output, nvec, config.rows_per_block)
        assert len(args) == len(func.params), key
        assert [p.name for p in func.params] == cuda_prep.arg_names(sparse), key
        env, dims = {}, []
        for param, arg in zip(func.params, args):
            if hasattr(param, "shape"):
                assert isinstance(arg, np.ndarray) and arg.dtype == np.dtype(str(param.dtype)), \
                    (key, param.name)
                assert arg.ndim == len(param.shape) and arg.flags.c_contiguous, (key, param.name)
                dims += [(str(d), n, param.name) for d, n in zip(param.shape, arg.shape)]
            else:
                assert isinstance(arg, int), (key, param.name)
                env[param.name] = arg
        for text, size, name in dims:  # plain variables first: they define the rest
            if text.isidentifier():
                assert env.setdefault(text, size) == size, (key, name, text, env[text], size)
        for text, size, name in dims:
            assert eval(text, {}, dict(env)) == size, (key, name, text)
        assert env["nvec"] == nvec and env["I_1" if "I_1" in env else "I"] == config.rows_per_block


def test_pad_dense_keeps_values_and_aligns():
    dense = [np.arange(14, dtype=np.float32).reshape(2, 7)]
    padded, nvec = cuda_prep.pad_dense(dense, 4)
    assert nvec == 2 and padded[0].shape == (2, 8)
    np.testing.assert_array_equal(padded[0][:, :7], dense[0])
    assert not padded[0][:, 7].any()


# -- lowering and PTX ------------------------------------------------------------------------
def _lower_and_compile(arch: str) -> tuple[list[str], frozenset[str]]:
    """All variants of both ops for `arch`: (kernels missing from the CUDA source, PTX entries)."""
    keys = kcuda.all_keys("spmm") + kcuda.all_keys("sddmm")
    source = kcuda.cuda_source(kcuda.build(keys, arch=arch))
    missing = [name for key in keys for name in key.kernel_names if f" {name}(" not in source]
    return missing, frozenset(kcuda.ptx_entries(kcuda.compile_ptx(source, arch=arch)))


@pytest.fixture(scope="module")
def ptx_entries() -> dict[str, frozenset[str]]:
    # One process per arch (TVM build, then nvcc), side by side on two cores.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(len(kcuda.ARCHS), mp_context=context) as pool:
        done = {arch: pool.submit(_lower_and_compile, arch) for arch in kcuda.ARCHS}
        out = {}
        for arch, future in done.items():
            missing, entries = future.result()
            assert not missing, f"{arch}: kernels missing from the CUDA source: {missing[:5]}"
            out[arch] = entries
        return out


@needs_nvcc
@pytest.mark.parametrize("arch", kcuda.ARCHS)
@pytest.mark.parametrize("op", OPS)
def test_every_config_compiles_to_ptx(ptx_entries, op, arch):
    entries = ptx_entries[arch]
    for config in create("gpu", op).configs():
        names = kcuda.kernel_key(op, config).kernel_names
        assert set(names) <= entries, f"{config} ({arch}): missing {set(names) - entries}"


@needs_nvcc
def test_ptx_uses_vector_loads_shuffles_and_atomics(tmp_path):
    keys = [kcuda.KernelKey("spmm", "csr", "atomic", 8, 4),
            kcuda.KernelKey("sddmm", "csr", "parallel", 8, 4)]
    source = kcuda.cuda_source(kcuda.build(keys, arch="sm_80"))
    ptx = kcuda.compile_ptx(source, arch="sm_80")
    assert "float4" in source and re.search(r"ld\.global(\.nc)?\.v4\.f32", ptx)
    assert "__shfl_xor_sync" in source and "shfl.sync.bfly" in ptx
    assert "atomicAdd" in source and ("red.global.add.f32" in ptx or "atom.global.add.f32" in ptx)


@needs_nvcc
def test_compile_only_backend(tmp_path):
    matrix = _edge_matrices()["skewed_wide"]
    space = create("gpu", "spmm")
    configs = space.sample(12, seed=0) + [GPUConfig(1, 2, 8, 4, False, True)]  # last is invalid
    backend = backends.create("cuda", arch="sm_90", compile_only=True, source_dir=tmp_path)
    results = backend.measure("spmm", matrix, configs, 64)
    assert [r.extra["compiled"] for r in results] == [True] * 12 + [False]
    assert all(r.error is None and r.time_ms is None for r in results[:12])
    assert "invalid config" in results[-1].error
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".cu", ".ptx"]
    assert results[0].to_dict()["compiled"] is True


def test_compile_only_without_nvcc_reports_not_compiled(tmp_path):
    backend = backends.create("cuda", compile_only=True, nvcc=tmp_path / "no-nvcc")
    results = backend.measure("sddmm", _edge_matrices()["graph"], create("gpu", "sddmm").sample(3, seed=2), 32)
    assert [r.extra["compiled"] for r in results] == [False] * 3
    assert all("nvcc not found" in r.error for r in results)


def test_backend_settings_are_checked():
    backend = backends.create("cuda", arch="sm_90", number=7)
    quick = backend.with_timing(number=1, repeat=1)
    assert (quick.arch, quick.number, quick.repeat) == ("sm_90", 1, 1) and quick._libs is backend._libs
    assert backend.metadata()["arch"] == "sm_90" and backend.vendor().name == "cusparse"
    with pytest.raises(InvalidConfigError, match="sm_70"):
        backends.create("cuda", arch="sm_70")
    with pytest.raises(ValueError, match="feat must be >= 1"):
        backends.create("cuda", compile_only=True).measure("spmm", _edge_matrices()["graph"], [], 0)


@pytest.mark.skipif(GPU_COUNT > 0, reason="a GPU is present: the no-GPU error does not apply")
def test_measure_without_gpu_raises_clear_error():
    backend = backends.create("cuda")
    with pytest.raises(DeviceUnavailableError, match="compile_only=True") as info:
        backend.measure("spmm", _edge_matrices()["graph"], [create("gpu", "spmm").baseline()], 32)
    assert "libcuda.so.1" in str(info.value) or "driver" in str(info.value)
    with pytest.raises(DeviceUnavailableError, match="compile_only=True"):
        backend.prepare(["spmm"])  # a module built without TVM's CUDA runtime could never run


def test_gpu_without_a_usable_tvm_runtime_is_an_error_not_no_gpu(monkeypatch):
    """The driver sees a GPU but libtvm_runtime_cuda.so does not load: the message says why."""
    from cognate_tvm.backends import cuda as bcuda

    reason = "OSError: libcudart.so.13: cannot open shared object file: No such file or directory"
    monkeypatch.setattr(kcuda, "cuda_runtime_status", lambda device_id=0: {
        "driver_gpus": 1, "driver": "the NVIDIA driver reports 1 GPU(s)", "tvm_runtime_error": reason,
        "tvm_device": False, "compile_mode": "nvcc", "nvcc": None})
    with pytest.raises(DeviceUnavailableError, match="cannot use it") as info:
        bcuda.require_gpu(0)
    assert "libcudart.so.13" in str(info.value) and "compile_only" not in str(info.value)


def test_compile_mode_is_chosen_and_explicit_settings_win(monkeypatch, tmp_path):
    assert os.environ[kcuda.COMPILE_MODE_ENV] in ("nvcc", "nvrtc") and COMPILE_MODE in ("nvcc", "nvrtc")
    assert kcuda.select_compile_mode({kcuda.COMPILE_MODE_ENV: "NVRTC"}) == "nvrtc"
    fake_nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    fake_nvcc.parent.mkdir(parents=True)
    fake_nvcc.write_text("#!/bin/sh\n")
    fake_nvcc.chmod(0o755)
    monkeypatch.setattr(kcuda.importlib.util, "find_spec", lambda name: None)  # no cuda-bindings
    monkeypatch.setattr(kcuda, "find_nvcc", lambda nvcc=None: str(fake_nvcc))
    env = {"PATH": str(tmp_path / "empty")}
    assert kcuda.select_compile_mode(env) == "nvcc"
    assert env[kcuda.COMPILE_MODE_ENV] == "nvcc" and env["PATH"].split(os.pathsep)[0] == str(fake_nvcc.parent)


def test_runtime_status_tells_driver_and_tvm_apart():
    status = kcuda.cuda_runtime_status(0)
    assert status["driver_gpus"] == GPU_COUNT and status["compile_mode"] in ("nvcc", "nvrtc")
    if GPU_COUNT == 0:
        assert status["tvm_device"] is False
    else:  # a GPU machine: TVM must be able to use it (fails, never skips)
        assert status["tvm_runtime_error"] is None and status["tvm_device"], status


# -- timing and checking: the same code for our kernels and cuSPARSE -----------------------
class HostEvent:
    """A stand-in for torch.cuda.Event that reads the host clock."""

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


def test_time_launches_runs_back_to_back_and_checks_every_sample():
    calls, events = [], []

    def launch():
        calls.append(("launch", len(events)))
        time.sleep(0.0002)

    def make_event():
        events.append(HostEvent())
        return events[-1]

    fills, checks = [], iter([True, False, True])
    timing = bcuda_time_launches(launch, make_event=make_event, number=4, repeat=3,
                                 before=lambda: fills.append(len(calls)), after=lambda: next(checks))
    assert timing.number == 4 and len(timing.samples_ms) == 3 and timing.checks == [True, False, True]
    assert len(calls) == 12 and fills == [0, 4, 8]  # the fill comes before each sample, outside its events
    assert len(events) == 6 and all(0.15 < t < 50 for t in timing.samples_ms)  # per launch, not per sample
    assert timing.median_ms == sorted(timing.samples_ms)[1]
    with pytest.raises(ValueError, match="number and repeat"):
        bcuda_time_launches(launch, make_event=make_event, number=0, repeat=1)


def test_time_launches_raises_launch_count_to_fill_a_sample():
    count = [0]

    def launch():
        count[0] += 1
        time.sleep(0.0005)

    timing = bcuda_time_launches(launch, make_event=HostEvent, number=1, repeat=2, min_sample_ms=5.0)
    assert timing.number >= 6 and count[0] >= 2 * timing.number
    assert all(s * timing.number >= 4.0 for s in timing.samples_ms)


def test_outputs_match_rejects_nan_and_unwritten():
    from cognate_tvm.backends.cuda import outputs_match

    expected = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    assert outputs_match(expected, expected + 1e-5)
    partial = expected.copy()
    partial[1, 2] = np.nan  # an element the kernel never wrote, after a NaN fill
    assert not outputs_match(expected, partial) and not outputs_match(expected, expected[:2])


@pytest.mark.parametrize("op", OPS)
def test_cusparse_launcher_on_cpu_int32_no_extra_multiply(op):
    """The vendor path, run through torch's CPU kernels: int32 CSR, and SDDMM's timed call returns
    the sampled dot products only (A's values are applied outside the timing)."""
    from cognate_tvm.backends.cuda import CuSparseLibrary, csr_tensor

    op_ = get_op(op)
    matrix = _edge_matrices()["skewed_wide"]
    dense = op_.make_dense_inputs(matrix, 13, seed=0)
    assert csr_tensor(matrix, "cpu").crow_indices().dtype == torch_int32()
    library = CuSparseLibrary(number=2, repeat=2, min_sample_ms=0)
    launch, finish = library.launcher(op, matrix, dense, device="cpu")
    raw = launch()
    np.testing.assert_allclose(finish(raw), op_.reference(matrix, *dense), rtol=1e-4, atol=1e-4)
    if op == "sddmm":
        rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
        dots = np.einsum("nj,nj->n", dense[0][rows], dense[1][matrix.indices])
        np.testing.assert_allclose(raw.values().numpy(), dots, rtol=1e-4, atol=1e-4)
    result = library.measure(op, matrix, 13, device="cpu", make_event=HostEvent)
    assert result["correct"] is True and result["wrong_runs"] == [] and len(result["samples_ms"]) == 2
    assert result["time_ms"] > 0 and "int32" in result["method"]


def test_backend_vendor_shares_timing_settings():
    backend = backends.create("cuda", number=7, repeat=3, min_repeat_ms=2.5)
    vendor = backend.vendor()
    assert (vendor.number, vendor.repeat, vendor.min_sample_ms) == (7, 3, 2.5)


# -- GPU execution (skipped without a GPU; fails on a GPU that TVM cannot use) ---------------
@pytest.fixture(scope="module")
def gpu_backend():
    """One backend for all GPU tests, so every kernel variant is built once."""
    status = kcuda.cuda_runtime_status(0)
    assert status["tvm_device"], f"a GPU is present ({status['driver']}) but TVM cannot use it: {status}"
    return backends.create("cuda", number=2, repeat=2, min_repeat_ms=0)


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", sorted(_edge_matrices()))
def test_every_config_is_correct_on_gpu(gpu_backend, op, name):
    matrix = _edge_matrices()[name]
    backend = gpu_backend
    configs = create("gpu", op).configs()
    for feat in (32, 13):
        results = backend.measure(op, matrix, configs, feat, check=True, seed=feat)
        bad = [(r.config, r.error, r.extra.get("wrong_runs")) for r in results if not (r.ok and r.correct)]
        assert all(r.extra.get("checked_runs") == 3 for r in results if r.ok)  # warm-up + 2 timed samples
        assert not bad, f"{len(bad)} of {len(configs)} configs failed on {name}, feat={feat}: {bad[:3]}"


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
def test_cusparse_vendor_matches_scipy(op):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA support here (CPU-only build)")
    op_ = get_op(op)
    matrix = _edge_matrices()["graph"]
    dense = op_.make_dense_inputs(matrix, 32, seed=0)
    vendor = backends.create("cuda", number=3, repeat=2).vendor()
    np.testing.assert_allclose(vendor.run(op, matrix, dense), op_.reference(matrix, *dense),
                               rtol=1e-3, atol=1e-3)
    result = vendor.measure(op, matrix, 32)
    assert result["correct"] is True and result["time_ms"] > 0


@pytest.mark.parametrize("op", OPS)
def test_run_one_nan_fills_and_checks_warm_up_and_every_timed_sample(op):
    """`_run_one`'s checking, with the GPU kernel replaced by a host function on a CPU device.

    The stand-in writes the right output into the buffer it is given, except one
    element in the runs chosen by `skips`: that element then stays NaN (the fill),
    where without a fill before each timed sample a previous run's value would hide it.
    """
    import tvm

    from cognate_tvm.backends.cuda import CUDABackend
    from cognate_tvm.backends.cuda.backend import _RunContext

    op_ = get_op(op)
    matrix = _edge_matrices()["graph"]
    config = next(c for c in create("gpu", op).configs() if c.vec == 4 and c.bucketing)
    key = kcuda.kernel_key(op, config)
    backend = CUDABackend(number=2, repeat=3, min_repeat_ms=0)

    def measure(skips):
        run = _RunContext(op_, matrix, 13, op_.make_dense_inputs(matrix, 13, seed=0), tvm.cpu(0), HostEvent)
        sparse, _ = run.sparse(config)
        calls = [0]

        def kernel(*args):
            calls[0] += 1
            out = args[len(sparse.arrays) + len(run.dense_host)]
            got = out.numpy()
            want = np.zeros_like(got)
            if op == "spmm":
                want[:, :13] = run.expected()
            else:
                want[:matrix.nnz] = run.expected()
            written = np.ones(got.shape, bool)
            if skips(calls[0]):
                written[(0,) * got.ndim] = False
            got[written] = want[written]
            out.copyfrom(got)

        result = backend._run_one(run, config, key, {key.name: kernel}, True)
        return result, calls[0]

    good, launches = measure(lambda n: False)
    assert good.correct is True and good.ok and good.extra["checked_runs"] == 4
    assert launches == 1 + 3 * 2 and len(good.extra["samples_ms"]) == 3
    always, _ = measure(lambda n: True)
    assert always.correct is False and not always.ok and always.extra["wrong_runs"][0] == "warm-up"
    later, _ = measure(lambda n: n > 1)  # right once, then leaves an element unwritten
    assert later.correct is False and later.extra["wrong_runs"] == ["timed sample 0", "timed sample 1",
                                                                    "timed sample 2"]
