"""CPU kernels: every sampled config of both ops matches scipy; the cache, the backend and MKL."""
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm.backends import create as create_backend  # noqa: E402
from cognate_tvm.backends.base import check_output  # noqa: E402
from cognate_tvm.backends.cpu import LLVMBackend  # noqa: E402
from cognate_tvm.backends.vendor import MKLLibrary, ScipyLibrary, mkl_available  # noqa: E402
from cognate_tvm.formats import column_panels  # noqa: E402
from cognate_tvm.kernels.cache import KernelCache  # noqa: E402
from cognate_tvm.kernels.cpu import build_kernel, cpu_target  # noqa: E402
from cognate_tvm.kernels.cpu_operands import (kernel_arguments, panel_permutation, prepare_sparse,  # noqa: E402
                                              unpad_output)
from cognate_tvm.matrix import as_csr  # noqa: E402
from cognate_tvm.ops import get_op  # noqa: E402
from cognate_tvm.space.cpu import MAX_PANELS, PANEL_ORDERS, CPUConfig, CPUSpace  # noqa: E402

from conftest import SMALL_MATRICES  # noqa: E402

SAMPLE = 60
THREADS = 2


@pytest.fixture(scope="module")
def target():
    return cpu_target(THREADS)


@pytest.fixture(scope="module")
def memory_cache():
    return KernelCache(None)


def run_kernel(op, matrix, config, feat, target, cache, seed=0):
    import tvm

    op = get_op(op)
    dense = op.make_dense_inputs(matrix, feat, seed=seed)
    module = build_kernel(op, config, feat, target, cache=cache)
    args = [a if isinstance(a, int) else tvm.runtime.tensor(a, tvm.cpu())
            for a in kernel_arguments(op, matrix, config, feat, dense)]
    module["main"](*args)
    return dense, unpad_output(op, args[-1].numpy(), feat)


def sampled_configs(op):
    space = CPUSpace(op)
    return [space.baseline()] + [c for c in space.sample_covering(SAMPLE, seed=7) if c != space.baseline()]


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_sampled_configs_match_scipy(op, target, memory_cache):
    """>= 60 configs per op (every loop order among them) on every matrix kernels must handle.

    feat=20 divides neither the dense tiles nor the vector widths, so the padding path runs.
    """
    configs = sampled_configs(op)
    assert len(configs) >= SAMPLE
    assert {c.loop_order for c in configs} == set(PANEL_ORDERS)
    matrices = {name: build() for name, build in SMALL_MATRICES.items()}
    failures = []
    for config in configs:
        for name, matrix in matrices.items():
            dense, output = run_kernel(op, matrix, config, 20, target, memory_cache)
            if not check_output(get_op(op), matrix, dense, output):
                failures.append((name, config.to_json()))
    assert not failures, failures[:5]


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@pytest.mark.parametrize("feat", [1, 7, 128])
def test_dense_widths(op, feat, target, memory_cache, small_matrices):
    matrix = small_matrices["powerlaw"]
    for config in CPUSpace(op).sample(6, seed=feat):
        dense, output = run_kernel(op, matrix, config, feat, target, memory_cache, seed=feat)
        assert check_output(get_op(op), matrix, dense, output), config


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_empty_matrix_and_many_panels(op, target, memory_cache):
    empty = as_csr(sp.csr_matrix((6, 5), dtype=np.float32))
    wide_cols = 2048 * MAX_PANELS * 2 + 17
    rng = np.random.default_rng(0)
    wide = as_csr(sp.random_array((12, wide_cols), density=0.002, rng=rng))
    config = CPUConfig(i_tile=8, k_panel=2048, k_parts=1, j_tile=32, loop_order=PANEL_ORDERS[3], vector=8,
                       unroll=True, parallel=True, chunk=4)
    assert prepare_sparse(op, wide, config).npanels <= MAX_PANELS
    for matrix in (empty, wide):
        dense, output = run_kernel(op, matrix, config, 16, target, memory_cache)
        assert check_output(get_op(op), matrix, dense, output)


def test_panel_permutation_matches_column_panels(small_matrices):
    for matrix in small_matrices.values():
        perm = panel_permutation(matrix, 16)
        panels = column_panels(matrix, 16)
        assert np.array_equal(panels.indices, matrix.indices[perm])
        assert np.array_equal(panels.data, matrix.data[perm])


def test_disk_cache_is_reused(tmp_path, target, small_matrices):
    config = CPUSpace("spmm").baseline()
    first = KernelCache(tmp_path)
    build_kernel("spmm", config, 24, target, cache=first)
    build_kernel("spmm", config, 24, target, cache=first)
    assert first.hits == {"memory": 1, "disk": 0, "built": 1}
    assert len(list(tmp_path.glob("*.so"))) == 1
    second = KernelCache(tmp_path)  # a new process would start like this
    second.get(next(tmp_path.glob("*.so")).stem, lambda: pytest.fail("rebuilt a cached kernel"))
    dense, output = run_kernel("spmm", small_matrices["banded"], config, 24, target, second)
    assert second.hits["disk"] == 1 and second.hits["built"] == 0
    assert check_output(get_op("spmm"), small_matrices["banded"], dense, output)
    # a different width is a different kernel
    build_kernel("spmm", config, 25, target, cache=second)
    assert second.hits["built"] == 1


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    return LLVMBackend(num_threads=THREADS, cache_dir=tmp_path_factory.mktemp("kernels"), warmup=1,
                       repeats=3, min_seconds=0.0)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_backend_measures_and_checks(op, backend, small_matrices):
    space = CPUSpace(op)
    configs = [space.baseline()] + space.sample(3, seed=2)
    results = backend.measure(op, small_matrices["tall"], configs, 16, check=True, seed=1)
    assert [r.config for r in results] == configs
    for r in results:
        assert r.error is None and r.correct is True and r.time_ms > 0 and r.ok
        assert set(r.to_dict()) >= {"config", "time_ms", "correct", "error"}


def test_failures_are_results(backend, small_matrices, monkeypatch):
    space = CPUSpace("spmm")
    good = space.baseline()
    bad = CPUConfig(**{**good.to_dict(), "vector": 3})
    broken = space.sample(1, seed=5)[0]
    original = backend.kernel

    def kernel(op, config, feat):
        if config == broken:
            raise RuntimeError("simulated build failure")
        return original(op, config, feat)

    monkeypatch.setattr(backend, "kernel", kernel)
    results = backend.measure("spmm", small_matrices["wide"], [bad, broken, good], 8, check=True)
    assert "invalid config" in results[0].error and "vector 3" in results[0].error
    assert results[1].error == "RuntimeError: simulated build failure" and results[1].time_ms is None
    assert results[2].ok and results[2].correct


def test_timeout_is_a_result(tmp_path, small_matrices):
    slow = LLVMBackend(num_threads=THREADS, cache_dir=tmp_path, timeout_s=1e-9)
    [result] = slow.measure("spmm", small_matrices["banded"], [CPUSpace("spmm").baseline()], 8)
    assert result.time_ms is None and result.error.startswith("timeout")


def test_backend_pickles(backend, small_matrices):
    config = CPUSpace("sddmm").baseline()
    [original] = backend.measure("sddmm", small_matrices["single_nonzero"], [config], 4, check=True)
    clone = pickle.loads(pickle.dumps(backend))
    assert clone.cache_dir == backend.cache_dir and clone.num_threads == THREADS
    [result] = clone.measure("sddmm", small_matrices["single_nonzero"], [config], 4, check=True)
    assert original.ok and result.ok and result.correct
    assert clone.kernel_cache.hits["built"] == 0  # loaded from the disk cache the original filled


def test_factory_and_options():
    assert isinstance(create_backend("llvm", num_threads=1, cache_dir=None), LLVMBackend)
    with pytest.raises(TypeError):
        create_backend("llvm", arch="sm_80")


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_vendor_libraries(op, small_matrices):
    matrix = small_matrices["powerlaw"]
    libraries = [ScipyLibrary()] + ([MKLLibrary()] if mkl_available() else [])
    for library in libraries:
        dense = get_op(op).make_dense_inputs(matrix, 16, seed=3)
        assert check_output(get_op(op), matrix, dense, np.asarray(library.run(op, matrix, dense)))
        assert library.time_ms(op, matrix, 16) > 0
        assert library.method(op)
    assert pickle.loads(pickle.dumps(libraries[-1])).name == libraries[-1].name


def test_backend_vendor_prefers_mkl_and_times_it_in_a_clean_process(small_matrices):
    vendor = LLVMBackend(num_threads=1, cache_dir=None).vendor()
    assert vendor.name == ("mkl" if mkl_available() else "scipy")
    assert vendor.isolated and not vendor.isolated_copy(False).isolated
    assert vendor.time_ms("spmm", small_matrices["banded"], 8) > 0


def test_space_benchmark_resumes(tmp_path, monkeypatch):
    """benchmarks/cpu_space.py --small: writes its reports, and a rerun skips finished matrices."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cpu_space.py"
    spec = importlib.util.spec_from_file_location("cpu_space_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = ["--small", "--count", "2", "--configs", "2", "--threads", "1", "--out", str(tmp_path),
            "--cache-dir", str(tmp_path / "kernels"), "--no-vendor"]
    assert bench.main(argv) == 0
    lines = (tmp_path / "spmm_results.jsonl").read_text().splitlines()
    assert len(lines) == 2
    for name in ("spmm_summary.md", "spmm_table.csv", "spmm_space.png", "spmm_summary.json"):
        assert (tmp_path / name).stat().st_size > 0
    # a killed run leaves a torn line; the rerun ignores it and measures only the new matrix
    with open(tmp_path / "spmm_results.jsonl", "a") as f:
        f.write('{"name": "torn')
    argv[argv.index("--count") + 1] = "3"
    assert bench.main(argv) == 0
    names = [__import__("json").loads(line)["name"]
             for line in (tmp_path / "spmm_results.jsonl").read_text().splitlines() if "torn" not in line]
    assert len(names) == len(set(names)) == 3
    monkeypatch.setattr(bench, "measure_matrix", lambda *a, **k: pytest.fail("measured a finished matrix"))
    assert bench.main(argv) == 0
    summary = __import__("json").loads((tmp_path / "spmm_summary.json").read_text())["summary"]
    assert summary["worst / best"]["matrices"] == 3 and summary["worst / best"]["geomean"] >= 1.0


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_run_on_user_data(op, backend, small_matrices):
    """`LLVMBackend.run` computes on the caller's operands and matches scipy."""
    matrix = small_matrices["tall"]
    space = CPUSpace(op)
    dense = get_op(op).make_dense_inputs(matrix, 12, seed=3)
    for config in (space.baseline(), space.sample(1, seed=5)[0]):
        assert check_output(get_op(op), matrix, dense, backend.run(op, config, matrix, dense))


def test_run_rejects_bad_operands(backend, small_matrices):
    from cognate_tvm.errors import InvalidConfigError, MatrixFormatError, ShapeError

    matrix = small_matrices["tall"]  # 300 x 45
    config = CPUSpace("spmm").baseline()
    with pytest.raises(ShapeError, match=r"\(44, 8\)"):
        backend.run("spmm", config, matrix, [np.zeros((44, 8), np.float32)])
    with pytest.raises(ShapeError, match="sddmm"):
        backend.run("sddmm", config, matrix, [np.zeros((300, 8), np.float32), np.zeros((300, 8), np.float32)])
    with pytest.raises(ShapeError, match="2-D"):
        backend.run("spmm", config, matrix, [np.zeros(45, np.float32)])
    bad = np.zeros((45, 8), np.float32)
    bad[3, 2] = np.nan
    with pytest.raises(MatrixFormatError, match="dense operand 0 holds non-finite"):
        backend.run("spmm", config, matrix, [bad])
    with pytest.raises(InvalidConfigError, match="i_tile 3"):
        backend.run("spmm", CPUConfig(**{**config.to_dict(), "i_tile": 3}), matrix, [np.zeros((45, 8))])
