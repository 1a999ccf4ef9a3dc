"""Chunked GPU schedules: the host-side chunk tables (row splitting, swizzle, zeroed rows) against
numpy references, their emulation against scipy, and their kernels' CUDA / PTX."""
from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm.errors import InvalidConfigError
from cognate_tvm.formats import column_panels
from cognate_tvm.kernels import cuda as kcuda
from cognate_tvm.kernels import cuda_prep
from cognate_tvm.matrix import as_csr
from cognate_tvm.ops import get_op
from cognate_tvm.space import create
from cognate_tvm.space.gpu import GPUConfig

needs_nvcc = pytest.mark.skipif(kcuda.find_nvcc() is None, reason="nvcc not found (PATH, /usr/local/cuda/bin)")


def _hub_matrix() -> sp.csr_matrix:
    """A power-law-like matrix: two hub rows of 400 and 130 nonzeros, many short and empty rows."""
    rng = np.random.default_rng(7)
    lengths = rng.choice([0, 0, 1, 2, 5, 31, 32, 33], size=60)
    lengths[[3, 50]] = [400, 130]
    rows = np.repeat(np.arange(60), lengths)
    cols = np.concatenate([rng.choice(450, size=n, replace=False) for n in lengths])
    return as_csr(sp.coo_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(60, 450)))


def _reference_chunks(indptr: np.ndarray, chunk: int, swizzle: bool, empty_rows: bool):
    """Loop-by-loop: (signed row, start, end) per chunk in kernel order, and the zeroed rows."""
    per_panel = []
    for panel in indptr:
        pieces = []
        for row in range(panel.size - 1):
            for start in range(int(panel[row]), int(panel[row + 1]), chunk):
                pieces.append((row, start, min(start + chunk, int(panel[row + 1]))))
        if swizzle:
            pieces.sort(key=lambda p: -(p[2] - p[1]))  # stable: equal lengths keep row order
        per_panel += pieces
    rows = indptr.shape[1] - 1
    count = np.zeros(rows, int)
    for row, _, _ in per_panel:
        count[row] += 1
    if empty_rows:
        per_panel += [(row, 0, 0) for row in range(rows) if count[row] == 0]
    table = [(-1 - row if count[row] > 1 else row, lo, hi) for row, lo, hi in per_panel]
    return table, [row for row in range(rows) if count[row] > 1]


def _matrices(small_matrices) -> dict[str, sp.csr_matrix]:
    return {**small_matrices, "hubs": _hub_matrix()}


@pytest.mark.parametrize("parts", [1, 3, 8])
@pytest.mark.parametrize("chunk", [1, 4, 32])
def test_chunk_table_matches_loop_reference(small_matrices, parts, chunk):
    for name, matrix in _matrices(small_matrices).items():
        panels = column_panels(matrix, cuda_prep.panel_width(matrix.shape[1], parts))
        for swizzle in (False, True):
            for empty_rows in (False, True):
                table = cuda_prep.chunk_table(panels.indptr, chunk, swizzle=swizzle, empty_rows=empty_rows)
                want, zeroed = _reference_chunks(panels.indptr.reshape(-1, matrix.shape[0] + 1), chunk, swizzle, empty_rows)
                got = list(zip(table.rows.tolist(), table.start.tolist(), table.end.tolist()))
                assert got == want, (name, parts, chunk, swizzle, empty_rows)
                assert table.zero_rows.tolist() == zeroed and table.rows.dtype == np.int32


def test_chunks_cover_every_nonzero_once_and_balance_hub_rows():
    matrix = _hub_matrix()
    panels = column_panels(matrix, cuda_prep.panel_width(matrix.shape[1], 2))
    table = cuda_prep.chunk_table(panels.indptr, 32, swizzle=True, empty_rows=True)
    lengths = table.end - table.start
    assert lengths.max() == 32  # the 400-nonzero hub row is spread over chunks of at most 32
    covered = np.concatenate([np.arange(lo, hi) for lo, hi in zip(table.start, table.end)])
    assert np.array_equal(np.sort(covered), np.arange(matrix.nnz))
    rows = np.where(table.rows < 0, -1 - table.rows, table.rows)
    assert set(rows.tolist()) == set(range(matrix.shape[0]))  # every row, empty ones included
    panel_of = np.searchsorted(panels.indptr.reshape(-1, matrix.shape[0] + 1)[:, 0], table.start, side="right") - 1
    panel_of[lengths == 0] = 1  # the empty rows' chunks come last
    assert np.all(np.diff(panel_of) >= 0)  # panel by panel
    first = lengths[panel_of == 0]
    assert np.all(np.diff(first) <= 0)  # longest first within a panel
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        cuda_prep.chunk_table(panels.indptr, 0, swizzle=False, empty_rows=False)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_every_chunked_layout_emulates_the_op(small_matrices, op):
    """Each chunked (parts, chunk, swizzle), run as the kernels index it on NaN-filled outputs."""
    op_ = get_op(op)
    configs = {}
    for config in create("gpu", op).configs():
        if config.chunked:
            configs.setdefault(cuda_prep.layout_key(config), config)
    assert len(configs) == 16
    for name, matrix in _matrices(small_matrices).items():
        for feat in (13, 64):
            dense = op_.make_dense_inputs(matrix, feat, seed=2)
            expected = op_.reference(matrix, *dense)
            for config in configs.values():
                got = cuda_prep.emulate(op, matrix, config, dense)
                np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=f"{name} {config}")


def test_chunked_arguments_name_the_kernel_parameters():
    matrix = _hub_matrix()
    for op, scalars in (("spmm", ["q", "z"]), ("sddmm", ["q"])):
        config = GPUConfig(2, 8, 16, 4, False, False, 32, True, True, 2)
        sparse = cuda_prep.prepare_sparse(op, matrix, config)
        func = kcuda.make_prim_func(kcuda.kernel_key(op, config))
        assert [p.name for p in func.params] == cuda_prep.arg_names(sparse)
        assert cuda_prep.arg_names(sparse)[-2 - len(scalars):-2] == scalars
        assert sparse.chunked and sparse.scalars[0] == sparse.arrays[0].size


@needs_nvcc
def test_chunk_kernels_shuffle_rows_and_add_split_rows():
    cached = kcuda.KernelKey("spmm", "chunk", "mixed", 16, 4, 2, True)
    plain = kcuda.KernelKey("sddmm", "chunk", "parallel", 8, 4, 1, True)
    source = kcuda.cuda_source(kcuda.build([cached, plain], arch="sm_90"))
    ptx = kcuda.compile_ptx(source, arch="sm_90")
    assert set(cached.kernel_names) | set(plain.kernel_names) <= kcuda.ptx_entries(ptx)
    assert "__shfl_sync(" in source and "__shfl_xor_sync(" in source  # row caching; SDDMM's sums
    assert "atomicAdd" in source and "float4" in source
    assert re.search(r"shfl\.sync\.idx", ptx) and re.search(r"ld\.global(\.nc)?\.v4\.f32", ptx)
    assert "red.global.add.f32" in ptx or "atom.global.add.f32" in ptx


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_serial_chunk_kernels_run_on_llvm_and_match_scipy(small_matrices, op):
    """The chunk kernels' TIR bodies with plain loops and one lane per group, built for llvm and run on
    NaN-filled outputs: every (cache, vectors per thread) body on every layout of the test matrices."""
    import tvm

    op_ = get_op(op)
    configs = [c for c in create("gpu", op).configs()
               if c.chunked and c.rows_per_block == 8 and c.tx == 8 and c.parts in (1, 8)]
    built = {}
    for config in configs:
        key = kcuda.kernel_key(op, config)
        if key not in built:
            built[key] = tvm.tirx.build(kcuda.serial_prim_func(key), target="llvm")
    assert len(built) == 6  # cache x cols_per_thread (1, 2, 4)
    for name, matrix in _matrices(small_matrices).items():
        dense = op_.make_dense_inputs(matrix, 13, seed=3)
        expected = op_.reference(matrix, *dense)
        for config in configs:
            sparse = cuda_prep.prepare_sparse(op, matrix, config)
            padded, nvec = cuda_prep.pad_dense(dense, config.vec)
            out = np.full(cuda_prep.empty_output(sparse, nvec, config.vec).shape, np.nan, np.float32)
            args = [tvm.runtime.tensor(a) if isinstance(a, np.ndarray) else a
                    for a in cuda_prep.kernel_args(sparse, padded, out, nvec, config.rows_per_block)]
            built[kcuda.kernel_key(op, config)](*args)
            got = cuda_prep.finish_output(op, args[len(sparse.arrays) + len(padded)].numpy(), matrix, 13)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=f"{name} {config}")
    with pytest.raises(InvalidConfigError, match="only chunk kernels"):
        kcuda.serial_prim_func(kcuda.all_keys(op)[0])
