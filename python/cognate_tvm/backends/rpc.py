"""Measure kernels on a remote device through TVM's RPC tracker (llvm here; cuda: `rpc_cuda`).

Kernels are built here — for llvm by an ordinary
:class:`~cognate_tvm.backends.cpu.LLVMBackend` (same code generator, same
kernel cache) — and run on a device that registered with a TVM RPC tracker
under a key, the TVM ecosystem's own way of measuring on boards and machines
far away::

    python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190              # one tracker
    TVM_NUM_THREADS=8 python -m tvm.exec.rpc_server --tracker HOST:9190 --key epyc   # each device

For every ``measure`` call the backend asks the tracker for one session on a
device of its key, uploads each config's compiled library, copies the inputs
to the device once, runs the kernel once (that output is fetched back and,
with ``check``, compared with scipy here), and times it on the device with
TVM's ``time_evaluator`` (so network latency is not in the time): the median
of the repeats.

Failures are results, never exceptions: a config that cannot be built, a
kernel that fails or crashes the remote session, a lost connection, or a
tracker with no free device within ``request_timeout_s`` becomes that
config's ``MeasureResult.error`` (prefixed ``rpc:``). After a failed remote
call the next config asks the tracker for a fresh session; when that request
fails too, the rest of the call's configs are recorded with its error without
further waiting, so a dead device costs one timeout per task, not one per
config. Each session is bounded by the server side (``session_timeout_s``),
so a hung kernel cannot hold a device forever.

The backend holds settings only and is picklable (Ray workers, process pools):
sessions live inside one ``measure`` call. What every target shares — the
measure loop with its failure handling, one session's uploads — is here
(`RPCBackend`, `RemoteSession`), the tracker protocol in `rpc_tracker`; a
target's backend adds how it builds a library and runs one config on the device.

The kernels are compiled for ``mcpu`` (default: the CPU of the machine that
builds): pass the remote device's LLVM CPU name (e.g. ``znver3``,
``skylake-avx512``) when it differs, or the device may fault on instructions
it lacks. The remote TVM thread pool's size is the server's
``TVM_NUM_THREADS``; each result's extras record it (``remote_threads``) and
the server it ran on (``rpc_server``).
"""
from __future__ import annotations

import importlib
import logging
import os
import tempfile
import time
from abc import abstractmethod
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import CognateError, InvalidConfigError
from ..kernels.cache import DEFAULT_CACHE_DIR
from ..ops import Op
from ..space.base import Config, Space
from ..space.cpu import CPUConfig, CPUSpace
from .base import Backend, MeasureResult, measure_inputs
from .cpu import KernelOperands, LLVMBackend, timing_plan
from .export import export_llvm_kernel
from .rpc_tracker import RPCSettingsError, parse_tracker, request_session

log = logging.getLogger(__name__)

RPC_ERROR_PREFIX = "rpc: "
_WARNED_THREADS: set[str] = set()  # servers already warned about a thread-count mismatch


class RPCBackend(Backend):
    """What the RPC backends share: the tracker settings, pickling, metadata and the measure loop.

    A subclass sets `target`/`platform`, calls `_init_rpc` and implements
    `_space` (the configs it measures), `library` (a config's kernel, exported
    for upload) and `_open` (a `RemoteSession` of its device kind, whose
    ``measure(config, library, check)`` runs one config there).
    """

    tracker: tuple[str, int]
    key: str

    def _init_rpc(self, tracker: str, key: str, request_timeout_s: float, session_timeout_s: float | None,
                  priority: int) -> None:
        self.tracker = parse_tracker(tracker)
        if not key:
            raise RPCSettingsError("an RPC device key is required (the --key its rpc_server registered with)")
        if float(request_timeout_s) <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        self.key = str(key)
        self.request_timeout_s = float(request_timeout_s)
        self.session_timeout_s = None if session_timeout_s is None else float(session_timeout_s)
        self.priority = int(priority)

    # pickling: settings only (a builder pickles its own settings); no TVM objects, no sessions
    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def _rpc_metadata(self, local: dict) -> dict:
        """`local` (the builder's metadata) with the device's identity: the builder is not the device."""
        out = dict(local)
        out.update({"rpc_tracker": f"{self.tracker[0]}:{self.tracker[1]}", "rpc_key": self.key,
                    "builder_host": out.pop("host"), "host": f"rpc:{self.key}",
                    "timing": "tvm time_evaluator on the device"})
        return out

    # -- what a target provides ----------------------------------------------------------
    @abstractmethod
    def _space(self, op: Op) -> Space:
        """The space whose configs this backend measures."""

    @abstractmethod
    def library(self, op: Op, config: Config, feat: int, scratch: Path) -> Path:
        """`config`'s kernel as a library file to upload (built here; `scratch` lives for one call)."""

    @abstractmethod
    def _open(self, op: Op, matrix: sp.csr_matrix, feat: int, dense: list[np.ndarray],
              session_timeout_s: float) -> "RemoteSession":
        """A session on a device of the key, holding this call's inputs (RPCUnavailableError: none)."""

    @abstractmethod
    def _session_timeout(self, configs: int) -> float:
        """Default server-side limit of one session of `configs` configs, in seconds."""

    # -- measuring ---------------------------------------------------------------------
    def measure(self, op: str | Op, matrix: sp.csr_matrix, configs: Sequence[Config], feat: int, *,
                check: bool = False, seed: int = 0) -> list[MeasureResult]:
        op, matrix, feat, dense = measure_inputs(op, matrix, feat, seed)
        space = self._space(op)
        session_timeout = self.session_timeout_s or self._session_timeout(len(configs))
        results: list[MeasureResult] = []
        remote: RemoteSession | None = None
        unavailable: str | None = None  # set once a fresh session could not be had: skip the rest
        with tempfile.TemporaryDirectory(prefix="cognate_rpc_") as scratch:
            for config in configs:
                try:
                    space.check(config)
                except InvalidConfigError as exc:
                    results.append(MeasureResult(config, None, error=f"invalid config: {exc}"))
                    continue
                if unavailable is not None:
                    results.append(MeasureResult(config, None, error=unavailable))
                    continue
                start = time.perf_counter()
                try:
                    library = self.library(op, config, feat, Path(scratch))
                except Exception as exc:  # a build failure is this config's result
                    log.debug("building %s failed", config, exc_info=True)
                    results.append(MeasureResult(config, None, error=f"build failed: {type(exc).__name__}: {exc}"))
                    continue
                build_s = time.perf_counter() - start
                if remote is None:
                    try:
                        remote = self._open(op, matrix, feat, dense, session_timeout)
                    except Exception as exc:  # no session, or no usable device in it: skip the rest
                        named = isinstance(exc, CognateError)
                        unavailable = f"{RPC_ERROR_PREFIX}{exc if named else f'{type(exc).__name__}: {exc}'}"
                        results.append(MeasureResult(config, None, error=unavailable))
                        continue
                try:
                    result = remote.measure(config, library, check)
                    result.extra["build_s"] = round(build_s, 4)
                    results.append(result)
                except Exception as exc:  # lost connection, remote crash: a result; next config reconnects
                    log.debug("remote run of %s failed", config, exc_info=True)
                    results.append(MeasureResult(config, None, extra={"rpc_server": remote.server},
                                                 error=f"{RPC_ERROR_PREFIX}{type(exc).__name__}: {exc}"))
                    remote = None
        return results


class RemoteSession:
    """One tracker session of one measure() call: the uploaded libraries and device copies of arrays.

    A subclass sets `device` (``session.cpu(0)``, ``session.cuda(0)``) and runs configs on it.
    """

    device = None

    def __init__(self, backend: RPCBackend, session_timeout_s: float):
        self.session, self.server = request_session(backend.tracker, backend.key,
                                                    timeout_s=backend.request_timeout_s,
                                                    session_timeout_s=session_timeout_s,
                                                    priority=backend.priority)
        self._modules: dict[str, object] = {}
        self._arrays: dict[int, tuple] = {}

    def module(self, library: Path):
        """`library` uploaded and loaded on the device, once per session."""
        name = library.name
        if name not in self._modules:
            self.session.upload(str(library), name)
            self._modules[name] = self.session.load_module(name)
        return self._modules[name]

    def on_device(self, array: np.ndarray):
        """A device copy of an input, made once per session and shared by the configs."""
        import tvm

        if id(array) not in self._arrays:
            self._arrays[id(array)] = (array, tvm.runtime.tensor(array, self.device))
        return self._arrays[id(array)][1]


class RPCLLVMBackend(RPCBackend):
    """The `llvm` backend with kernels built here and run on a device behind a TVM RPC tracker.

    Parameters
    ----------
    tracker
        The tracker's address, ``"HOST:PORT"``.
    key
        The device key its servers registered with (``rpc_server --key KEY``).
    num_threads, mcpu, cache_dir
        Build settings of the kernels, as for `LLVMBackend`: the remote device's
        core count and LLVM CPU name (default: this machine's).
    repeats, min_seconds
        Timing on the device: `repeats` samples (median reported), each looping
        the kernel for at least `min_seconds` (``time_evaluator``'s ``min_repeat_ms``).
    timeout_s
        Per-config limit on one kernel call, cooperative as in `LLVMBackend`.
    request_timeout_s
        How long to wait for the tracker to hand out a device.
    session_timeout_s
        The server ends a session older than this; default: enough for the call's
        configs (``60 + n * (3 * timeout_s + 10)`` seconds).
    """

    target = "llvm"
    platform = "cpu"
    export_kernel = export_llvm_kernel

    def __init__(self, *, tracker: str, key: str, num_threads: int | None = None, mcpu: str | None = None,
                 cache_dir: str | os.PathLike | None = DEFAULT_CACHE_DIR, repeats: int = 7,
                 min_seconds: float = 0.01, timeout_s: float = 10.0, request_timeout_s: float = 60.0,
                 session_timeout_s: float | None = None, priority: int = 1):
        self._init_rpc(tracker, key, request_timeout_s, session_timeout_s, priority)
        if int(repeats) < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        if float(timeout_s) <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.repeats, self.min_seconds = int(repeats), float(min_seconds)
        self.timeout_s = float(timeout_s)
        # the builder: its kernel cache and target; its own timing settings are unused
        self.builder = LLVMBackend(num_threads=num_threads, cache_dir=cache_dir, mcpu=mcpu,
                                   timeout_s=self.timeout_s)

    @property
    def num_threads(self) -> int:
        return self.builder.num_threads

    def kernel_threads(self) -> int:
        return self.num_threads

    @property
    def mcpu(self) -> str | None:
        """The LLVM CPU the kernels are compiled for (what `tuning.write_kernel` exports with)."""
        return self.builder.mcpu

    def metadata(self) -> dict:
        return self._rpc_metadata(self.builder.metadata())

    def _space(self, op: Op) -> CPUSpace:
        return CPUSpace(op)

    def _session_timeout(self, configs: int) -> float:
        return 60.0 + configs * (3 * self.timeout_s + 10.0)

    def _open(self, op, matrix, feat, dense, session_timeout_s) -> "_RemoteRun":
        return _RemoteRun(self, op, matrix, feat, dense, session_timeout_s)

    # -- building --------------------------------------------------------------------
    def _kernel_target(self):
        """The builder's LLVM target (the same `cpu_target` it compiles for), made once per process."""
        from ..kernels.cpu import cpu_target

        if getattr(self, "_target", None) is None:
            self._target = cpu_target(self.builder.num_threads, self.builder.mcpu)
        return self._target

    def library(self, op: Op, config: CPUConfig, feat: int, scratch: Path) -> Path:
        """The shared library of `config`'s kernel: the kernel cache's file, else exported to `scratch`."""
        from ..kernels.cpu import KernelSpec

        module = self.builder.kernel(op, config, feat)
        target = self._kernel_target()
        key = KernelSpec(op.name, config, int(feat), str(target), int(target.attrs.get("num-cores", 1))).key()
        cached = self.builder.kernel_cache.path(key)
        if cached is not None and cached.is_file():
            return cached
        path = scratch / f"{key}.so"
        if not path.is_file():
            module.export_library(str(path))
        return path


class _RemoteRun(RemoteSession):
    """An llvm session: CPU-layout operands of one matrix, timed on the device's CPU."""

    def __init__(self, backend: RPCLLVMBackend, op: Op, matrix: sp.csr_matrix, feat: int,
                 dense: list[np.ndarray], session_timeout_s: float):
        super().__init__(backend, session_timeout_s)
        self.backend, self.op, self.matrix, self.feat, self.dense = backend, op, matrix, feat, dense
        self.device = self.session.cpu(0)
        self.threads = int(self.session.get_function("runtime.NumThreads")())
        if self.threads != backend.num_threads and self.server not in _WARNED_THREADS:
            _WARNED_THREADS.add(self.server)
            log.warning("RPC server %s runs %d threads, the kernels were built for %d: start it with "
                        "TVM_NUM_THREADS=%d", self.server, self.threads, backend.num_threads,
                        backend.num_threads)
        self.operands = KernelOperands(op, matrix, feat, dense)

    def measure(self, config: CPUConfig, library: Path, check: bool) -> MeasureResult:
        backend = self.backend
        module = self.module(library)
        call_args = self.operands.call_args(config, on_device=self.on_device, device=self.device)
        extra = {"rpc_server": self.server, "remote_threads": self.threads}
        once = module.time_evaluator("main", self.device, number=1, repeat=1)
        first_s = float(once(*call_args).mean)  # the first run, timed on the device
        # with `check`, the first run's output is fetched back
        correct, failed = self.operands.first_run(config, call_args, first_s, check=check,
                                                  timeout_s=backend.timeout_s, extra=extra)
        if failed is not None:
            return failed
        _, repeats, min_seconds = timing_plan(first_s, timeout_s=backend.timeout_s, repeats=backend.repeats,
                                              min_seconds=backend.min_seconds)
        min_ms = int(1e3 * min_seconds)
        timer = module.time_evaluator("main", self.device, number=1, repeat=repeats, min_repeat_ms=min_ms)
        samples = np.asarray(timer(*call_args).results, dtype=np.float64)
        return MeasureResult(config, float(np.median(samples) * 1e3), correct=correct, extra=extra)


# target -> "module:Class" of its RPC backend, imported on first use
_RPC_BACKENDS = {"llvm": "cognate_tvm.backends.rpc:RPCLLVMBackend",
                 "cuda": "cognate_tvm.backends.rpc_cuda:RPCCUDABackend"}
RPC_TARGETS = tuple(_RPC_BACKENDS)


def create_rpc(target: str, *, tracker: str, key: str, **options) -> Backend:
    """The RPC backend of `target` ("llvm", "cuda") for devices behind `tracker` with `key`."""
    if target not in _RPC_BACKENDS:
        raise RPCSettingsError(f"--rpc-tracker works with --target {' or '.join(RPC_TARGETS)}; "
                               f"got target {target!r} (its times do not come from a device)")
    module, cls = _RPC_BACKENDS[target].split(":")
    return getattr(importlib.import_module(module), cls)(tracker=tracker, key=key, **options)


__all__ = ["RPCBackend", "RPCLLVMBackend", "RPC_TARGETS", "RemoteSession", "create_rpc"]
