"""Measure GPU-space kernels on a remote NVIDIA GPU through TVM's RPC tracker.

The CUDA counterpart of :class:`~cognate_tvm.backends.rpc.RPCLLVMBackend`,
which it shares everything with but the device: the tracker protocol, the
measure loop (failures are results, a dead device costs one timeout per
call) and the session's uploads (`RPCBackend`, `RemoteSession`).

Building needs no GPU: each config's kernel variant (`kernels.cuda.KernelKey`)
is built here into its own module (host code for x86-64 LLVM, device code as
CUDA source), kept per process, and exported as a shared library. The device
compiles the CUDA source when it loads the library, with NVRTC or nvcc (TVM's
``TVM_CUDA_COMPILE_MODE``), so the device machine needs one of them besides a
GPU that TVM can use. A session whose ``cuda(0)`` does not exist (a server
without a GPU, or whose TVM could not load its CUDA runtime) is an ``rpc:``
error of every config of the call, saying so.

On the device, each config runs once on an output filled with NaN (an element
the kernel leaves unwritten fails the check), that output is fetched back and,
with ``check``, compared with scipy's result here; then TVM's
``time_evaluator`` times ``repeat`` samples of ``number`` launches (raised until
a sample lasts ``min_repeat_ms``) on the device, and the median per-launch time
is reported. Unlike the local `CUDABackend`, the outputs of the timed samples
are not checked (``time_evaluator`` returns times only).
"""
from __future__ import annotations

import math
import os
import platform as _platform
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import CognateError, InvalidConfigError
from ..kernels import cuda as kcuda
from ..kernels import cuda_prep
from ..matrix import as_csr
from ..ops import Op
from ..space.gpu import GPUConfig, GPUSpace
from .base import MeasureResult
from .cuda.backend import _RunContext
from .cuda.timing import outputs_match
from .export import export_cuda_kernel
from .rpc import RPCBackend, RemoteSession

NO_REMOTE_GPU_MESSAGE = (
    "the RPC server {server} (key {key!r}) has no CUDA device TVM can use (its cuda({device}).exist is "
    "False): serve this key from a machine with an NVIDIA GPU where `python -c 'import tvm; "
    "print(tvm.cuda(0).exist)'` prints True (TVM's CUDA runtime needs libcuda.so.1 and libcudart.so.13 "
    "on the loader path), with nvcc on PATH (TVM_CUDA_COMPILE_MODE=nvcc) or cuda-bindings installed")


class RemoteDeviceError(CognateError, RuntimeError):
    """The session's device cannot run the kernels (e.g. a server without a usable GPU)."""


class RPCCUDABackend(RPCBackend):
    """The `cuda` backend with kernels built here and run on a GPU behind a TVM RPC tracker.

    Parameters
    ----------
    tracker, key, request_timeout_s, priority
        As for `RPCLLVMBackend`.
    arch
        The remote GPU's architecture, "sm_80" (A100) or "sm_90" (H100/H200).
    device_id
        CUDA device index on the remote machine.
    number, repeat, min_repeat_ms
        Timing on the device (``time_evaluator``): `repeat` samples of `number`
        launches each, `number` raised until a sample lasts `min_repeat_ms`.
    nvcc
        nvcc for `tuning.write_kernel`'s PTX (default: PATH, then /usr/local/cuda/bin).
    session_timeout_s
        The server ends a session older than this; default ``120 + 60 * n``
        seconds for n configs (the device compiles each new variant on load).
    """

    target = "cuda"
    platform = "gpu"
    export_kernel = export_cuda_kernel

    def __init__(self, *, tracker: str, key: str, arch: str = "sm_80", device_id: int = 0, number: int = 10,
                 repeat: int = 5, min_repeat_ms: float = 1.0, nvcc: str | os.PathLike | None = None,
                 request_timeout_s: float = 60.0, session_timeout_s: float | None = None, priority: int = 1):
        self._init_rpc(tracker, key, request_timeout_s, session_timeout_s, priority)
        if arch not in kcuda.ARCHS:
            raise InvalidConfigError(f"arch {arch!r} not supported; valid: {', '.join(kcuda.ARCHS)}")
        if int(number) < 1 or int(repeat) < 1:
            raise ValueError(f"number and repeat must be >= 1, got number={number}, repeat={repeat}")
        self.arch, self.device_id = arch, int(device_id)
        self.number, self.repeat, self.min_repeat_ms = int(number), int(repeat), float(min_repeat_ms)
        self.nvcc = None if nvcc is None else str(nvcc)

    def metadata(self) -> dict:
        local = {"target": self.target, "platform": self.platform, "host": _platform.node(),
                 "machine": _platform.machine(), "processor": _platform.processor()}
        out = self._rpc_metadata(local)
        out.update({"arch": self.arch, "device_id": self.device_id})
        return out

    def _space(self, op: Op) -> GPUSpace:
        return GPUSpace(op)

    def _session_timeout(self, configs: int) -> float:
        return 120.0 + 60.0 * configs

    def _open(self, op, matrix, feat, dense, session_timeout_s) -> "_RemoteCUDARun":
        return _RemoteCUDARun(self, op, matrix, feat, dense, session_timeout_s)

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0) -> list[MeasureResult]:
        matrix = as_csr(matrix)
        if min(matrix.shape) == 0:  # as the local backend: a kernel launch of zero blocks is invalid
            return [MeasureResult(c, None, error=f"matrix of shape {matrix.shape} has nothing to compute")
                    for c in configs]
        return super().measure(op, matrix, configs, feat, check=check, seed=seed)

    # -- building --------------------------------------------------------------------
    def kernel(self, key: kcuda.KernelKey):
        """The built module of one kernel variant, kept for the life of this process (no GPU needed)."""
        libs = self.__dict__.setdefault("_libs", {})  # not pickled: a worker builds its own
        if key not in libs:
            libs[key] = kcuda.build([key], arch=self.arch)
        return libs[key]

    def library(self, op: Op, config: GPUConfig, feat: int, scratch: Path) -> Path:
        """`config`'s variant exported to `scratch` for upload (one file per variant and call)."""
        key = kcuda.kernel_key(op, config)
        path = scratch / f"{self.arch}_{key.name}.so"
        if not path.is_file():
            self.kernel(key).export_library(str(path))
        return path


class _RemoteCUDARun(RemoteSession):
    """A cuda session: the GPU-layout operands of one matrix on the remote GPU."""

    def __init__(self, backend: RPCCUDABackend, op: Op, matrix: sp.csr_matrix, feat: int,
                 dense: list[np.ndarray], session_timeout_s: float):
        super().__init__(backend, session_timeout_s)
        self.backend, self.op = backend, op
        self.device = self.session.cuda(backend.device_id)
        if not self.device.exist:  # before any upload: the module would fail to load for another reason
            raise RemoteDeviceError(NO_REMOTE_GPU_MESSAGE.format(server=self.server, key=backend.key,
                                                                 device=backend.device_id))
        self.gpu = _device_name(self.device)
        # operands on the remote GPU, per layout and vector width: the local backend's cache, another device
        self.operands = _RunContext(op, matrix, feat, dense, self.device, make_event=None)

    def measure(self, config: GPUConfig, library: Path, check: bool) -> MeasureResult:
        import tvm

        backend, run = self.backend, self.operands
        key = kcuda.kernel_key(self.op, config)
        module = self.module(library)
        sparse, sparse_dev = run.sparse(config)
        dense_dev, nvec = run.dense(config.vec)
        shape = cuda_prep.empty_output(sparse, nvec, config.vec).shape
        out = tvm.runtime.tensor(np.full(shape, np.nan, np.float32), self.device)
        args = cuda_prep.kernel_args(sparse, dense_dev, out, nvec, config.rows_per_block)
        args[:len(sparse_dev)] = sparse_dev
        extra = {"kernel": key.name, "rpc_server": self.server, "remote_gpu": self.gpu}
        module.time_evaluator(key.name, self.device, number=1, repeat=1)(*args)  # the first run
        correct = None
        if check:  # the first run's output, fetched back
            output = cuda_prep.finish_output(self.op, out.numpy(), run.matrix, run.feat)
            correct = outputs_match(run.expected(), output)
        timer = module.time_evaluator(key.name, self.device, number=backend.number, repeat=backend.repeat,
                                      min_repeat_ms=math.ceil(backend.min_repeat_ms))
        samples_ms = [float(t) * 1e3 for t in timer(*args).results]
        extra["samples_ms"] = [round(t, 6) for t in samples_ms]
        return MeasureResult(config, float(np.median(samples_ms)), correct=correct, extra=extra)


def _device_name(device) -> str | None:
    """The remote GPU's name, for the rows' extras (None when the server does not tell)."""
    try:
        return str(device.device_name)
    except Exception:  # informational only
        return None


__all__ = ["NO_REMOTE_GPU_MESSAGE", "RPCCUDABackend", "RemoteDeviceError"]
