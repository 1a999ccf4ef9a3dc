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
from .backend import CUDABackend
from .cusparse import CuSparseLibrary, csr_tensor, launched_kernels
from .runtime import BROKEN_RUNTIME_MESSAGE, NO_GPU_MESSAGE, CudartEvent, require_gpu
from .timing import MAX_LAUNCHES, Event, Timing, event_factory, outputs_match, time_launches

__all__ = ["BROKEN_RUNTIME_MESSAGE", "CUDABackend", "CuSparseLibrary", "CudartEvent", "Event", "MAX_LAUNCHES",
           "NO_GPU_MESSAGE", "Timing", "csr_tensor", "event_factory", "launched_kernels", "outputs_match",
           "require_gpu", "time_launches"]
