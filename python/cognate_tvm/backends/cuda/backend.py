"""`CUDABackend`: builds GPUSpace configs' kernels with TVM and times them on the GPU (see the package
docstring); `_RunContext` holds one `measure` call's operands on the device."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from ...errors import InvalidConfigError
from ...kernels import cuda as kcuda
from ...kernels import cuda_prep
from ...ops import Op, get_op
from ...space.base import Config
from ...space.gpu import GPUSpace
from ..base import Backend, MeasureResult
from ..export import export_cuda_kernel
from .cusparse import CuSparseLibrary
from .runtime import require_gpu
from .timing import Event, event_factory, outputs_match, time_launches

logger = logging.getLogger(__name__)


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
