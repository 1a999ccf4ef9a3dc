"""CUDA kernels: format preparation (CPU), lowering + nvcc PTX for every config, GPU execution.

Without nvcc the PTX tests skip; without a GPU the execution tests skip. Every
kernel variant of both ops is built into one TVM module per arch and the whole
CUDA source goes through one nvcc call per arch (the two archs in parallel).
"""
from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
import re

import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm import backends
from cognate_tvm.errors import DeviceUnavailableError, InvalidConfigError
from cognate_tvm.kernels import cuda as kcuda
from cognate_tvm.kernels import cuda_prep
from cognate_tvm.matrix import as_csr, generate
from cognate_tvm.ops import get_op
from cognate_tvm.space import create
from cognate_tvm.space.gpu import GPUConfig

OPS = ("spmm", "sddmm")
NVCC = kcuda.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH, /usr/local/cuda/bin)")


@functools.lru_cache(maxsize=1)
def _gpu_present() -> bool:
    import tvm

    return bool(tvm.cuda(0).exist)


needs_gpu = pytest.mark.skipif("not _gpu_present()", reason="no CUDA GPU visible to TVM")


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
    assert len(keys) == {"spmm": 48, "sddmm": 24}[op]
    with pytest.raises(InvalidConfigError, match="GPUConfig"):
        kcuda.kernel_key(op, object())


@pytest.mark.parametrize("op", OPS)
def test_prepared_layouts_compute_the_op(op):
    """The prepared arrays, indexed as the kernels index them, give scipy's result."""
    op = get_op(op)
    combos = {(c.parts, c.bucketing, c.vec) for c in create("gpu", op.name).configs()}
    for name, matrix in _edge_matrices().items():
        dense = op.make_dense_inputs(matrix, 13, seed=1)  # 13: not a multiple of vec
        expected = op.reference(matrix, *dense)
        for parts, bucketing, vec in sorted(combos):
            config = GPUConfig(parts, 1, 4, vec, bucketing, op.name == "spmm" and parts > 1)
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


@pytest.mark.skipif("_gpu_present()", reason="a GPU is present: the no-GPU error does not apply")
def test_measure_without_gpu_raises_clear_error():
    backend = backends.create("cuda")
    with pytest.raises(DeviceUnavailableError, match="compile_only=True"):
        backend.measure("spmm", _edge_matrices()["graph"], [create("gpu", "spmm").baseline()], 32)


# -- GPU execution (skipped without a GPU) ----------------------------------------------
@pytest.fixture(scope="module")
def gpu_backend():
    """One backend for all GPU tests, so every kernel variant is built once."""
    return backends.create("cuda", number=1, repeat=1, min_repeat_ms=0)


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
        bad = [(r.config, r.error) for r in results if not (r.ok and r.correct)]
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
    vendor = backends.create("cuda").vendor()
    np.testing.assert_allclose(vendor.run(op, matrix, dense), op_.reference(matrix, *dense),
                               rtol=1e-3, atol=1e-3)
    assert vendor.time_ms(op, matrix, 32) > 0
