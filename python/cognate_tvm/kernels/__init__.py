"""TensorIR kernels of the sparse ops, one module per target, and a kernel cache."""
from .cache import DEFAULT_CACHE_DIR, KernelCache, kernel_key
from .cpu import build_kernel, cpu_target, host_cpu, kernel_source
from .cpu_operands import prepare_sparse

__all__ = ["DEFAULT_CACHE_DIR", "KernelCache", "kernel_key", "build_kernel", "cpu_target", "host_cpu",
           "kernel_source", "prepare_sparse"]
