"""The cuda target through TVM's RPC tracker: build and export here, run on the server's GPU.

What runs anywhere: the variants are built and exported for upload (and nvcc compiles
their source, when it is installed); a server without a GPU gives every config a clear
`rpc:` error and the sweep goes on, through the library and the collect CLI. Measuring
for real needs an NVIDIA GPU on this machine (the loopback server uses it) and is
skipped, saying why, without one.
"""
from __future__ import annotations

import json
import os
import pickle
import time

import pytest
from rpc_cluster import rpc_cluster

from cognate_tvm import space
from cognate_tvm.backends.rpc import create_rpc
from cognate_tvm.backends.rpc_cuda import RPCCUDABackend
from cognate_tvm.collect import main as collect_main
from cognate_tvm.data import load_frame
from cognate_tvm.kernels import cuda as kcuda
from cognate_tvm.matrix import generate
from cognate_tvm.ops import SDDMM, SPMM

KEY = "cognate-cuda"
GPUS, DRIVER = kcuda.driver_gpu_count()
needs_gpu = pytest.mark.skipif(GPUS == 0, reason=f"needs an NVIDIA GPU for the RPC server to run on: {DRIVER}")
needs_no_gpu = pytest.mark.skipif(GPUS > 0, reason="this machine has a GPU, so the loopback server is not GPU-less")


def _server_env() -> dict:
    """The server's environment on a GPU machine: TVM's CUDA runtime loadable, a device compiler chosen."""
    env = dict(os.environ)
    dirs = [str(p.parent) for p in kcuda.cudart_candidates()]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(dirs + [env.get("LD_LIBRARY_PATH", "")])
    kcuda.select_compile_mode(env)
    return env


@pytest.fixture(scope="module")
def cluster():
    with rpc_cluster([KEY], server_env=_server_env()) as (tracker, _):
        yield tracker


def _configs(op, count: int = 3) -> list:
    gpu = space.create("gpu", op.name)
    return [gpu.baseline()] + [c for c in gpu.sample(count, seed=5) if c != gpu.baseline()]


def test_variant_is_built_and_exported_for_upload(tmp_path):
    backend = create_rpc("cuda", tracker="127.0.0.1:9190", key=KEY, arch="sm_90")
    assert isinstance(backend, RPCCUDABackend)
    config = _configs(SPMM)[1]
    library = backend.library(SPMM, config, 16, tmp_path)
    key = kcuda.kernel_key(SPMM, config)
    assert library == tmp_path / f"sm_90_{key.name}.so" and library.stat().st_size > 0
    assert backend.library(SPMM, config, 16, tmp_path) == library  # exported once per call's scratch
    source = kcuda.cuda_source(backend.kernel(key))
    assert all(name in source for name in key.kernel_names)
    restored = pickle.loads(pickle.dumps(backend))  # settings only: a worker builds its own modules
    assert "_libs" not in restored.__dict__ and restored.arch == "sm_90"
    if kcuda.find_nvcc() is None:
        pytest.skip("nvcc is not installed: the exported source was not compiled to PTX")
    ptx = kcuda.compile_ptx(source, arch="sm_90")
    assert set(key.kernel_names) <= kcuda.ptx_entries(ptx)


def test_metadata_names_the_device_not_the_builder():
    meta = RPCCUDABackend(tracker="127.0.0.1:9190", key=KEY, arch="sm_80").metadata()
    assert meta["target"] == "cuda" and meta["platform"] == "gpu" and meta["arch"] == "sm_80"
    assert meta["host"] == f"rpc:{KEY}" and meta["rpc_tracker"] == "127.0.0.1:9190" and meta["builder_host"]


@needs_no_gpu
@pytest.mark.parametrize("op", [SPMM, SDDMM], ids=["spmm", "sddmm"])
def test_a_server_without_a_gpu_is_an_error_per_config(cluster, op):
    backend = RPCCUDABackend(tracker=cluster, key=KEY, request_timeout_s=20.0)
    configs = _configs(op)
    start = time.time()
    results = backend.measure(op, generate("banded", 200, seed=1), configs, 8, check=True)
    assert [r.config for r in results] == configs
    for r in results:
        assert r.time_ms is None and not r.ok
        assert r.error.startswith("rpc: the RPC server 127.0.0.1:") and "no CUDA device TVM can use" in r.error
    assert time.time() - start < 60  # one session is asked for; the rest are recorded without waiting


@needs_no_gpu
def test_collect_cli_records_the_errors_and_goes_on(cluster, tmp_path):
    out = tmp_path / "ds"
    args = ["--target", "cuda", "--op", "spmm", "--corpus", "synthetic:2:3", "--min-rows", "200",
            "--max-rows", "300", "--configs-per-matrix", "2", "--pool", "8", "--feat", "8", "--quiet",
            "--out", str(out), "--rpc-tracker", cluster, "--rpc-key", KEY]
    assert collect_main(args) == 0
    frame = load_frame(out)
    assert frame["matrix"].nunique() == 2 and len(frame) >= 4
    assert frame["time_ms"].isna().all() and frame["error"].str.contains("no CUDA device TVM can use").all()
    meta = json.loads(frame["backend"].iloc[0])
    assert meta["target"] == "cuda" and meta["rpc_key"] == KEY and meta["rpc_tracker"] == cluster


@needs_gpu
@pytest.mark.parametrize("op", [SPMM, SDDMM], ids=["spmm", "sddmm"])
def test_measures_on_the_remote_gpu_and_outputs_match_scipy(cluster, op):
    import tvm

    assert kcuda.load_tvm_cuda_runtime() is None, "TVM's CUDA runtime does not load here"
    arch = "sm_90" if int(str(tvm.cuda(0).compute_version).split(".")[0]) >= 9 else "sm_80"
    backend = RPCCUDABackend(tracker=cluster, key=KEY, arch=arch, repeat=3, request_timeout_s=30.0)
    configs = _configs(op)
    results = backend.measure(op, generate("rmat", 2000, seed=2), configs, 32, check=True, seed=1)
    for r in results:
        assert r.error is None, r.error
        assert r.ok and r.correct is True and r.time_ms > 0
        assert r.extra["rpc_server"].startswith("127.0.0.1:") and len(r.extra["samples_ms"]) == 3
