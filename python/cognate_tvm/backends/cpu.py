"""The `llvm` backend: CPU-space kernels built with TVM, run and timed for real.

Each config's kernel is compiled once per (op, config, dense width, target)
and cached in memory and on disk (:mod:`cognate_tvm.kernels.cache`); the
matrix is converted to the layout the config needs (plain or column-panel CSR,
dense operands zero-padded to the dense tile) before timing, and only the
kernel call is timed: warm-up calls, then the median of repeats
(:func:`~cognate_tvm.backends.base.median_time_ms`).

Every failure of a config — invalid config, build error, run error, timeout —
becomes that config's ``MeasureResult.error``. The timeout is cooperative: a
compiled kernel cannot be interrupted, so a config whose first (checked) call
takes longer than ``timeout_s`` is reported as timed out and not repeated, and
the number of timed repeats is cut so the config's total stays near the limit.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import InvalidConfigError, MatrixFormatError, ShapeError
from ..kernels.cache import DEFAULT_CACHE_DIR
from ..matrix import as_csr
from ..ops import Op, get_op
from ..space.base import Config
from ..space.cpu import CPUConfig, CPUSpace
from .base import Backend, MeasureResult, VendorLibrary, check_output, measure_inputs, median_time_ms
from .export import export_llvm_kernel

log = logging.getLogger(__name__)


class LLVMBackend(Backend):
    """Measures CPU-space configs with TVM-compiled kernels on this machine.

    Parameters
    ----------
    num_threads
        Threads of TVM's pool and the target's core count (default: all cores).
        Set through ``TVM_NUM_THREADS`` by the constructor, which only takes
        effect if TVM's thread pool has not started yet in this process (the
        pool otherwise defaults to half the cores).
    cache_dir
        Directory of compiled kernels (default ``~/.cache/cognate_tvm/kernels``);
        None keeps them in memory only.
    warmup, repeats, min_seconds
        Timing: calls before timing, timed samples (median reported), and the
        least duration of one sample (short kernels are looped).
    timeout_s
        Per-config limit on one kernel call (see the module docstring).
    mcpu
        LLVM CPU name to compile for (default: this machine's, from TVM's LLVM).
    dtype
        Element type of the dense operands: "float32" (default) or "bfloat16" (half
        the bytes of the operand SpMM and SDDMM stream most; products accumulate
        and outputs are stored in float32). With bfloat16 the caller's float32
        operands are rounded to nearest even, and `check` compares against scipy
        on the rounded operands.
    clock
        "wall", "thread" or "auto" (default): "thread" times the CPU time of the
        calling thread, where a one-thread TVM kernel runs, so time spent waiting
        for a core on a loaded machine is not counted (measured here under load
        average 5-12, wall times of the same kernel varied up to 10x); "auto" is
        "thread" with one thread and "wall" otherwise (pool threads' CPU time is
        not the kernel's latency).
    """

    target = "llvm"
    platform = "cpu"
    export_kernel = export_llvm_kernel

    def __init__(self, *, num_threads: int | None = None,
                 cache_dir: str | os.PathLike | None = DEFAULT_CACHE_DIR, warmup: int = 2, repeats: int = 7,
                 min_seconds: float = 0.01, timeout_s: float = 10.0, mcpu: str | None = None,
                 clock: str = "auto", dtype: str = "float32"):
        if num_threads is not None and int(num_threads) < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.num_threads = int(num_threads or os.cpu_count() or 1)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.warmup, self.repeats = int(warmup), int(repeats)
        self.min_seconds, self.timeout_s = float(min_seconds), float(timeout_s)
        self.mcpu = mcpu
        from ..kernels.cpu_operands import check_dense_dtype

        self.dtype = check_dense_dtype(dtype)
        if clock not in ("auto", "wall", "thread"):
            raise ValueError(f"clock must be 'auto', 'wall' or 'thread', got {clock!r}")
        if clock == "thread" and self.num_threads != 1:
            raise ValueError(f"clock 'thread' needs num_threads=1 (got {self.num_threads}): pool threads' "
                             f"CPU time is not the kernel's latency")
        self.clock = "thread" if clock == "auto" and self.num_threads == 1 else ("wall" if clock == "auto" else clock)
        self._setup()

    def _setup(self) -> None:
        if os.environ.get("TVM_NUM_THREADS") != str(self.num_threads):
            if "tvm" in sys.modules:
                log.debug("TVM already imported; TVM_NUM_THREADS=%d applies only if its pool "
                          "has not started", self.num_threads)
            os.environ["TVM_NUM_THREADS"] = str(self.num_threads)
        from ..kernels.cache import KernelCache
        from ..kernels.cpu import cpu_target

        self._target = cpu_target(self.num_threads, self.mcpu)
        self._cache = KernelCache(self.cache_dir)

    # pickling: settings only; compiled modules are reloaded from the cache after unpickling
    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._setup()

    @property
    def kernel_cache(self):
        return self._cache

    @property
    def llvm_target(self):
        """The TVM target the kernels are built for (this backend's threads and CPU); `target` is the name."""
        return self._target

    def kernel_threads(self) -> int:
        return self.num_threads

    def vendor(self) -> VendorLibrary:
        """MKL (this backend's thread count) when sparse_dot_mkl finds its runtime, else scipy.

        The library times itself in a worker process without TVM (`isolated`),
        as TVM's threads in this process would slow MKL down.
        """
        from .vendor import MKLLibrary, ScipyLibrary, mkl_available

        if mkl_available():
            return MKLLibrary(num_threads=self.num_threads, isolated=True)
        return ScipyLibrary(isolated=True)

    def metadata(self) -> dict:
        out = super().metadata()
        import tvm

        from ..kernels.cpu import GENERATOR_VERSION

        out.update({"num_threads": self.num_threads, "clock": self.clock, "llvm_target": str(self._target),
                    "dense_dtype": self.dtype,
                    "tvm": tvm.__version__,
                    "kernel_generator": GENERATOR_VERSION})
        return out

    def kernel(self, op: str | Op, config: CPUConfig, feat: int):
        """The compiled module of `config` for `op` and width `feat` (cached)."""
        from ..kernels.cpu import build_kernel

        return build_kernel(op, config, feat, self._target, cache=self._cache, dtype=self.dtype)

    def run(self, op: str | Op, config: CPUConfig, matrix: sp.csr_matrix,
            dense: Sequence[np.ndarray]) -> np.ndarray:
        """Run `config` once on the caller's data and return the result.

        SpMM: `dense` = [B] (cols x N), returns C (rows x N). SDDMM: `dense` =
        [X (rows x N), Y (cols x N)], returns the values at A's nonzeros in CSR
        order. Raises ShapeError for operands that do not fit `matrix`,
        MatrixFormatError for NaN/inf in them, InvalidConfigError for a config
        outside the space.
        """
        op = get_op(op)
        matrix = as_csr(matrix)
        dense = [np.asarray(d) for d in dense]
        if not dense or dense[0].ndim != 2:
            raise ShapeError(f"{op.name}: expected {len(op.dense_shapes(1, 1, 1))} 2-D dense operand(s), "
                             f"got shapes {[d.shape for d in dense]}")
        feat = int(dense[0].shape[1])
        op.check_dense_inputs(matrix, dense, feat)
        for n, d in enumerate(dense):
            if not np.all(np.isfinite(d)):
                raise MatrixFormatError(f"{op.name}: dense operand {n} holds non-finite values (NaN or inf)")
        CPUSpace(op).check(config)
        dense = [np.ascontiguousarray(d, dtype=np.float32) for d in dense]
        return _Run(self, op, matrix, feat, dense).output(config)

    def measure(self, op: str | Op, matrix: sp.csr_matrix, configs: Sequence[Config], feat: int, *,
                check: bool = False, seed: int = 0) -> list[MeasureResult]:
        op, matrix, feat, dense = measure_inputs(op, matrix, feat, seed)
        space = CPUSpace(op)
        run = _Run(self, op, matrix, feat, dense)
        results = []
        for config in configs:
            try:
                space.check(config)
                results.append(run.measure(config, check))
            except InvalidConfigError as exc:
                results.append(MeasureResult(config, None, error=f"invalid config: {exc}"))
            except Exception as exc:  # a per-config failure is a result, never an abort
                log.debug("config %s failed", config, exc_info=True)
                results.append(MeasureResult(config, None, error=f"{type(exc).__name__}: {exc}"))
        return results


class KernelOperands:
    """The CPU kernels' operands of one matrix in one measure call, each built once and shared by the
    configs: the sparse formats per panel layout and the dense operands per padded width.

    It holds no device and no session (the caller passes them to `call_args`), so a remote session is
    closed as soon as its run is dropped.
    """

    def __init__(self, op: Op, matrix: sp.csr_matrix, feat: int, dense: list[np.ndarray], dtype: str = "float32"):
        self.op, self.matrix, self.feat, self.dense, self.dtype = op, matrix, feat, dense, dtype
        self._stored: list[np.ndarray] | None = None
        self._sparse: dict[tuple, object] = {}
        self._padded: dict[tuple[int, int], list[np.ndarray]] = {}  # by (width, paired lanes)

    def call_args(self, config: CPUConfig, *, on_device, device) -> list:
        """The kernel's arguments for `config` where the kernels run (`on_device`: a numpy array -> a TVM
        tensor there), a fresh (NaN) output on `device` last."""
        import tvm

        from ..kernels.cpu_operands import kernel_arguments, pad_dense, paired_lanes, prepare_sparse

        key = (config.single_panel, config.panel_width(self.matrix.shape[1]), config.block_rows)
        if key not in self._sparse:
            self._sparse[key] = prepare_sparse(self.op, self.matrix, config)
        width, pair = config.padded_width(self.feat), paired_lanes(self.op, config, self.feat, self.dtype)
        layout = (width, pair)
        if layout not in self._padded:
            self._padded[layout] = [pad_dense(d, width, self.dtype, pair) for d in self.dense]
        args = kernel_arguments(self.op, self.matrix, config, self.feat, self._padded[layout], self._sparse[key],
                                dtype=self.dtype)
        call_args = [a if isinstance(a, int) else on_device(a) for a in args[:-1]]
        call_args.append(tvm.runtime.tensor(args[-1], device))
        return call_args

    def stored_dense(self) -> list[np.ndarray]:
        """The dense operands as the kernels multiply them (rounded once when stored in bfloat16): what the
        output check compares against."""
        if self._stored is None:
            from ..kernels.cpu_operands import dense_numpy_dtype

            element = dense_numpy_dtype(self.dtype)
            self._stored = self.dense if self.dtype == "float32" else [
                d.astype(element).astype(np.float32) for d in self.dense]
        return self._stored

    def first_run(self, config: CPUConfig, call_args: list, first_s: float, *, check: bool, timeout_s: float,
                  extra: dict) -> tuple[bool | None, MeasureResult | None]:
        """What the first run (`first_s` seconds, its output in `call_args`' last) says: whether the output
        matches scipy (with `check`, else None), and a failed result when it took over `timeout_s`."""
        from ..kernels.cpu_operands import unpad_output

        correct = None
        if check:
            output = unpad_output(self.op, call_args[-1].numpy(), self.feat)
            correct = check_output(self.op, self.matrix, self.stored_dense(), output)
        if first_s > timeout_s:
            return correct, MeasureResult(config, None, correct=correct, extra=extra,
                                          error=f"timeout: one call took {first_s:.2f} s > {timeout_s} s")
        return correct, None


def timing_plan(first_s: float, *, timeout_s: float, repeats: int, min_seconds: float,
                warmup: int = 0) -> tuple[int, int, float]:
    """(budget, repeats, min_seconds) of the timed runs after a first run of `first_s` seconds: the runs
    that fit in `timeout_s` (`budget`), at most `repeats` of them after `warmup`, each at least
    `min_seconds` long but not so long that they overrun the timeout."""
    budget = max(1, int(timeout_s / max(first_s, 1e-9)))
    repeats = max(1, min(repeats, budget - warmup))
    return budget, repeats, min(min_seconds, timeout_s / (repeats + 1))


class _Run:
    """One measure() call: shares format conversions and device arrays between configs."""

    def __init__(self, backend: LLVMBackend, op: Op, matrix: sp.csr_matrix, feat: int,
                 dense: list[np.ndarray]):
        self.backend, self.op, self.feat = backend, op, feat
        self._device: dict[int, tuple] = {}  # id(numpy input) -> (array kept alive, device copy)
        self.operands = KernelOperands(op, matrix, feat, dense, backend.dtype)

    def _on_device(self, array: np.ndarray):
        """Inputs are copied to TVM once per measure() call and shared by the configs."""
        import tvm

        if id(array) not in self._device:
            self._device[id(array)] = (array, tvm.runtime.tensor(array, tvm.cpu()))
        return self._device[id(array)][1]

    def prepare(self, config: CPUConfig):
        """(call, call_args): the compiled kernel bound to this run's inputs and a fresh output."""
        import tvm

        func = self.backend.kernel(self.op, config, self.feat)["main"]
        call_args = self.operands.call_args(config, on_device=self._on_device, device=tvm.cpu())

        def call():
            func(*call_args)

        return call, call_args

    def output(self, config: CPUConfig) -> np.ndarray:
        """Run `config` once and return its (unpadded) output."""
        from ..kernels.cpu_operands import unpad_output

        call, call_args = self.prepare(config)
        call()
        return unpad_output(self.op, call_args[-1].numpy(), self.feat)

    def measure(self, config: CPUConfig, check: bool) -> MeasureResult:
        backend = self.backend
        start = time.perf_counter()
        call, call_args = self.prepare(config)
        build_s = time.perf_counter() - start

        start = time.perf_counter()
        call()
        first_s = time.perf_counter() - start
        extra = {"build_s": round(build_s, 4)}
        correct, failed = self.operands.first_run(config, call_args, first_s, check=check,
                                                  timeout_s=backend.timeout_s, extra=extra)
        if failed is not None:
            return failed
        budget, repeats, min_seconds = timing_plan(first_s, timeout_s=backend.timeout_s, repeats=backend.repeats,
                                                   min_seconds=backend.min_seconds, warmup=backend.warmup)
        clock = time.thread_time if backend.clock == "thread" else time.perf_counter
        time_ms = median_time_ms(call, warmup=min(backend.warmup, budget), repeats=repeats,
                                 min_seconds=min_seconds, clock=clock)
        return MeasureResult(config, time_ms, correct=correct, extra=extra)
