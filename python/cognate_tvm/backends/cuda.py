"""The `cuda` backend: SparseTIR-style TensorIR kernels on an NVIDIA GPU, cuSPARSE as vendor.

On a machine with a GPU, `measure` builds each config's kernel variant (once;
variants are shared across configs and cached per backend instance), runs it
once as warm-up (and, with `check`, compares the output with scipy), then times
it with TVM's `time_evaluator` and reports the median. Without a GPU it raises
DeviceUnavailableError, unless `compile_only=True`: then every selected config
is built, its CUDA source emitted (to `source_dir` when given) and compiled to
PTX with nvcc when nvcc is present; each result carries `compiled` and, when it
failed, `error`.

The PyPI TVM wheel launches CUDA kernels through `libtvm_runtime_cuda.so`,
which it loads only where `libcuda.so.1` (the driver) and `libcudart.so.13`
(CUDA 13 runtime, e.g. the `nvidia-cuda-runtime` wheel or a CUDA 13 toolkit)
are found; building needs nvcc (TVM compiles the device code at build time
on a GPU machine: through NVRTC, which needs the `cuda-bindings` package, or
through nvcc when the environment sets TVM_CUDA_COMPILE_MODE=nvcc).

Vendor baseline: cuSPARSE through `torch.sparse` with a CUDA build of torch
(`torch.sparse.mm` on a CSR tensor is cusparseSpMM; `torch.sparse.sampled_addmm`
is cusparseSDDMM). torch is already a pinned dependency of the project, its
CUDA wheels exist for the pinned version, and it exposes both operations;
cupy would be a second CUDA-version-matched dependency for the same calls.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import DeviceUnavailableError, InvalidConfigError
from ..kernels import cuda as kcuda
from ..kernels import cuda_prep
from ..ops import Op, get_op
from ..space.base import Config
from ..space.gpu import GPUSpace
from .base import Backend, MeasureResult, VendorLibrary, check_output

logger = logging.getLogger(__name__)

NO_GPU_MESSAGE = ("no CUDA GPU is visible to TVM (tvm.cuda({device}).exist is False); run on a "
                  "machine with an NVIDIA GPU, or pass compile_only=True (CLI: --compile-only) to "
                  "build the kernels and compile them to PTX without running them")


class CUDABackend(Backend):
    """Measures GPUSpace configs with TVM-compiled CUDA kernels.

    Parameters
    ----------
    arch : "sm_80" (A100) or "sm_90" (H100/H200).
    compile_only : build, emit CUDA and compile to PTX instead of running.
    device_id : CUDA device index.
    nvcc : path of nvcc for `compile_only` (default: PATH, then /usr/local/cuda/bin).
    source_dir : where `compile_only` writes kernels_<arch>.cu / .ptx (default: nowhere).
    number, repeat, min_repeat_ms : `time_evaluator` settings; the median of the
        `repeat` samples (each the mean of `number` runs) is reported.
    """

    target = "cuda"
    platform = "gpu"

    def __init__(self, *, arch: str = "sm_80", compile_only: bool = False, device_id: int = 0,
                 nvcc: str | os.PathLike | None = None, source_dir: str | os.PathLike | None = None,
                 number: int = 10, repeat: int = 5, min_repeat_ms: int = 1):
        if arch not in kcuda.ARCHS:
            raise InvalidConfigError(f"arch {arch!r} not supported; valid: {', '.join(kcuda.ARCHS)}")
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be >= 1, got number={number}, repeat={repeat}")
        self.arch = arch
        self.compile_only = bool(compile_only)
        self.device_id = int(device_id)
        self.nvcc = None if nvcc is None else str(nvcc)
        self.source_dir = None if source_dir is None else Path(source_dir)
        self.number, self.repeat, self.min_repeat_ms = int(number), int(repeat), int(min_repeat_ms)
        self._libs: dict[kcuda.KernelKey, object] = {}
        # compile_only: id(module) -> (PTX entry names, nvcc error), so nvcc runs once per module
        self._ptx: dict[int, tuple[set[str], str | None]] = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_libs"], state["_ptx"] = {}, {}  # compiled modules stay with the process that built them
        return state

    def with_timing(self, *, number: int, repeat: int, min_repeat_ms: int = 0) -> "CUDABackend":
        """The same backend with other `time_evaluator` settings, sharing the compiled kernels."""
        other = CUDABackend(arch=self.arch, compile_only=self.compile_only, device_id=self.device_id,
                            nvcc=self.nvcc, source_dir=self.source_dir, number=number, repeat=repeat,
                            min_repeat_ms=min_repeat_ms)
        other._libs, other._ptx = self._libs, self._ptx
        return other

    def metadata(self) -> dict:
        meta = super().metadata()
        meta.update({"arch": self.arch, "compile_only": self.compile_only, "device_id": self.device_id})
        return meta

    def vendor(self) -> "CuSparseLibrary":
        return CuSparseLibrary(device_id=self.device_id)

    # -- building ----------------------------------------------------------------
    def prepare(self, ops: Sequence[str | Op] = ("spmm", "sddmm")) -> dict[str, str]:
        """Build every kernel variant of `ops` now instead of on first use.

        Returns {variant name: error} for the variants that failed to build.
        """
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

        dev = tvm.cuda(self.device_id)
        if not dev.exist:
            raise DeviceUnavailableError(NO_GPU_MESSAGE.format(device=self.device_id))
        if min(matrix.shape) == 0:
            return [MeasureResult(c, None, error=f"matrix of shape {matrix.shape} has nothing to compute")
                    for c in configs]
        keys = self._keys(op, configs)
        libs = self._build({k for k in keys if isinstance(k, kcuda.KernelKey)})
        dense = op.make_dense_inputs(matrix, feat, seed=seed)
        sparse_cache: dict[tuple[int, bool], list] = {}
        dense_cache: dict[int, tuple[list, int]] = {}
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
                result = self._run_one(op, matrix, config, key, lib, dev, dense, feat, check,
                                       sparse_cache, dense_cache)
            except Exception as err:  # noqa: BLE001 - a failing config is a result
                result = MeasureResult(config, None, error=f"{type(err).__name__}: {err}",
                                       extra={"kernel": key.name})
            results.append(result)
        return results

    def _run_one(self, op, matrix, config, key, lib, dev, dense, feat, check, sparse_cache,
                 dense_cache) -> MeasureResult:
        import tvm

        skey = (config.parts, config.bucketing)
        if skey not in sparse_cache:
            sparse = cuda_prep.prepare_sparse(op, matrix, config)
            sparse_cache[skey] = [sparse, [tvm.runtime.tensor(a, dev) for a in sparse.arrays]]
        sparse, sparse_dev = sparse_cache[skey]
        if config.vec not in dense_cache:
            padded, nvec = cuda_prep.pad_dense(dense, config.vec)
            dense_cache[config.vec] = ([tvm.runtime.tensor(d, dev) for d in padded], nvec)
        dense_dev, nvec = dense_cache[config.vec]
        out = tvm.runtime.tensor(cuda_prep.empty_output(sparse, nvec, config.vec), dev)
        args = cuda_prep.kernel_args(sparse, dense_dev, out, nvec, config.rows_per_block)
        args[:len(sparse_dev)] = sparse_dev
        func = lib[key.name]
        func(*args)  # warm-up; its output is the one checked
        dev.sync()
        correct = None
        if check:
            output = cuda_prep.finish_output(op, out.numpy(), matrix, feat)
            correct = check_output(op, matrix, dense, output)
        timer = lib.time_evaluator(key.name, dev, number=self.number, repeat=self.repeat,
                                   min_repeat_ms=self.min_repeat_ms)
        samples = np.asarray(timer(*args).results, dtype=np.float64)
        return MeasureResult(config, float(np.median(samples) * 1e3), correct=correct,
                             extra={"kernel": key.name})

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
        prepared: dict[tuple[int, bool], str | None] = {}
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
            skey = (config.parts, config.bucketing)
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


class CuSparseLibrary(VendorLibrary):
    """cuSPARSE SpMM / SDDMM through torch.sparse (needs a CUDA build of torch and a GPU).

    SDDMM: `sampled_addmm` gives (X @ Y^T) at A's nonzeros (cusparseSDDMM does not
    scale by A's values), then one elementwise product with A's values, timed together.
    """

    name = "cusparse"

    def __init__(self, *, device_id: int = 0, warmup: int = 3, repeat: int = 20):
        self.device_id, self.warmup, self.repeat = int(device_id), int(warmup), int(repeat)

    def _torch(self):
        import torch

        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"cuSPARSE baseline needs a GPU and a CUDA build of torch; this torch "
                f"{torch.__version__} has CUDA {torch.version.cuda} and sees no GPU")
        return torch

    def _prepare(self, op: Op, matrix: sp.csr_matrix, dense: list[np.ndarray]):
        torch = self._torch()
        device = torch.device("cuda", self.device_id)
        a = torch.sparse_csr_tensor(torch.from_numpy(matrix.indptr.astype(np.int64)),
                                    torch.from_numpy(matrix.indices.astype(np.int64)),
                                    torch.from_numpy(matrix.data), size=matrix.shape,
                                    device=device)
        tensors = [torch.from_numpy(d).to(device) for d in dense]
        if op.name == "spmm":
            return torch, (lambda: torch.sparse.mm(a, tensors[0]))
        x, y_t = tensors[0], tensors[1].t()
        values = a.values()

        def sddmm():
            sampled = torch.sparse.sampled_addmm(a, x, y_t, beta=0.0)
            return sampled.values() * values
        return torch, sddmm

    def run(self, op: str | Op, matrix: sp.csr_matrix, dense: list[np.ndarray]) -> np.ndarray:
        """cuSPARSE's result (C, or SDDMM values in A's order) as numpy, for checking."""
        op = get_op(op)
        torch, fn = self._prepare(op, matrix, dense)
        out = fn()
        return (out.to_dense() if out.layout != torch.strided else out).cpu().numpy()

    def time_ms(self, op: str | Op, matrix: sp.csr_matrix, feat: int, *, seed: int = 0) -> float:
        op = get_op(op)
        torch, fn = self._prepare(op, matrix, op.make_dense_inputs(matrix, feat, seed=seed))
        for _ in range(self.warmup):
            fn()
        samples = []
        for _ in range(self.repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        return float(np.median(samples))
