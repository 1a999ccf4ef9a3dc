"""The CUDA runtime as this backend reaches it: `CudartEvent` (libcudart through ctypes, for timing when
torch has no CUDA) and `require_gpu` (a GPU TVM can run on, or an error that says why not)."""
from __future__ import annotations

import ctypes

from ...errors import DeviceUnavailableError
from ...kernels import cuda as kcuda

NO_GPU_MESSAGE = ("no CUDA GPU is visible to TVM (tvm.cuda({device}).exist is False; {driver}); run on a "
                  "machine with an NVIDIA GPU, or pass compile_only=True (CLI: --compile-only) to "
                  "build the kernels and compile them to PTX without running them")
BROKEN_RUNTIME_MESSAGE = ("{driver}, but TVM cannot use it: {reason}. TVM's libtvm_runtime_cuda.so needs "
                          "libcuda.so.1 and libcudart.so.13 (a CUDA 13 toolkit, or torch's nvidia wheels)")


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
