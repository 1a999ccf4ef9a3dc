"""The Backend interface: measure configurations of an op on a matrix.

`measure(op, matrix, configs, feat)` is a pure function of its arguments (plus
the backend's own settings), and backends are picklable, so the same call can
run in a process pool, on a cluster, or behind TVM's RPC runner. A failing
config becomes a MeasureResult with `error` set; it never aborts the sweep.
"""
from __future__ import annotations

import platform as _platform
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Sequence

import numpy as np
import scipy.sparse as sp

from ..ops import Op
from ..space.base import Config

# Tolerance of the correctness check against scipy (float32 sums in another order).
CHECK_RTOL = 1e-3
CHECK_ATOL = 1e-3


@dataclass
class MeasureResult:
    """One config's outcome: a time, or an error; optional check and extras."""

    config: Config
    time_ms: float | None
    error: str | None = None
    correct: bool | None = None
    extra: dict = field(default_factory=dict)  # e.g. cycles and breakdown, compiled flag

    @property
    def ok(self) -> bool:
        return self.error is None and self.time_ms is not None

    def to_dict(self) -> dict:
        out = {"config": self.config.to_dict(), "time_ms": self.time_ms,
               "correct": self.correct, "error": self.error}
        out.update(self.extra)
        return out


class Backend(ABC):
    """Measures configs of one platform's space on one target."""

    target: ClassVar[str]    # the --target name: "llvm", "spade", "cuda"
    platform: ClassVar[str]  # the space it measures: "cpu", "spade", "gpu"

    @abstractmethod
    def measure(self, op: Op, matrix: sp.csr_matrix, configs: Sequence[Config], feat: int, *,
                check: bool = False, seed: int = 0) -> list[MeasureResult]:
        """Time each config (ms); with `check`, also compare its output with scipy."""

    def vendor(self) -> "VendorLibrary | None":
        """The vendor library this target is compared with, if one is available here."""
        return None

    def metadata(self) -> dict:
        """What a merged dataset needs to know about where results came from."""
        return {"target": self.target, "platform": self.platform, "host": _platform.node(),
                "machine": _platform.machine(), "processor": _platform.processor()}


class VendorLibrary(ABC):
    """A vendor implementation (MKL, scipy, cuSPARSE) timed as a reference point."""

    name: ClassVar[str]

    @abstractmethod
    def time_ms(self, op: Op, matrix: sp.csr_matrix, feat: int, *, seed: int = 0) -> float:
        """Median time of one call of `op` on `matrix` with width `feat`, in ms."""

    def method(self, op: Op | str) -> str:
        """The routine timed for `op` (a library without one for an op names its stand-in)."""
        return self.name


def median_time_ms(fn: Callable[[], object], *, warmup: int = 2, repeats: int = 7,
                   min_seconds: float = 0.0) -> float:
    """Median wall time of `fn()` in ms after `warmup` calls.

    Each timed sample runs `fn` enough times to last `min_seconds` (at least once),
    so sub-millisecond kernels are not dominated by timer noise.
    """
    for _ in range(warmup):
        fn()
    start = time.perf_counter()
    fn()
    single = time.perf_counter() - start
    inner = max(1, int(min_seconds / single)) if single > 0 else 1
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return float(np.median(samples) * 1e3)


def check_output(op: Op, matrix: sp.csr_matrix, dense: list[np.ndarray], output: np.ndarray) -> bool:
    """True when `output` matches scipy's result for `op` within float32 tolerance."""
    expected = op.reference(matrix, *dense)
    if output.shape != expected.shape:
        return False
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    return bool(np.allclose(output, expected, rtol=CHECK_RTOL, atol=CHECK_ATOL * scale))
