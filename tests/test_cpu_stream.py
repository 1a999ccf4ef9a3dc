"""Streaming output stores (the `stream` knob): SpMM kernels that write each output row once from register
accumulators may store it with non-temporal stores.

Every stream config must match scipy on the usual edge cases in float32 and bfloat16, also where the output
rows are not aligned to the vector (the store falls back to an ordinary one), and the compiled kernel must
really hold non-temporal stores.
"""
import dataclasses
import platform

import numpy as np
import pytest

from cognate_tvm.backends.cpu import LLVMBackend
from cognate_tvm.errors import InvalidConfigError
from cognate_tvm.kernels.cpu import build_kernel, cpu_target
from cognate_tvm.kernels.cpu_operands import kernel_arguments
from cognate_tvm.ops import get_op
from cognate_tvm.space.cpu import PANEL_ORDERS, STREAM_MIN_TILE, CPUSpace, writes_output_once

from conftest import skewed_matrices, wrong_outputs


def _streamed(seed: int) -> list:
    """One stream config per (plain CSR or panels, block rows, parallel mode, vector width)."""
    configs = [c for c in CPUSpace("spmm").configs() if c.stream]
    chosen = {}
    for i in np.random.default_rng(seed).permutation(len(configs)):
        c = configs[i]
        chosen.setdefault((c.single_panel, c.block_rows, c.parallel, c.chunk, c.balanced, c.vector), c)
    return list(chosen.values())


def test_stream_twins_are_appended_where_the_output_is_written_once():
    space = CPUSpace("spmm")
    configs = space.configs()
    streamed = [c for c in configs if c.stream]
    plain = [c for c in configs if not c.stream]
    assert configs[:len(plain)] == plain  # appended: stored configs keep their places
    assert {dataclasses.replace(c, stream=False) for c in streamed} == {
        c for c in plain if writes_output_once(c) and c.j_tile >= STREAM_MIN_TILE}
    assert any(c.block_rows > 1 for c in streamed) and any(not c.single_panel for c in streamed)
    assert any(c.balanced for c in streamed) and any(not c.parallel for c in streamed)
    assert "stream" in streamed[0].to_json() and "stream" not in plain[0].to_json()
    assert space.config_from_json(streamed[0].to_json()) == streamed[0]
    assert not any(c.stream for c in CPUSpace("sddmm").configs())
    assert space.platform_knobs(streamed[0])[space.knob_names.index("stream")] == 1.0


@pytest.mark.parametrize("change, message", [
    ({}, "writes each output row once"),  # the baseline: each nonzero updates C in memory
    ({"loop_order": PANEL_ORDERS[0], "j_tile": 8, "vector": 8}, "j_tile >= 16"),
])
def test_stream_is_refused_where_it_cannot_apply(change, message):
    space = CPUSpace("spmm")
    config = dataclasses.replace(space.baseline(), stream=True, **change)
    with pytest.raises(InvalidConfigError, match=message):
        space.check(config)
    with pytest.raises(InvalidConfigError, match="stream"):
        CPUSpace("sddmm").check(dataclasses.replace(CPUSpace("sddmm").baseline(), stream=True))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_stream_configs_match_scipy(dtype):
    backend = LLVMBackend(num_threads=2, cache_dir=None, repeats=1, warmup=0, min_seconds=0.0, dtype=dtype)
    configs = _streamed(seed=1)
    assert len(configs) >= 20
    failures = wrong_outputs(backend, get_op("spmm"), configs)
    assert not failures, failures[:3]


def _unaligned_output(shape) -> np.ndarray:
    """A float32 NaN array whose data starts 4 bytes past a 64-byte boundary."""
    size = int(np.prod(shape))
    raw = np.empty(size + 32, dtype=np.float32)
    skip = (-raw.ctypes.data % 64) // 4 + 1
    out = raw[skip:skip + size].reshape(shape)
    out[:] = np.nan
    assert out.ctypes.data % 64 == 4
    return out


def test_stream_store_into_an_unaligned_output():
    """The caller's output need not be aligned: those rows take ordinary stores, and the result is the same."""
    import torch

    config = next(c for c in _streamed(seed=3) if c.vector == 16 and c.j_tile >= 64 and c.parallel)
    matrix = skewed_matrices()["heavy_first_rows"]
    dense = get_op("spmm").make_dense_inputs(matrix, 64, seed=0)
    args = kernel_arguments("spmm", matrix, config, 64, dense)
    out = _unaligned_output(args[-1].shape)
    kernel = build_kernel("spmm", config, 64, cpu_target(2))
    kernel["main"](*[a if isinstance(a, int) else torch.from_numpy(a) for a in args[:-1]], torch.from_numpy(out))
    np.testing.assert_allclose(out, matrix @ dense[0], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="checks x86 instruction names")
def test_stream_kernels_hold_non_temporal_stores():
    config = _streamed(seed=2)[0]
    target = cpu_target(2)
    assert "movnt" in build_kernel("spmm", config, 128, target).inspect_source("asm")
    assert "movnt" not in build_kernel("spmm", dataclasses.replace(config, stream=False), 128,
                                       target).inspect_source("asm")
