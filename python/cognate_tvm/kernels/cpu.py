"""TensorIR SpMM and SDDMM kernels for every config of the CPU space.

For each (op, config, dense width, target) this module writes the scheduled
loop nest as a TVMScript prim_func — loop order, tiling, parallel row tiles,
vectorized and unrolled dense loops, register accumulators — parses it and
builds it with LLVM. The sparse matrix is not part of the kernel: its
(column-panel) CSR arrays and sizes are runtime arguments, so one compiled
kernel serves every matrix, and :class:`~cognate_tvm.kernels.cache.KernelCache`
keeps it in memory and on disk.

The nest itself is written by :mod:`cognate_tvm.kernels.cpu_nest` (balanced row ranges:
:mod:`~cognate_tvm.kernels.cpu_ranges`; streaming output stores: :mod:`~cognate_tvm.kernels.cpu_stream`).

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


# numpy's name of an x86 feature where it is not LLVM's in upper case without '.', '-' and '_'
_NUMPY_FEATURE = {"FMA": "FMA3"}


def missing_features(cpu_features, host_features: dict) -> list[str]:
    """The features of the named CPU (LLVM names) that the host reports absent, sorted.

    `host_features` maps numpy's feature names to whether this machine (CPU and OS) supports them; a
    feature numpy does not name is left as the CPU name implies.
    """
    def numpy_name(feature: str) -> str:
        name = feature.upper().replace(".", "").replace("-", "").replace("_", "")
        return _NUMPY_FEATURE.get(name, name)

    return sorted(f for f in cpu_features if host_features.get(numpy_name(f)) is False)


def _numpy_cpu_features() -> dict | None:
    """numpy's runtime CPU features ({"AVX512F": False, ...}; numpy 2 and numpy 1 layouts), or None."""
    import importlib

    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            return dict(importlib.import_module(module).__cpu_features__)
        except (ImportError, AttributeError):
            continue
    return None


def host_mattr(mcpu: str) -> list[str]:
    """`mattr` entries ("-avx512f", ...) that turn off the features `mcpu` implies but this machine lacks.

    LLVM names the host CPU by its model alone: a virtual machine that hides AVX-512 from a Zen 4 or
    Sapphire Rapids guest is still 'znver4' / 'sapphirerapids', and code built for that name faults
    there with an illegal instruction. TVM does not expose LLVM's host feature query, so the features
    come from numpy's runtime CPU dispatch, which checks both the CPU and the OS's register support.
    """
    from tvm.target import Target, codegen

    host_features = _numpy_cpu_features()
    if host_features is None:  # a numpy that does not say: keep what the CPU name implies
        return []
    implied = codegen.llvm_get_cpu_features(Target({"kind": "llvm", "mcpu": mcpu}))
    return ["-" + f for f in missing_features(implied, host_features)]


def cpu_target(num_threads: int, mcpu: str | None = None):
    """`llvm` target for `num_threads` cores, tuned for `mcpu` (default: this CPU, without the vector
    features that its name implies and this machine lacks; see :func:`host_mattr`)."""
    from tvm.target import Target

    attrs = {"kind": "llvm", "num-cores": int(num_threads), "mcpu": mcpu or host_cpu()}
    if mcpu is None and (mattr := host_mattr(attrs["mcpu"])):
        attrs["mattr"] = mattr
    return Target(attrs)


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
