"""TensorIR SpMM and SDDMM kernels for every config of the CPU space.

For each (op, config, dense width, target) this module writes the scheduled
loop nest as a TVMScript prim_func — loop order, tiling, parallel row tiles,
vectorized and unrolled dense loops, register accumulators — parses it and
builds it with LLVM. The sparse matrix is not part of the kernel: its
(column-panel) CSR arrays and sizes are runtime arguments, so one compiled
kernel serves every matrix, and :class:`~cognate_tvm.kernels.cache.KernelCache`
keeps it in memory and on disk.

The nest itself is written by :mod:`cognate_tvm.kernels.cpu_nest`.

Kernel arguments and the sparse layouts they hold: :mod:`cognate_tvm.kernels.cpu_operands`.

The dense operands are float32 or, with ``dtype="bfloat16"``, bfloat16: half
the bytes of the operand that memory-bound SpMM and SDDMM stream most, widened
to float32 on load; products accumulate and the output is stored in float32.
Most bfloat16 kernels read the operand as int32 words of two values each and split every word
into two float32 vectors (:func:`~cognate_tvm.kernels.cpu_operands.paired_lanes`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ops import Op, get_op
from ..space.cpu import CPUConfig
from .cache import KernelCache, kernel_key
from .cpu_nest import GENERATOR_VERSION, ScriptWriter, kernel_source
from .cpu_operands import check_dense_dtype

__all__ = ["GENERATOR_VERSION", "KernelSpec", "ScriptWriter", "build_kernel", "cpu_target", "host_cpu",
           "kernel_source"]

def host_cpu() -> str:
    """LLVM's name of this machine's CPU (e.g. 'znver4'), as TVM's LLVM sees it."""
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


def cpu_target(num_threads: int, mcpu: str | None = None):
    """`llvm` target for `num_threads` cores, tuned for `mcpu` (default: this CPU)."""
    from tvm.target import Target

    return Target({"kind": "llvm", "num-cores": int(num_threads), "mcpu": mcpu or host_cpu()})


# -- building and running --------------------------------------------------------------

@dataclass(frozen=True)
class KernelSpec:
    """What a compiled kernel depends on; its `key()` names it in the cache."""

    op: str
    config: CPUConfig
    feat: int
    target: str
    workers: int
    dtype: str = "float32"

    def key(self) -> str:
        import tvm

        return kernel_key({"op": self.op, "config": self.config.to_dict(), "feat": self.feat,
                           "target": self.target, "workers": self.workers, "tvm": tvm.__version__,
                           "generator": GENERATOR_VERSION, "dtype": self.dtype})


def build_kernel(op: str | Op, config: CPUConfig, feat: int, target, *, cache: KernelCache | None = None,
                 dtype: str = "float32"):
    """The compiled module of one kernel (entry point "main"), through `cache` when given."""
    import tvm

    op = get_op(op)
    workers = int(target.attrs.get("num-cores", 1))
    spec = KernelSpec(op.name, config, int(feat), str(target), workers, check_dense_dtype(dtype))

    def build():
        func = tvm.script.from_source(kernel_source(op, config, feat, workers=workers, dtype=dtype))
        return tvm.tirx.build(func, target=target)

    if cache is None:
        return build()
    return cache.get(spec.key(), build)
