"""Running one tuned kernel on torch tensors, per device kind.

A `Platform` is what differs between devices: the backend that tunes (and
builds) kernels, the name of its target, and the `Runner` that calls a chosen
config's compiled kernel. A runner converts the sparsity pattern into the
config's layout once (column panels, ELL buckets) and keeps it on the device;
each call then only gathers the values into that layout when the layout
reorders them, and passes the torch tensors to the TVM function through DLPack
(no copies of the dense operands or of the output). Dense operands are padded
(copied) only when the config's tile does not divide the dense width.

Runners take float32, contiguous tensors on their device (checked by the
caller, :mod:`cognate_tvm.torch.sparse_matrix`); `values` are in the CSR order
of the pattern.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from ..backends.base import Backend
from ..errors import DeviceUnavailableError
from ..kernels.cpu_operands import pack_arguments, paired_lanes, panel_permutation, prepare_sparse
from ..ops import get_op
from ..space import create as create_space
from ..space.base import Config, Space

log = logging.getLogger(__name__)


class GatherCache:
    """`values[index]`, remembered while `values` holds the same memory at the same version.

    Constant values (a GCN's normalised adjacency) are then put into a layout
    once, not on every call; values that change (attention scores, or values
    written in place) are gathered again. Writes through ``values.data`` bypass
    torch's version counter and are not seen: write to ``values`` itself. The remembered source is kept alive,
    so its memory cannot be reused by another tensor meanwhile. With grad
    enabled and values that require it, the gather is done (differentiably)
    every time.
    """

    def __init__(self):
        self._source: torch.Tensor | None = None
        self._key: tuple | None = None
        self._out: torch.Tensor | None = None

    def __call__(self, values: torch.Tensor, index: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """values[index], zero where `mask` (when given) is False."""
        if torch.is_grad_enabled() and values.requires_grad:
            return _gather(values, index, mask)
        key = (values.data_ptr(), values._version, tuple(values.shape), index.data_ptr())
        if key != self._key:
            self._out, self._source, self._key = _gather(values, index, mask), values, key
        return self._out


def _gather(values: torch.Tensor, index: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    out = values[index]
    return out if mask is None else torch.where(mask, out, 0.0)


class Runner(ABC):
    """One compiled kernel of one (op, config, dense width) bound to one sparsity pattern."""

    def __init__(self, op: str, matrix: sp.csr_matrix, config: Config, feat: int, device: torch.device):
        self.op, self.config, self.feat, self.device = get_op(op).name, config, int(feat), device
        self.shape, self.nnz = tuple(matrix.shape), int(matrix.nnz)

    @abstractmethod
    def __call__(self, values: torch.Tensor, *dense: torch.Tensor) -> torch.Tensor:
        """SpMM: `dense` = (B,), returns C [rows, feat]; SDDMM: (X, Y), returns [nnz] in CSR order."""

    def _index(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device)


def pair_columns(tensor: torch.Tensor, lanes: int) -> torch.Tensor:
    """The torch form of cognate_tvm.kernels.cpu_operands.pair_columns: bfloat16 [rows, width] as int32
    words [rows, width / 2], word g * P + p holding columns g * 2P + p (low) and g * 2P + P + p (high)."""
    rows, width = tensor.shape
    groups = tensor.reshape(rows, width // (2 * lanes), 2, lanes).transpose(2, 3).contiguous()
    return groups.view(torch.int32).reshape(rows, width // 2)


def pad_columns(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """`tensor` itself when it has `width` columns, else a copy with zero columns appended."""
    if tensor.shape[1] == width:
        return tensor
    return torch.nn.functional.pad(tensor, (0, width - tensor.shape[1]))


class CPURunner(Runner):
    """A TVM-built CPU kernel (:mod:`cognate_tvm.kernels.cpu`; its arguments: :mod:`cognate_tvm.kernels.cpu_operands`)."""

    def __init__(self, op: str, matrix: sp.csr_matrix, config, feat: int, module, device: torch.device,
                 dtype: str = "float32"):
        super().__init__(op, matrix, config, feat, device)
        sparse = prepare_sparse(op, matrix, config)
        self.func = module["main"]
        self.npanels = sparse.npanels
        self.indptr, self.indices = self._index(sparse.indptr), self._index(sparse.indices)
        # Column panels and register blocks reorder the nonzeros (blocks also add zero fill); the SDDMM
        # kernel scatters back through `perm`.
        self.order, self.fill = None, None
        if sparse.block_pos is not None:
            pos = sparse.block_pos
            self.order, self.fill = self._index(np.maximum(pos, 0)), self._index(pos >= 0)
        elif not config.single_panel:
            self.order = self._index(
                panel_permutation(matrix, config.panel_width(matrix.shape[1])).astype(np.int64))
        self.perm = None if sparse.perm is None else self._index(sparse.perm)
        self.width = config.padded_width(feat)
        self.dense_dtype = getattr(torch, dtype)
        self.pair = paired_lanes(op, config, feat, dtype)
        self._gather = GatherCache()

    def __call__(self, values, *dense):
        vals = values if self.order is None else self._gather(values, self.order, self.fill)
        sddmm = self.op == "sddmm"
        out = torch.empty((self.nnz,) if sddmm else (self.shape[0], self.width), dtype=torch.float32)
        self.func(*pack_arguments(self.shape, self.npanels, self.indptr, self.indices, vals, self.perm,
                                  [self._dense(d) for d in dense], out))
        return out if sddmm or self.width == self.feat else out[:, :self.feat].contiguous()

    def _dense(self, tensor: torch.Tensor) -> torch.Tensor:
        """A dense operand in the kernel's layout: its element type, padded, and paired where the kernel
        reads pairs."""
        padded = pad_columns(tensor.to(self.dense_dtype), self.width)
        return pair_columns(padded, self.pair) if self.pair else padded


# The value arrays of each CUDA layout, and the array of the same layout's SDDMM form that says
# which CSR position each of their slots holds (-1: ELL padding).
CUDA_VALUE_SLOTS = {"data": "pos", "ell_vals": "ell_pos"}


def cuda_value_slots(op: str, matrix: sp.csr_matrix, config) -> list[tuple[int, np.ndarray]]:
    """[(n, index)]: argument array n of `config`'s CUDA kernel holds values[index] (0 where index < 0).

    The layout (column panels, ELL buckets) is the same for SpMM and SDDMM; the
    SDDMM form of it carries every slot's CSR position, which is read from there.
    """
    from ..kernels import cuda_prep

    names = cuda_prep.prepare_sparse(op, matrix, config).names
    where = cuda_prep.prepare_sparse("sddmm", matrix, config)
    positions = dict(zip(where.names, where.arrays))
    return [(n, positions[CUDA_VALUE_SLOTS[name]].astype(np.int64)) for n, name in enumerate(names)
            if name in CUDA_VALUE_SLOTS]


class CUDARunner(Runner):
    """A TVM-built CUDA kernel variant (:mod:`cognate_tvm.kernels.cuda`), launched on torch's stream."""

    def __init__(self, op: str, matrix: sp.csr_matrix, config, feat: int, lib, device: torch.device):
        from ..kernels import cuda as kcuda
        from ..kernels import cuda_prep

        super().__init__(op, matrix, config, feat, device)
        self._prep = cuda_prep
        sparse = cuda_prep.prepare_sparse(op, matrix, config)
        self.sparse = dataclasses.replace(sparse, arrays=tuple(self._index(a) for a in sparse.arrays))
        self.slots = [(n, self._index(np.maximum(index, 0)), None if index.min() >= 0 else self._index(index >= 0),
                       GatherCache()) for n, index in cuda_value_slots(op, matrix, config)]
        self.nvec = cuda_prep.vector_count(feat, config.vec)
        self.width = self.nvec * config.vec
        self.func = lib[kcuda.kernel_key(op, config).name]

    def __call__(self, values, *dense):
        import tvm_ffi

        arrays = list(self.sparse.arrays)
        for n, index, real, gather in self.slots:
            arrays[n] = gather(values, index, real)
        sparse = dataclasses.replace(self.sparse, arrays=tuple(arrays))
        padded = [pad_columns(d, self.width) for d in dense]
        shape = (self.shape[0], self.width) if self.op == "spmm" else (max(self.nnz, 1),)
        out = torch.empty(shape, dtype=torch.float32, device=self.device)
        with tvm_ffi.use_torch_stream():
            self.func(*self._prep.kernel_args(sparse, padded, out, self.nvec, self.config.rows_per_block))
        if self.op == "sddmm":
            return out[:self.nnz]
        return out if self.width == self.feat else out[:, :self.feat].contiguous()


class Platform(ABC):
    """A device kind: the backend `tune` measures on, its target name, and its runners."""

    device_type: str

    def __init__(self, device: torch.device):
        self.device = device

    @property
    @abstractmethod
    def backend(self) -> Backend: ...

    @abstractmethod
    def target_name(self) -> str:
        """What the kernels were built for (part of a tuned choice's key)."""

    def space(self, op: str) -> Space:
        return create_space(self.backend.platform, get_op(op).name)

    @abstractmethod
    def runner(self, op: str, matrix: sp.csr_matrix, config: Config, feat: int) -> Runner: ...

    def attention_kernel(self, heads: int, dim: int, value_dim: int):
        """The fused graph-attention kernel for padded head widths (:mod:`cognate_tvm.kernels.cpu_attention`),
        or None where the platform has none (attention is then composed of SDDMM, softmax and SpMM)."""
        return None


# TVM's pool workers spin after each kernel before they sleep (TVM_THREAD_POOL_SPIN_COUNT). Between
# kernels, a model runs torch's own parallel ops (matmuls, activations), whose threads then share the
# cores with spinning TVM workers: on 2 cores the GCN epoch of benchmarks/gnn_pyg.py (community graph,
# baseline configs) took 1.2-1.45x as long as with workers that sleep at once, in three pairs of runs.
SPIN_COUNT_ENV = "TVM_THREAD_POOL_SPIN_COUNT"


def quiet_thread_pool() -> None:
    """Make TVM's CPU workers sleep as soon as a kernel ends, unless the user set the spin count.

    TVM reads it when its pool starts (the first parallel kernel of the process); later it changes nothing.
    """
    os.environ.setdefault(SPIN_COUNT_ENV, "0")


class CPUPlatform(Platform):
    """CPU kernels built with LLVM for `num_threads` cores (TVM's pool; default torch's thread count)."""

    device_type = "cpu"

    def __init__(self, device: torch.device, *, num_threads: int | None, kernel_dir: Path | None,
                 dtype: str = "float32"):
        from ..backends.cpu import LLVMBackend

        super().__init__(device)
        threads = int(num_threads or torch.get_num_threads())
        quiet_thread_pool()
        self._backend = LLVMBackend(num_threads=threads, cache_dir=kernel_dir, dtype=dtype)

    @property
    def backend(self) -> Backend:
        return self._backend

    def target_name(self) -> str:
        return str(self._backend.llvm_target)

    def attention_kernel(self, heads, dim, value_dim):
        from ..kernels.cpu_attention import build_attention_kernel

        module = build_attention_kernel(heads, dim, value_dim, self._backend.llvm_target,
                                        cache=self._backend.kernel_cache)
        return module["main"]

    def runner(self, op, matrix, config, feat):
        return CPURunner(op, matrix, config, feat, self._backend.kernel(op, config, feat), self.device,
                         self._backend.dtype)


def cuda_arch(device: torch.device) -> str:
    """The kernels' arch for `device`: sm_90 on Hopper and newer, sm_80 on Ampere."""
    major, _ = torch.cuda.get_device_capability(device)
    if major < 8:
        raise DeviceUnavailableError(f"{torch.cuda.get_device_name(device)} (compute capability {major}.x) "
                                     f"is older than the kernels' sm_80")
    return "sm_90" if major >= 9 else "sm_80"


class CUDAPlatform(Platform):
    """CUDA kernels for the GPU `device` (arch from its compute capability unless given)."""

    device_type = "cuda"

    def __init__(self, device: torch.device, *, arch: str | None):
        from ..backends.cuda import CUDABackend, require_gpu

        super().__init__(device)
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(f"device {device} needs a CUDA build of torch and a GPU; this torch "
                                         f"{torch.__version__} sees none")
        index = device.index if device.index is not None else torch.cuda.current_device()
        self.device = torch.device("cuda", index)
        require_gpu(index)
        self.arch = arch or cuda_arch(self.device)
        self._backend = CUDABackend(arch=self.arch, device_id=index)
        self._libs: dict = {}

    @property
    def backend(self) -> Backend:
        return self._backend

    def target_name(self) -> str:
        return f"cuda -arch={self.arch}"

    def runner(self, op, matrix, config, feat):
        from ..kernels import cuda as kcuda

        key = kcuda.kernel_key(op, config)
        if key not in self._libs:
            self._libs[key] = kcuda.build([key], arch=self.arch)
        return CUDARunner(op, matrix, config, feat, self._libs[key], self.device)


def create_platform(device: torch.device, *, num_threads: int | None = None, arch: str | None = None,
                    kernel_dir: Path | None = None, dtype: str = "float32") -> Platform:
    """The platform of `device` ("cpu" or "cuda[:i]"); DeviceUnavailableError for any other."""
    if device.type == "cpu":
        return CPUPlatform(device, num_threads=num_threads, kernel_dir=kernel_dir, dtype=dtype)
    if dtype != "float32":
        raise ValueError(f"dtype {dtype!r}: only the CPU kernels read bfloat16 dense operands")
    if device.type == "cuda":
        return CUDAPlatform(device, arch=arch)
    raise DeviceUnavailableError(f"no kernels for device {device}; valid: cpu, cuda")


__all__ = ["CPUPlatform", "CPURunner", "CUDAPlatform", "CUDARunner", "cuda_value_slots", "GatherCache", "Platform", "Runner",
           "create_platform", "cuda_arch", "pad_columns", "pair_columns"]
