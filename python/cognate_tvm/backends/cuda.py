"""The `cuda` backend: SparseTIR-style TensorIR kernels on an NVIDIA GPU, cuSPARSE as vendor.

On a machine with a GPU, `measure` builds each config's kernel variant (once;
variants are shared across configs and cached per backend instance) and times
it with `time_launches`: each of `repeat` samples is `number` back-to-back
launches between two CUDA events (`number` grows until a sample lasts
`min_repeat_ms`), and the median per-launch time is reported. cuSPARSE is
timed by the very same function. With `check`, the output buffer is filled
with NaN before the warm-up run and before every timed sample, and the output
of the warm-up and of every timed sample is compared with scipy's result, so a
kernel that leaves any element unwritten, or goes wrong only when launched
back to back, fails. Without a GPU it raises DeviceUnavailableError, unless
`compile_only=True`: then every selected config is built, its CUDA source
emitted (to `source_dir` when given) and compiled to PTX with nvcc when nvcc
is present; each result carries `compiled` and, when it failed, `error`.

The PyPI TVM wheel launches CUDA kernels through `libtvm_runtime_cuda.so`,
which needs `libcuda.so.1` (the driver) and `libcudart.so.13` (CUDA 13
runtime: torch's `nvidia` wheels or a CUDA 13 toolkit);
`cognate_tvm.kernels.cuda.load_tvm_cuda_runtime` finds and loads them. The
device code is compiled when a module is created on the GPU, by NVRTC (needs
`cuda-bindings`) or nvcc: `select_compile_mode` sets TVM_CUDA_COMPILE_MODE.
A machine whose driver sees a GPU but where TVM cannot use it gets an error
that says why, never a silent "no GPU".

Vendor baseline: cuSPARSE through `torch.sparse` with a CUDA build of torch, on
the same int32 CSR arrays as our kernels: SpMM is `torch.sparse.mm` on a CSR
tensor (cusparseSpMM), SDDMM is `torch.sparse.sampled_addmm` with beta=0
(cusparseSDDMM), which computes (X @ Y^T) at A's nonzeros. Our SDDMM also
scales by A's values (fused into its one store); cuSPARSE is *not* charged a
separate elementwise multiply for that: the product with A's values is applied
on the host, outside the timing, before its output is checked.
"""
from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import DeviceUnavailableError, InvalidConfigError
from ..kernels import cuda as kcuda
from ..kernels import cuda_prep
from ..ops import Op, get_op
from ..space.base import Config
from ..space.gpu import GPUSpace
from .base import CHECK_ATOL, CHECK_RTOL, Backend, MeasureResult, VendorLibrary
from .export import export_cuda_kernel

logger = logging.getLogger(__name__)

NO_GPU_MESSAGE = ("no CUDA GPU is visible to TVM (tvm.cuda({device}).exist is False; {driver}); run on a "
                  "machine with an NVIDIA GPU, or pass compile_only=True (CLI: --compile-only) to "
                  "build the kernels and compile them to PTX without running them")
BROKEN_RUNTIME_MESSAGE = ("{driver}, but TVM cannot use it: {reason}. TVM's libtvm_runtime_cuda.so needs "
                          "libcuda.so.1 and libcudart.so.13 (a CUDA 13 toolkit, or torch's nvidia wheels)")
MAX_LAUNCHES = 10_000  # cap of back-to-back launches in one timed sample


# -- timing: the same code for our kernels and for cuSPARSE ---------------------------------
class Event(Protocol):
    """A CUDA event as torch.cuda.Event exposes it."""

    def record(self) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_time(self, end: "Event") -> float: ...


@dataclass
class Timing:
    """What `time_launches` measured: per-launch ms of each sample, and the output checks."""

    samples_ms: list[float]
    number: int
    checks: list[bool] = field(default_factory=list)  # one per timed sample, when checked

    @property
    def median_ms(self) -> float:
        return float(np.median(self.samples_ms))


def time_launches(launch: Callable[[], object], *, make_event: Callable[[], Event], number: int,
                  repeat: int, min_sample_ms: float = 0.0, before: Callable[[], None] | None = None,
                  after: Callable[[], bool] | None = None) -> Timing:
    """Time `launch` as `repeat` samples of `number` back-to-back launches between two events.

    `before()` runs ahead of each sample, outside the events (e.g. a NaN fill of
    the output); `after()` runs once each sample has finished and returns whether
    its output is right. With `min_sample_ms`, `number` is first raised (up to
    MAX_LAUNCHES) until one sample lasts that long, so short kernels are not
    dominated by event resolution. Returns per-launch times in ms.
    """
    if number < 1 or repeat < 1:
        raise ValueError(f"number and repeat must be >= 1, got number={number}, repeat={repeat}")

    def sample(n: int) -> float:
        start, end = make_event(), make_event()
        start.record()
        for _ in range(n):
            launch()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))

    if min_sample_ms > 0:
        while number < MAX_LAUNCHES:
            total = sample(number)
            if total >= min_sample_ms:
                break
            grow = min_sample_ms / total if total > 0 else 10.0
            number = min(MAX_LAUNCHES, max(number + 1, int(number * min(grow * 1.2, 10.0))))
    timing = Timing([], number)
    for _ in range(repeat):
        if before is not None:
            before()
        timing.samples_ms.append(sample(number) / number)
        if after is not None:
            timing.checks.append(bool(after()))
    return timing


class CudartEvent:
    """A CUDA event through libcudart (ctypes), on the legacy default stream, where TVM launches.

    Used when torch has no CUDA; same interface as torch.cuda.Event.
    """

    _lib = None

    def __init__(self):
        if CudartEvent._lib is None:
            kcuda.preload_cudart()
            lib = ctypes.CDLL(kcuda.CUDART_SONAME)
            lib.cudaEventCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
            lib.cudaEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            lib.cudaEventSynchronize.argtypes = [ctypes.c_void_p]
            lib.cudaEventElapsedTime.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]
            lib.cudaEventDestroy.argtypes = [ctypes.c_void_p]
            CudartEvent._lib = lib
        self._event = ctypes.c_void_p()
        self._call("cudaEventCreate", ctypes.byref(self._event))

    def _call(self, name: str, *args) -> None:
        status = getattr(self._lib, name)(*args)
        if status != 0:
            raise RuntimeError(f"{name} failed with cudaError {status}")

    def record(self) -> None:
        self._call("cudaEventRecord", self._event, None)

    def synchronize(self) -> None:
        self._call("cudaEventSynchronize", self._event)

    def elapsed_time(self, end: "CudartEvent") -> float:
        ms = ctypes.c_float()
        self._call("cudaEventElapsedTime", ctypes.byref(ms), self._event, end._event)
        return float(ms.value)

    def __del__(self):
        if self._lib is not None and getattr(self, "_event", None):
            self._lib.cudaEventDestroy(self._event)


def event_factory(device_id: int = 0) -> Callable[[], Event]:
    """torch.cuda.Event when torch has CUDA (its default stream is the legacy one TVM launches on),
    else `CudartEvent`."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.set_device(device_id)
            return lambda: torch.cuda.Event(enable_timing=True)
    except ImportError:
        pass
    return CudartEvent


def outputs_match(expected: np.ndarray, output: np.ndarray) -> bool:
    """`output` equals `expected` within the float32 tolerance of `base.check_output`; NaN never matches."""
    if output.shape != expected.shape:
        return False
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    return bool(np.allclose(output, expected, rtol=CHECK_RTOL, atol=CHECK_ATOL * scale))


def require_gpu(device_id: int = 0) -> None:
    """Raise DeviceUnavailableError unless TVM can run on CUDA device `device_id`.

    The message tells "no GPU here" apart from "a GPU, but TVM's CUDA runtime
    does not load" (which names the missing library).
    """
    status = kcuda.cuda_runtime_status(device_id)
    if status["tvm_device"]:
        return
    if status["driver_gpus"] > 0:
        reason = status["tvm_runtime_error"] or f"tvm.cuda({device_id}).exist is False"
        raise DeviceUnavailableError(BROKEN_RUNTIME_MESSAGE.format(driver=status["driver"], reason=reason))
    raise DeviceUnavailableError(NO_GPU_MESSAGE.format(device=device_id, driver=status["driver"]))


class CUDABackend(Backend):
    """Measures GPUSpace configs with TVM-compiled CUDA kernels.

    Parameters
    ----------
    arch : "sm_80" (A100) or "sm_90" (H100/H200).
    compile_only : build, emit CUDA and compile to PTX instead of running.
    device_id : CUDA device index.
    nvcc : path of nvcc for `compile_only` (default: PATH, then /usr/local/cuda/bin).
    source_dir : where `compile_only` writes kernels_<arch>.cu / .ptx (default: nowhere).
    number, repeat, min_repeat_ms : timing (`time_launches`): `repeat` samples of
        `number` back-to-back launches between two CUDA events, `number` raised
        until a sample lasts `min_repeat_ms`; the median per-launch time is reported.
        `vendor()` times cuSPARSE with the same settings.
    """

    target = "cuda"
    platform = "gpu"
    export_kernel = export_cuda_kernel

    def __init__(self, *, arch: str = "sm_80", compile_only: bool = False, device_id: int = 0,
                 nvcc: str | os.PathLike | None = None, source_dir: str | os.PathLike | None = None,
                 number: int = 10, repeat: int = 5, min_repeat_ms: float = 1.0):
        if arch not in kcuda.ARCHS:
            raise InvalidConfigError(f"arch {arch!r} not supported; valid: {', '.join(kcuda.ARCHS)}")
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be >= 1, got number={number}, repeat={repeat}")
        self.arch = arch
        self.compile_only = bool(compile_only)
        self.device_id = int(device_id)
        self.nvcc = None if nvcc is None else str(nvcc)
        self.source_dir = None if source_dir is None else Path(source_dir)
        self.number, self.repeat, self.min_repeat_ms = int(number), int(repeat), float(min_repeat_ms)
        self._libs: dict[kcuda.KernelKey, object] = {}
        # compile_only: id(module) -> (PTX entry names, nvcc error), so nvcc runs once per module
        self._ptx: dict[int, tuple[set[str], str | None]] = {}
        self._last: tuple | None = None  # (op, matrix, feat, seed, _RunContext) of the last measure

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_libs"], state["_ptx"] = {}, {}  # compiled modules stay with the process that built them
        state["_last"] = None
        return state

    def with_timing(self, *, number: int, repeat: int, min_repeat_ms: float = 0.0) -> "CUDABackend":
        """The same backend with other timing settings, sharing the compiled kernels."""
        other = CUDABackend(arch=self.arch, compile_only=self.compile_only, device_id=self.device_id,
                            nvcc=self.nvcc, source_dir=self.source_dir, number=number, repeat=repeat,
                            min_repeat_ms=min_repeat_ms)
        other._libs, other._ptx = self._libs, self._ptx
        return other

    def metadata(self) -> dict:
        meta = super().metadata()
        meta.update({"arch": self.arch, "compile_only": self.compile_only, "device_id": self.device_id,
                     "timing": {"number": self.number, "repeat": self.repeat, "min_repeat_ms": self.min_repeat_ms,
                                "method": "back-to-back launches between two CUDA events, median of samples"}})
        return meta

    def vendor(self) -> "CuSparseLibrary":
        """cuSPARSE, timed with this backend's settings (same launches per sample and samples)."""
        return CuSparseLibrary(device_id=self.device_id, number=self.number, repeat=self.repeat,
                               min_sample_ms=self.min_repeat_ms)

    # -- building ----------------------------------------------------------------
    def prepare(self, ops: Sequence[str | Op] = ("spmm", "sddmm")) -> dict[str, str]:
        """Build every kernel variant of `ops` now instead of on first use.

        Returns {variant name: error} for the variants that failed to build.
        Unless `compile_only`, the GPU must be usable first (DeviceUnavailableError
        otherwise): a module built before TVM's CUDA runtime is loaded cannot run.
        """
        if not self.compile_only:
            require_gpu(self.device_id)
        keys = {key for op in ops for key in kcuda.all_keys(op)}
        return {k.name: str(v) for k, v in self._build(keys).items() if isinstance(v, Exception)}

    def _build(self, keys: set[kcuda.KernelKey]) -> dict[kcuda.KernelKey, object | Exception]:
        """Build the keys not built yet (one module; per key on failure); key -> lib or error."""
        out: dict[kcuda.KernelKey, object | Exception] = {k: self._libs[k] for k in keys if k in self._libs}
        todo = sorted(keys - set(out), key=lambda k: k.name)
        if not todo:
            return out
        try:
            lib = kcuda.build(todo, arch=self.arch)
            out.update({k: lib for k in todo})
        except Exception:  # noqa: BLE001 - isolate the variant that fails
            logger.warning("building %d CUDA variants together failed; building one by one", len(todo))
            for key in todo:
                try:
                    out[key] = kcuda.build([key], arch=self.arch)
                except Exception as err:  # noqa: BLE001
                    out[key] = err
        self._libs.update({k: v for k, v in out.items() if not isinstance(v, Exception)})
        return out

    def _keys(self, op: Op, configs: Sequence[Config]) -> list[kcuda.KernelKey | Exception]:
        space = GPUSpace(op)
        keys: list[kcuda.KernelKey | Exception] = []
        for config in configs:
            try:
                space.check(config)
                keys.append(kcuda.kernel_key(op, config))
            except InvalidConfigError as err:
                keys.append(err)
        return keys

    # -- measuring ---------------------------------------------------------------
    def measure(self, op: str | Op, matrix: sp.csr_matrix, configs: Sequence[Config], feat: int, *,
                check: bool = False, seed: int = 0) -> list[MeasureResult]:
        op = get_op(op)
        if feat < 1:
            raise ValueError(f"feat must be >= 1, got {feat}")
        if self.compile_only:
            return self._compile_only(op, matrix, configs)
        import tvm

        require_gpu(self.device_id)
        dev = tvm.cuda(self.device_id)
        if min(matrix.shape) == 0:
            return [MeasureResult(c, None, error=f"matrix of shape {matrix.shape} has nothing to compute")
                    for c in configs]
        keys = self._keys(op, configs)
        libs = self._build({k for k in keys if isinstance(k, kcuda.KernelKey)})
        run = self._context(op, matrix, feat, seed, dev)
        results = []
        for config, key in zip(configs, keys):
            if isinstance(key, Exception):
                results.append(MeasureResult(config, None, error=f"invalid config: {key}"))
                continue
            lib = libs[key]
            if isinstance(lib, Exception):
                results.append(MeasureResult(config, None, error=f"build failed: {lib}",
                                             extra={"kernel": key.name}))
                continue
            try:
                result = self._run_one(run, config, key, lib, check)
            except Exception as err:  # noqa: BLE001 - a failing config is a result
                result = MeasureResult(config, None, error=f"{type(err).__name__}: {err}",
                                       extra={"kernel": key.name})
            results.append(result)
        return results

    def _context(self, op: Op, matrix: sp.csr_matrix, feat: int, seed: int, dev) -> "_RunContext":
        """The operands on the device: those of the last call when it measured the same matrix object
        (a sweep that measures the configs in chunks prepares each format and uploads once)."""
        last = self._last
        if last is not None and last[0] == op.name and last[1] is matrix and last[2:4] == (feat, seed):
            return last[4]
        run = _RunContext(op, matrix, feat, op.make_dense_inputs(matrix, feat, seed=seed), dev,
                          event_factory(self.device_id))
        self._last = (op.name, matrix, feat, seed, run)
        return run

    def _run_one(self, run: "_RunContext", config, key, lib, check: bool) -> MeasureResult:
        import tvm

        sparse, sparse_dev = run.sparse(config)
        dense_dev, nvec = run.dense(config.vec)
        shape = cuda_prep.empty_output(sparse, nvec, config.vec).shape
        out, nan = run.output(shape, check)
        args = cuda_prep.kernel_args(sparse, dense_dev, out, nvec, config.rows_per_block)
        args[:len(sparse_dev)] = sparse_dev
        func = lib[key.name]

        def fill() -> None:  # an element the kernel does not write stays NaN and fails the check
            out.copyfrom(nan)

        def right() -> bool:
            output = cuda_prep.finish_output(run.op, out.numpy(), run.matrix, run.feat)
            return outputs_match(run.expected(), output)

        if check:
            fill()
        func(*args)  # warm-up (also loads the module onto the GPU)
        run.dev.sync()
        warm_ok = right() if check else None
        timing = time_launches(lambda: func(*args), make_event=run.make_event, number=self.number,
                               repeat=self.repeat, min_sample_ms=self.min_repeat_ms,
                               before=fill if check else None, after=right if check else None)
        extra = {"kernel": key.name, "launches": timing.number,
                 "samples_ms": [round(t, 6) for t in timing.samples_ms]}
        correct = None
        if check:
            correct = bool(warm_ok and all(timing.checks))
            extra["checked_runs"] = 1 + len(timing.checks)
            if not correct:
                extra["wrong_runs"] = (["warm-up"] if not warm_ok else []) + [
                    f"timed sample {n}" for n, ok in enumerate(timing.checks) if not ok]
        return MeasureResult(config, timing.median_ms, correct=correct, extra=extra)

    # -- compile only --------------------------------------------------------------
    def _compile_only(self, op: Op, matrix: sp.csr_matrix, configs: Sequence[Config]) -> list[MeasureResult]:
        keys = self._keys(op, configs)
        valid = {k for k in keys if isinstance(k, kcuda.KernelKey)}
        libs = self._build(valid)
        # One nvcc run per built module (usually one module holds every variant).
        modules: dict[int, tuple[object, list[kcuda.KernelKey]]] = {}
        for key in sorted(valid, key=lambda k: k.name):
            if not isinstance(libs[key], Exception):
                modules.setdefault(id(libs[key]), (libs[key], []))[1].append(key)
        status: dict[kcuda.KernelKey, str | None] = {}
        for lib, members in modules.values():
            if id(lib) not in self._ptx:
                source = kcuda.cuda_source(lib)
                ptx, nvcc_error = None, None
                try:
                    ptx = kcuda.compile_ptx(source, arch=self.arch, nvcc=self.nvcc)
                except kcuda.NvccError as err:
                    nvcc_error = str(err)
                self._write_sources(f"{op.name}_kernels_{self.arch}_{len(self._ptx)}", source, ptx)
                self._ptx[id(lib)] = (kcuda.ptx_entries(ptx) if ptx is not None else set(), nvcc_error)
            entries, nvcc_error = self._ptx[id(lib)]
            for key in members:
                missing = sorted(set(key.kernel_names) - entries)
                status[key] = nvcc_error or (f"nvcc output lacks kernels {missing}" if missing else None)
        prepared: dict[tuple, str | None] = {}
        results = []
        for config, key in zip(configs, keys):
            if isinstance(key, Exception):
                results.append(MeasureResult(config, None, error=f"invalid config: {key}",
                                             extra={"compiled": False}))
                continue
            if isinstance(libs[key], Exception):
                error = f"build failed: {libs[key]}"
            else:
                error = status[key]
            extra = {"compiled": error is None, "kernel": key.name, "arch": self.arch}
            skey = cuda_prep.layout_key(config)
            if skey not in prepared:  # the host-side format conversion is exercised too
                try:
                    cuda_prep.prepare_sparse(op, matrix, config)
                    prepared[skey] = None
                except Exception as err:  # noqa: BLE001
                    prepared[skey] = f"format preparation failed: {type(err).__name__}: {err}"
            results.append(MeasureResult(config, None, error=error or prepared[skey], extra=extra))
        return results

    def _write_sources(self, stem: str, source: str, ptx: str | None) -> None:
        if self.source_dir is None:
            return
        self.source_dir.mkdir(parents=True, exist_ok=True)
        (self.source_dir / f"{stem}.cu").write_text(source)
        if ptx is not None:
            (self.source_dir / f"{stem}.ptx").write_text(ptx)
        logger.info("wrote %s.cu%s to %s", stem, " and .ptx" if ptx else "", self.source_dir)


class _RunContext:
    """Per-`measure` state: operands on the device, cached per layout and vector width."""

    def __init__(self, op: Op, matrix: sp.csr_matrix, feat: int, dense: list[np.ndarray], dev,
                 make_event: Callable[[], Event]):
        self.op, self.matrix, self.feat, self.dense_host, self.dev = op, matrix, feat, dense, dev
        self.make_event = make_event
        self._sparse: dict[tuple, tuple] = {}
        self._dense: dict[int, tuple[list, int]] = {}
        self._expected: np.ndarray | None = None
        self._out: dict[tuple, object] = {}
        self._nan: dict[tuple, np.ndarray] = {}

    def expected(self) -> np.ndarray:
        if self._expected is None:
            self._expected = self.op.reference(self.matrix, *self.dense_host)
        return self._expected

    def sparse(self, config) -> tuple:
        import tvm

        key = cuda_prep.layout_key(config)
        if key not in self._sparse:
            sparse = cuda_prep.prepare_sparse(self.op, self.matrix, config)
            self._sparse[key] = (sparse, [tvm.runtime.tensor(a, self.dev) for a in sparse.arrays])
        return self._sparse[key]

    def output(self, shape: tuple, check: bool) -> tuple:
        """(device output buffer, host NaN array or None) of `shape`, allocated once per shape.

        Allocating both per config cost more than the kernels on large matrices (a 646k x 128
        output is 330 MB); a buffer shared across configs is fine, since a checked run fills it
        with NaN first and an unchecked one only times the kernel.
        """
        import tvm

        if shape not in self._out:
            self._out[shape] = tvm.runtime.empty(shape, "float32", self.dev)
        if check and shape not in self._nan:
            self._nan[shape] = np.full(shape, np.nan, np.float32)
        return self._out[shape], (self._nan[shape] if check else None)

    def dense(self, vec: int) -> tuple[list, int]:
        import tvm

        if vec not in self._dense:
            padded, nvec = cuda_prep.pad_dense(self.dense_host, vec)
            self._dense[vec] = ([tvm.runtime.tensor(d, self.dev) for d in padded], nvec)
        return self._dense[vec]


def csr_tensor(matrix: sp.csr_matrix, device):
    """`matrix` as a torch CSR tensor with int32 indices (what our kernels get too) on `device`."""
    import torch

    return torch.sparse_csr_tensor(torch.from_numpy(np.ascontiguousarray(matrix.indptr, dtype=np.int32)),
                                   torch.from_numpy(np.ascontiguousarray(matrix.indices, dtype=np.int32)),
                                   torch.from_numpy(np.ascontiguousarray(matrix.data, dtype=np.float32)),
                                   size=matrix.shape, device=device)


class CuSparseLibrary(VendorLibrary):
    """cuSPARSE SpMM / SDDMM through torch.sparse (needs a CUDA build of torch and a GPU).

    Both get the matrix as an int32 CSR tensor, like our kernels. SDDMM times
    `sampled_addmm` alone ((X @ Y^T) at A's nonzeros); the product with A's
    values is applied on the host after timing, for the check only. Timing is
    `time_launches`, the function that times our kernels: `number` back-to-back
    calls between two CUDA events per sample (raised until a sample lasts
    `min_sample_ms`), median of `repeat` samples, and with `check` the output of
    every timed sample is compared with scipy's result.
    """

    name = "cusparse"

    def __init__(self, *, device_id: int = 0, number: int = 10, repeat: int = 5, min_sample_ms: float = 1.0):
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be >= 1, got number={number}, repeat={repeat}")
        self.device_id, self.number, self.repeat = int(device_id), int(number), int(repeat)
        self.min_sample_ms = float(min_sample_ms)

    def method(self, op: Op | str) -> str:
        return {"spmm": "torch.sparse.mm (cusparseSpMM), int32 CSR",
                "sddmm": "torch.sparse.sampled_addmm beta=0 (cusparseSDDMM), int32 CSR; "
                         "A's values applied outside the timing"}[get_op(op).name]

    def _device(self):
        import torch

        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"cuSPARSE baseline needs a GPU and a CUDA build of torch; this torch "
                f"{torch.__version__} has CUDA {torch.version.cuda} and sees no GPU")
        return torch.device("cuda", self.device_id)

    def launcher(self, op: str | Op, matrix: sp.csr_matrix, dense: list[np.ndarray], device=None
                 ) -> tuple[Callable[[], object], Callable[[object], np.ndarray]]:
        """(launch, finish): `launch()` runs the library call once and returns its raw output,
        `finish(raw)` turns that into our op's result (C, or SDDMM values in A's order) on the host.

        `device` defaults to this library's GPU; a CPU device runs the same calls
        through torch's CPU kernels (used by the tests on machines without a GPU).
        """
        import torch

        op = get_op(op)
        device = self._device() if device is None else torch.device(device)
        a = csr_tensor(matrix, device)
        tensors = [torch.from_numpy(np.ascontiguousarray(d, dtype=np.float32)).to(device) for d in dense]
        if op.name == "spmm":
            b = tensors[0]
            return (lambda: torch.sparse.mm(a, b)), (lambda raw: raw.cpu().numpy())
        x, y_t = tensors[0], tensors[1].t()
        values = np.asarray(matrix.data, dtype=np.float32)

        def finish(raw) -> np.ndarray:
            return raw.values().cpu().numpy() * values  # A's values: host side, untimed
        return (lambda: torch.sparse.sampled_addmm(a, x, y_t, beta=0.0)), finish

    def run(self, op: str | Op, matrix: sp.csr_matrix, dense: list[np.ndarray]) -> np.ndarray:
        """cuSPARSE's result (C, or SDDMM values in A's order) as numpy, for checking."""
        launch, finish = self.launcher(op, matrix, dense)
        return finish(launch())

    def measure(self, op: str | Op, matrix: sp.csr_matrix, feat: int, *, seed: int = 0, check: bool = True,
                device=None, make_event: Callable[[], Event] | None = None) -> dict:
        """Time (and check every timed sample of) cuSPARSE on `matrix`; a dict with time_ms,
        samples_ms, launches, method, correct (None unchecked) and wrong_runs.

        `device` and `make_event` default to this library's GPU and CUDA events
        (the tests pass a CPU device and host-clock events)."""
        import torch

        op = get_op(op)
        dense = op.make_dense_inputs(matrix, feat, seed=seed)
        launch, finish = self.launcher(op, matrix, dense, device=device)
        last: list = [None]

        def call():
            last[0] = launch()

        expected = op.reference(matrix, *dense) if check else None
        call()  # warm-up: cuSPARSE handles, workspace, descriptors
        if device is None or torch.device(device).type == "cuda":
            torch.cuda.synchronize(self.device_id if device is None else torch.device(device))
        warm_ok = outputs_match(expected, finish(last[0])) if check else None
        timing = time_launches(call, make_event=make_event or event_factory(self.device_id), number=self.number,
                               repeat=self.repeat, min_sample_ms=self.min_sample_ms,
                               after=(lambda: outputs_match(expected, finish(last[0]))) if check else None)
        out = {"time_ms": timing.median_ms, "samples_ms": timing.samples_ms, "launches": timing.number,
               "method": self.method(op), "correct": None}
        if check:
            out["correct"] = bool(warm_ok and all(timing.checks))
            out["wrong_runs"] = (["warm-up"] if not warm_ok else []) + [
                f"timed sample {n}" for n, ok in enumerate(timing.checks) if not ok]
        return out

    def time_ms(self, op: str | Op, matrix: sp.csr_matrix, feat: int, *, seed: int = 0) -> float:
        return float(self.measure(op, matrix, feat, seed=seed, check=False)["time_ms"])


def launched_kernels(fn: Callable[[], object]) -> list[str] | str:
    """Names of the GPU kernels one call of `fn` launches (torch profiler), or why they are unknown.

    Recorded next to the vendor's times, so a reader sees exactly what a cuSPARSE
    call costs (e.g. whether torch adds a copy or a memset to it).
    """
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = set()
        for event in prof.key_averages():
            device_time = getattr(event, "self_device_time_total", None)
            if device_time is None:
                device_time = getattr(event, "self_cuda_time_total", 0)
            if device_time and device_time > 0:
                names.add(event.key)
        return sorted(names)
    except Exception as err:  # noqa: BLE001 - informational only
        return f"unknown ({type(err).__name__}: {err})"
