"""Vendor reference points on the CPU: Intel MKL (through sparse_dot_mkl) and scipy.

- SpMM: MKL's ``mkl_sparse_s_mm`` via ``sparse_dot_mkl.dot_product_mkl`` (float32,
  C-ordered dense operand and output), by default allocating its output on every
  call; with ``MKLLibrary(preallocated=True)`` it writes into one output array
  made before timing (``out=C, out_scalar=0.0``: without ``out_scalar=0.0`` MKL
  adds to what C holds, and every call after the first is wrong), as a kernel
  that writes into a given output does. scipy's ``csr_matrix @ ndarray``.
- SDDMM: neither MKL's sparse BLAS nor scipy has an SDDMM routine. Both
  libraries here time the same stand-in, named for what it is: a numpy
  gather-dot over row blocks (gather the X and Y rows of each nonzero, multiply
  and sum along the dense axis, scale by A's values), i.e. what a user without
  a sparse compiler would write. :meth:`VendorLibrary.method` says which
  routine a library uses for an op.

Timing in the process that has run TVM kernels is unreliable: TVM's thread
pool and MKL's OpenMP threads compete for the cores, which was measured here to
make MKL's SpMM up to tens of times slower than in a clean process. With
``isolated=True`` a library times itself in a fresh (spawned) worker process
that never loads TVM; `LLVMBackend.vendor()` returns isolated libraries.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from abc import abstractmethod
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, ClassVar

import numpy as np
import scipy.sparse as sp

from ..errors import UnknownKindError
from ..ops import Op, get_op
from .base import VendorLibrary, check_output, median_time_ms

log = logging.getLogger(__name__)

# Nonzeros per block of the gather-dot SDDMM: bounds the gathered temporaries.
SDDMM_BLOCK = 1 << 16
MIN_SECONDS = 0.05  # each timed sample lasts at least this long
SDDMM_METHOD = "numpy gather-dot (neither MKL nor scipy has an SDDMM)"


def sddmm_gather_dot(matrix: sp.csr_matrix, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """SDDMM in numpy: out[n] = A.data[n] * <X[row n], Y[col n]>, blocked over nonzeros."""
    rows = np.repeat(np.arange(matrix.shape[0], dtype=np.int32), np.diff(matrix.indptr))
    out = np.empty(matrix.nnz, dtype=np.float32)
    for start in range(0, matrix.nnz, SDDMM_BLOCK):
        stop = min(matrix.nnz, start + SDDMM_BLOCK)
        gathered = x[rows[start:stop]] * y[matrix.indices[start:stop]]
        out[start:stop] = matrix.data[start:stop] * gathered.sum(axis=1)
    return out


class _CPULibrary(VendorLibrary):
    methods: ClassVar[dict[str, str]]
    isolated: bool = False

    def method(self, op: str | Op) -> str:
        """The routine this library times for `op`."""
        return self.methods[get_op(op).name]

    def run(self, op: str | Op, matrix: sp.csr_matrix, dense: list[np.ndarray]) -> np.ndarray:
        """One call of `op` (also used to check the results against the reference)."""
        op = get_op(op)
        if op.name == "spmm":
            return self._spmm(matrix, dense[0])
        if op.name == "sddmm":
            return sddmm_gather_dot(matrix, dense[0], dense[1])
        raise UnknownKindError("op", op.name, list(self.methods))

    def timed_call(self, op: Op, matrix: sp.csr_matrix, dense: list[np.ndarray]) -> Callable[[], np.ndarray]:
        """The call that `time_ms` times (and `check` checks): one run of `op` on these operands; made
        once before timing, so what it sets up (an output array) is not timed."""
        return lambda: self.run(op, matrix, dense)

    def time_ms(self, op: str | Op, matrix: sp.csr_matrix, feat: int, *, seed: int = 0) -> float:
        op = get_op(op)
        if self.isolated:
            return self._in_worker(_time_in_worker, op.name, matrix, int(feat), seed)
        dense = op.make_dense_inputs(matrix, feat, seed=seed)
        return median_time_ms(self.timed_call(op, matrix, dense), min_seconds=MIN_SECONDS)

    def check(self, op: str | Op, matrix: sp.csr_matrix, feat: int, *, seed: int = 0) -> bool:
        """Whether the timed call's output matches scipy's (`backends.base.check_output`), after the
        call ran twice on the same operands (so an output that accumulates across calls fails)."""
        op = get_op(op)
        if self.isolated:
            return self._in_worker(_check_in_worker, op.name, matrix, int(feat), seed)
        dense = op.make_dense_inputs(matrix, feat, seed=seed)
        call = self.timed_call(op, matrix, dense)
        call()
        return check_output(op, matrix, dense, np.asarray(call()))

    def _in_worker(self, function, *args):
        """`function(this library, not isolated, *args)` in a fresh spawned worker process."""
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            return pool.submit(function, self.isolated_copy(False), *args).result()

    def isolated_copy(self, isolated: bool = True) -> "_CPULibrary":
        """The same library, timing in a worker process (or not)."""
        clone = type(self).__new__(type(self))
        clone.__setstate__({**self.__getstate__(), "isolated": isolated})
        return clone

    def __getstate__(self):
        return {"isolated": self.isolated}

    def __setstate__(self, state):
        self.isolated = state["isolated"]

    @abstractmethod
    def _spmm(self, matrix: sp.csr_matrix, b: np.ndarray) -> np.ndarray:
        """C = A @ B with this library."""


def _time_in_worker(library: _CPULibrary, op: str, matrix: sp.csr_matrix, feat: int, seed: int) -> float:
    return library.time_ms(op, matrix, feat, seed=seed)


def _check_in_worker(library: _CPULibrary, op: str, matrix: sp.csr_matrix, feat: int, seed: int) -> bool:
    return library.check(op, matrix, feat, seed=seed)


class ScipyLibrary(_CPULibrary):
    """scipy's CSR SpMM; the numpy gather-dot for SDDMM.

    Parameters
    ----------
    isolated
        Time in a fresh worker process (see the module docstring).
    """

    name = "scipy"
    methods = {"spmm": "scipy csr_matrix @ ndarray", "sddmm": SDDMM_METHOD}

    def __init__(self, *, isolated: bool = False):
        self.isolated = bool(isolated)

    def _spmm(self, matrix: sp.csr_matrix, b: np.ndarray) -> np.ndarray:
        return matrix @ b


def _import_sparse_dot_mkl():
    """Import sparse_dot_mkl, pointing it at the mkl wheel's runtime when MKL_RT is unset."""
    if "MKL_RT" not in os.environ:
        candidate = os.path.join(sys.prefix, "lib", "libmkl_rt.so.3")
        if os.path.exists(candidate):
            os.environ["MKL_RT"] = candidate
    import sparse_dot_mkl

    return sparse_dot_mkl


def mkl_available() -> bool:
    """True when sparse_dot_mkl imports and finds MKL's runtime."""
    try:
        _import_sparse_dot_mkl()
    except (ImportError, OSError) as exc:
        log.info("MKL is not available: %s", exc)
        return False
    return True


class MKLLibrary(_CPULibrary):
    """Intel MKL's sparse BLAS SpMM (float32); the numpy gather-dot for SDDMM, which MKL lacks.

    Parameters
    ----------
    num_threads
        MKL threads (``mkl_set_num_threads``, a process-wide setting applied
        when this object is made); None leaves MKL's default.
    isolated
        Time in a fresh worker process (see the module docstring).
    preallocated
        SpMM writes into an output array made once before timing
        (``dot_product_mkl(A, B, out=C, out_scalar=0.0)``) instead of allocating
        one per call; `run` still returns a new array.
    """

    name = "mkl"
    methods = {"spmm": "mkl_sparse_s_mm (sparse_dot_mkl.dot_product_mkl)",
               "sddmm": SDDMM_METHOD}
    PREALLOCATED_SPMM = "mkl_sparse_s_mm (sparse_dot_mkl.dot_product_mkl, out=C, out_scalar=0.0: preallocated output)"

    def __init__(self, *, num_threads: int | None = None, isolated: bool = False, preallocated: bool = False):
        self.num_threads = num_threads
        self.isolated = bool(isolated)
        self.preallocated = bool(preallocated)
        self._setup()

    def method(self, op: str | Op) -> str:
        if self.preallocated and get_op(op).name == "spmm":
            return self.PREALLOCATED_SPMM
        return super().method(op)

    def _setup(self) -> None:
        self._mkl = _import_sparse_dot_mkl()
        if self.num_threads is not None:
            self._mkl.mkl_set_num_threads(int(self.num_threads))

    def _spmm(self, matrix: sp.csr_matrix, b: np.ndarray) -> np.ndarray:
        if self.preallocated:
            return self.spmm_into(matrix, b, self.spmm_output(matrix, b))
        return self._mkl.dot_product_mkl(matrix, b)

    @staticmethod
    def spmm_output(matrix: sp.csr_matrix, b: np.ndarray) -> np.ndarray:
        """An (uninitialized) output array for `spmm_into`: rows x N, C-ordered, the product's dtype."""
        return np.empty((matrix.shape[0], b.shape[1]), dtype=np.result_type(matrix.dtype, b.dtype))

    def spmm_into(self, matrix: sp.csr_matrix, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        """C = A @ B written into `out` (`spmm_output`), whatever it held (NaN included): ``out_scalar=0.0``
        is MKL's beta = 0, which overwrites C; without it MKL adds A @ B to C. Returns `out`."""
        return self._mkl.dot_product_mkl(matrix, b, out=out, out_scalar=0.0)

    def timed_call(self, op: Op, matrix: sp.csr_matrix, dense: list[np.ndarray]) -> Callable[[], np.ndarray]:
        if self.preallocated and op.name == "spmm":
            b = dense[0]
            out = self.spmm_output(matrix, b)
            return lambda: self.spmm_into(matrix, b, out)
        return super().timed_call(op, matrix, dense)

    def __getstate__(self):
        return {"num_threads": self.num_threads, "isolated": self.isolated, "preallocated": self.preallocated}

    def __setstate__(self, state):
        self.num_threads, self.isolated = state["num_threads"], state["isolated"]
        self.preallocated = bool(state.get("preallocated", False))
        self._setup()
