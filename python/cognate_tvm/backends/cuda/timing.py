"""Timing CUDA launches: the same code for our kernels and for cuSPARSE (`time_launches`), the events it
records (torch's, else the CUDA runtime's through `runtime.CudartEvent`), and the output comparison."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from ..base import CHECK_ATOL, CHECK_RTOL
from .runtime import CudartEvent

MAX_LAUNCHES = 10_000  # cap of back-to-back launches in one timed sample


class Event(Protocol):
    """A CUDA event as torch.cuda.Event exposes it."""

    def record(self) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_time(self, end: "Event") -> float: ...


@dataclass
class Timing:
    """What `time_launches` measured: per-launch ms of each sample, and the output checks."""

    samples_ms: list[float]
    number: int
    checks: list[bool] = field(default_factory=list)  # one per timed sample, when checked

    @property
    def median_ms(self) -> float:
        return float(np.median(self.samples_ms))


def time_launches(launch: Callable[[], object], *, make_event: Callable[[], Event], number: int,
                  repeat: int, min_sample_ms: float = 0.0, before: Callable[[], None] | None = None,
                  after: Callable[[], bool] | None = None) -> Timing:
    """Time `launch` as `repeat` samples of `number` back-to-back launches between two events.

    `before()` runs ahead of each sample, outside the events (e.g. a NaN fill of
    the output); `after()` runs once each sample has finished and returns whether
    its output is right. With `min_sample_ms`, `number` is first raised (up to
    MAX_LAUNCHES) until one sample lasts that long, so short kernels are not
    dominated by event resolution. Returns per-launch times in ms.
    """
    if number < 1 or repeat < 1:
        raise ValueError(f"number and repeat must be >= 1, got number={number}, repeat={repeat}")

    def sample(n: int) -> float:
        start, end = make_event(), make_event()
        start.record()
        for _ in range(n):
            launch()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))

    if min_sample_ms > 0:
        while number < MAX_LAUNCHES:
            total = sample(number)
            if total >= min_sample_ms:
                break
            grow = min_sample_ms / total if total > 0 else 10.0
            number = min(MAX_LAUNCHES, max(number + 1, int(number * min(grow * 1.2, 10.0))))
    timing = Timing([], number)
    for _ in range(repeat):
        if before is not None:
            before()
        timing.samples_ms.append(sample(number) / number)
        if after is not None:
            timing.checks.append(bool(after()))
    return timing


def event_factory(device_id: int = 0) -> Callable[[], Event]:
    """torch.cuda.Event when torch has CUDA (its default stream is the legacy one TVM launches on),
    else `CudartEvent`."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.set_device(device_id)
            return lambda: torch.cuda.Event(enable_timing=True)
    except ImportError:
        pass
    return CudartEvent


def outputs_match(expected: np.ndarray, output: np.ndarray) -> bool:
    """`output` equals `expected` within the float32 tolerance of `base.check_output`; NaN never matches."""
    if output.shape != expected.shape:
        return False
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    return bool(np.allclose(output, expected, rtol=CHECK_RTOL, atol=CHECK_ATOL * scale))
