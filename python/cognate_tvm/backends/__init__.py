"""Measurement backends, one file per target, and a `create` factory."""
from __future__ import annotations

import importlib

from ..errors import UnknownKindError
from .base import Backend, MeasureResult, VendorLibrary, check_output, median_time_ms

# target name -> "module:Class", imported on first use (TVM, torch only when needed).
_BACKENDS = {
    "llvm": "cognate_tvm.backends.cpu:LLVMBackend",
    "spade": "cognate_tvm.backends.spade:SpadeBackend",
    "cuda": "cognate_tvm.backends.cuda:CUDABackend",
}

TARGETS = tuple(_BACKENDS)


def create(target: str | Backend, **options) -> Backend:
    """The backend of `target` ("llvm", "spade", "cuda"); a Backend passes through."""
    if isinstance(target, Backend):
        return target
    if target not in _BACKENDS:
        raise UnknownKindError("target", target, list(_BACKENDS))
    module, cls = _BACKENDS[target].split(":")
    return getattr(importlib.import_module(module), cls)(**options)


__all__ = ["Backend", "MeasureResult", "VendorLibrary", "TARGETS", "check_output", "create",
           "median_time_ms"]
