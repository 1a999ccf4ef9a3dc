"""The Backend interface: measure configurations of an op on a matrix.

`measure(op, matrix, configs, feat)` is a pure function of its arguments (plus
the backend's own settings), and backends are picklable, so the same call can
run in a process pool, on a cluster, or behind TVM's RPC runner. A failing
config becomes a MeasureResult with `error` set; it never aborts the sweep.

A sweep usually times configs without checking them; `pick_checked` is how a
winner is chosen from it: the fastest config whose output, checked once against
scipy, is right (a wrong one is recorded as failed and the next best is tried).
"""
from __future__ import annotations

import platform as _platform
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Sequence

import numpy as np
import scipy.sparse as sp

from ..matrix import as_csr
from ..ops import Op, get_op
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
        """Ran, was timed, and its output was not found wrong (`correct` None means not checked)."""
        return self.error is None and self.time_ms is not None and self.correct is not False

    def to_dict(self) -> dict:
        out = {"config": self.config.to_dict(), "time_ms": self.time_ms,
               "correct": self.correct, "error": self.error}
        out.update(self.extra)
        return out


class Backend(ABC):
    """Measures configs of one platform's space on one target."""

    target: ClassVar[str]    # the --target name: "llvm", "spade", "cuda"
    platform: ClassVar[str]  # the space it measures: "cpu", "spade", "gpu"
    # A simulator gives the same time for the same call: timing a config again tells nothing new.
    deterministic: ClassVar[bool] = False

    @abstractmethod
    def measure(self, op: Op, matrix: sp.csr_matrix, configs: Sequence[Config], feat: int, *,
                check: bool = False, seed: int = 0) -> list[MeasureResult]:
        """Time each config (ms); with `check`, also compare its output with scipy."""

    def vendor(self) -> "VendorLibrary | None":
        """The vendor library this target is compared with, if one is available here."""
        return None

    def kernel_threads(self) -> int | None:
        """The CPU threads each kernel runs on, for targets where that is a setting (else None)."""
        return None

    def export_kernel(self, op: Op, config: Config, feat: int, directory: Path, stem: str) -> dict:
        """Write `config`'s kernel under `directory` as ``<stem>.*``; returns what was written (file names,
        how to call it). A target without kernels (a simulator) writes nothing and says so."""
        return {"note": f"target {self.target!r} has no kernel to write (its times are simulated)"}

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


def measure_inputs(op: str | Op, matrix: sp.csr_matrix, feat: int, seed: int
                   ) -> tuple[Op, sp.csr_matrix, int, list[np.ndarray]]:
    """What every kernel backend's `measure` starts from: the op, the matrix as CSR,
    the dense width (ValueError below 1) and the seeded dense inputs."""
    op = get_op(op)
    matrix = as_csr(matrix)
    if int(feat) < 1:
        raise ValueError(f"feat must be >= 1, got {feat}")
    return op, matrix, int(feat), op.make_dense_inputs(matrix, int(feat), seed=seed)


def median_time_ms(fn: Callable[[], object], *, warmup: int = 2, repeats: int = 7,
                   min_seconds: float = 0.0, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median time of `fn()` in ms after `warmup` calls, read from `clock` (default: wall time).

    Each timed sample runs `fn` enough times to last `min_seconds` (at least once),
    so sub-millisecond kernels are not dominated by timer noise. For work that runs
    on the calling thread only, ``clock=time.thread_time`` leaves out the time the
    thread waits for a core, which on a loaded machine inflates wall times severalfold.
    """
    for _ in range(warmup):
        fn()
    start = clock()
    fn()
    single = clock() - start
    inner = max(1, int(min_seconds / single)) if single > 0 else 1
    # A call that already lasts min_seconds is a sample itself: a long kernel
    # (a 1M-row matrix) is not run once more just to size the samples.
    samples = [single] if inner == 1 and single > 0 else []
    for _ in range(repeats - len(samples)):
        start = clock()
        for _ in range(inner):
            fn()
        samples.append((clock() - start) / inner)
    return float(np.median(samples) * 1e3)


def check_output(op: Op, matrix: sp.csr_matrix, dense: list[np.ndarray], output: np.ndarray) -> bool:
    """True when `output` matches scipy's result for `op` within float32 tolerance."""
    expected = op.reference(matrix, *dense)
    if output.shape != expected.shape:
        return False
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    return bool(np.allclose(output, expected, rtol=CHECK_RTOL, atol=CHECK_ATOL * scale))


WRONG_OUTPUT = "wrong output: differs from scipy's result"


@dataclass
class CheckedPick:
    """What `pick_checked` found.

    best : the winner's checked re-measurement (`correct` is True, or None when
        the backend computes no outputs, e.g. a simulator); None if no candidate passed.
    beside : the `beside` config re-measured (and checked) in the same call as
        `best`, or None when no `beside` was given or no candidate passed.
    rejected : the candidates found wrong or failing on the re-measurement, in the
        order tried, each with `error` saying why.
    """

    best: MeasureResult | None
    beside: MeasureResult | None
    rejected: list[MeasureResult]


def pick_checked(backend: Backend, op: Op, matrix: sp.csr_matrix, results: Sequence[MeasureResult], feat: int, *,
                 seed: int = 0, beside: Config | None = None,
                 key: Callable[[MeasureResult], float] | None = None) -> CheckedPick:
    """The fastest of `results` whose output is right, re-measured with its check.

    Candidates are the `ok` results, fastest first (lowest `key` first, if given). Each is measured again with
    `check=True` (beside the `beside` config, when given, in the same call, so the
    two times are side by side) until one passes: its output matches scipy's (or
    the backend cannot check, `correct=None`) and it ran. A candidate whose output
    is wrong is recorded in `rejected` with its error set to WRONG_OUTPUT; one
    that failed on the re-measurement keeps its error. Checking costs one more
    measurement per candidate tried, usually just the winner's.
    """
    rejected: list[MeasureResult] = []
    candidates = sorted((r for r in results if r.ok), key=key or (lambda r: r.time_ms))
    for candidate in candidates:
        configs = [candidate.config] if beside is None or beside == candidate.config \
            else [beside, candidate.config]
        again = backend.measure(op, matrix, configs, feat, check=True, seed=seed)
        if len(again) != len(configs):
            raise RuntimeError(f"{type(backend).__name__}.measure returned {len(again)} results "
                               f"for {len(configs)} configs")
        checked = again[-1]
        if checked.correct is False:
            rejected.append(MeasureResult(checked.config, checked.time_ms, error=WRONG_OUTPUT, correct=False,
                                          extra=checked.extra))
            continue
        if not checked.ok:
            rejected.append(checked)
            continue
        paired = None if beside is None else again[0]
        return CheckedPick(best=checked, beside=paired, rejected=rejected)
    return CheckedPick(best=None, beside=None, rejected=rejected)


def rotated_order(count: int, round_index: int) -> list[int]:
    """0..count-1 rotated by `round_index`: the order of one round of side-by-side timing, so that none
    always runs first on a machine whose speed drifts."""
    return [(n + round_index) % count for n in range(count)]


def measure_side_by_side(backend: Backend, op: Op | str, matrix: sp.csr_matrix, configs: Sequence[Config],
                         feat: int, *, rounds: int, seed: int = 0, check_first: bool = False) -> list[dict]:
    """`rounds` backend calls that each measure all `configs`, the order rotated every round (so
    none always runs first, on a machine whose speed drifts); per round {config: MeasureResult}.
    With `check_first`, the first round also checks every output against scipy. (Built
    MetaSchedule kernels, timed one call each, have `metaschedule.time_side_by_side`.)"""
    configs = list(dict.fromkeys(configs))
    out = []
    for n in range(rounds):
        order = [configs[i] for i in rotated_order(len(configs), n)]
        results = backend.measure(op, matrix, order, feat, check=check_first and n == 0, seed=seed)
        out.append({r.config: r for r in results})
    return out
