"""cuSPARSE, the CUDA target's vendor baseline, through `torch.sparse`; and `launched_kernels`, what one
library call launches."""
from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp

from ...errors import DeviceUnavailableError
from ...ops import Op, get_op
from ..base import VendorLibrary
from .timing import Event, event_factory, outputs_match, time_launches


def csr_tensor(matrix: sp.csr_matrix, device):
    """`matrix` as a torch CSR tensor with int32 indices (what our kernels get too) on `device`."""
    import torch

    return torch.sparse_csr_tensor(torch.from_numpy(np.ascontiguousarray(matrix.indptr, dtype=np.int32)),
                                   torch.from_numpy(np.ascontiguousarray(matrix.indices, dtype=np.int32)),
                                   torch.from_numpy(np.ascontiguousarray(matrix.data, dtype=np.float32)),
                                   size=matrix.shape, device=device)


class CuSparseLibrary(VendorLibrary):
    """cuSPARSE SpMM / SDDMM through torch.sparse (needs a CUDA build of torch and a GPU).

    Both get the matrix as an int32 CSR tensor, like our kernels. SDDMM times
    `sampled_addmm` alone ((X @ Y^T) at A's nonzeros); the product with A's
    values is applied on the host after timing, for the check only. Timing is
    `time_launches`, the function that times our kernels: `number` back-to-back
    calls between two CUDA events per sample (raised until a sample lasts
    `min_sample_ms`), median of `repeat` samples, and with `check` the output of
    every timed sample is compared with scipy's result.
    """

    name = "cusparse"

    def __init__(self, *, device_id: int = 0, number: int = 10, repeat: int = 5, min_sample_ms: float = 1.0):
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be >= 1, got number={number}, repeat={repeat}")
        self.device_id, self.number, self.repeat = int(device_id), int(number), int(repeat)
        self.min_sample_ms = float(min_sample_ms)

    def method(self, op: Op | str) -> str:
        return {"spmm": "torch.sparse.mm (cusparseSpMM), int32 CSR",
                "sddmm": "torch.sparse.sampled_addmm beta=0 (cusparseSDDMM), int32 CSR; "
                         "A's values applied outside the timing"}[get_op(op).name]

    def _device(self):
        import torch

        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"cuSPARSE baseline needs a GPU and a CUDA build of torch; this torch "
                f"{torch.__version__} has CUDA {torch.version.cuda} and sees no GPU")
        return torch.device("cuda", self.device_id)

    def launcher(self, op: str | Op, matrix: sp.csr_matrix, dense: list[np.ndarray], device=None
                 ) -> tuple[Callable[[], object], Callable[[object], np.ndarray]]:
        """(launch, finish): `launch()` runs the library call once and returns its raw output,
        `finish(raw)` turns that into our op's result (C, or SDDMM values in A's order) on the host.

        `device` defaults to this library's GPU; a CPU device runs the same calls
        through torch's CPU kernels (used by the tests on machines without a GPU).
        """
        import torch

        op = get_op(op)
        device = self._device() if device is None else torch.device(device)
        a = csr_tensor(matrix, device)
        tensors = [torch.from_numpy(np.ascontiguousarray(d, dtype=np.float32)).to(device) for d in dense]
        if op.name == "spmm":
            b = tensors[0]
            return (lambda: torch.sparse.mm(a, b)), (lambda raw: raw.cpu().numpy())
        x, y_t = tensors[0], tensors[1].t()
        values = np.asarray(matrix.data, dtype=np.float32)

        def finish(raw) -> np.ndarray:
            return raw.values().cpu().numpy() * values  # A's values: host side, untimed
        return (lambda: torch.sparse.sampled_addmm(a, x, y_t, beta=0.0)), finish

    def run(self, op: str | Op, matrix: sp.csr_matrix, dense: list[np.ndarray]) -> np.ndarray:
        """cuSPARSE's result (C, or SDDMM values in A's order) as numpy, for checking."""
        launch, finish = self.launcher(op, matrix, dense)
        return finish(launch())

    def measure(self, op: str | Op, matrix: sp.csr_matrix, feat: int, *, seed: int = 0, check: bool = True,
                device=None, make_event: Callable[[], Event] | None = None) -> dict:
        """Time (and check every timed sample of) cuSPARSE on `matrix`; a dict with time_ms,
        samples_ms, launches, method, correct (None unchecked) and wrong_runs.

        `device` and `make_event` default to this library's GPU and CUDA events
        (the tests pass a CPU device and host-clock events)."""
        import torch

        op = get_op(op)
        dense = op.make_dense_inputs(matrix, feat, seed=seed)
        launch, finish = self.launcher(op, matrix, dense, device=device)
        last: list = [None]

        def call():
            last[0] = launch()

        expected = op.reference(matrix, *dense) if check else None
        call()  # warm-up: cuSPARSE handles, workspace, descriptors
        if device is None or torch.device(device).type == "cuda":
            torch.cuda.synchronize(self.device_id if device is None else torch.device(device))
        warm_ok = outputs_match(expected, finish(last[0])) if check else None
        timing = time_launches(call, make_event=make_event or event_factory(self.device_id), number=self.number,
                               repeat=self.repeat, min_sample_ms=self.min_sample_ms,
                               after=(lambda: outputs_match(expected, finish(last[0]))) if check else None)
        out = {"time_ms": timing.median_ms, "samples_ms": timing.samples_ms, "launches": timing.number,
               "method": self.method(op), "correct": None}
        if check:
            out["correct"] = bool(warm_ok and all(timing.checks))
            out["wrong_runs"] = (["warm-up"] if not warm_ok else []) + [
                f"timed sample {n}" for n, ok in enumerate(timing.checks) if not ok]
        return out

    def time_ms(self, op: str | Op, matrix: sp.csr_matrix, feat: int, *, seed: int = 0) -> float:
        return float(self.measure(op, matrix, feat, seed=seed, check=False)["time_ms"])


def launched_kernels(fn: Callable[[], object]) -> list[str] | str:
    """Names of the GPU kernels one call of `fn` launches (torch profiler), or why they are unknown.

    Recorded next to the vendor's times, so a reader sees exactly what a cuSPARSE
    call costs (e.g. whether torch adds a copy or a memset to it).
    """
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = set()
        for event in prof.key_averages():
            device_time = getattr(event, "self_device_time_total", None)
            if device_time is None:
                device_time = getattr(event, "self_cuda_time_total", 0)
            if device_time and device_time > 0:
                names.add(event.key)
        return sorted(names)
    except Exception as err:  # noqa: BLE001 - informational only
        return f"unknown ({type(err).__name__}: {err})"
