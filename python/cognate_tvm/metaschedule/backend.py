"""The MetaSchedule kernels of CPU-space configs, built and timed: what `tune_sparse`'s searches run.

`tune` measures the hand-written CPU kernels (`backends/cpu.py`). MetaSchedule builds a config from
its own schedule (`schedule_config`), and the two kernels differ (the dense-tile-major
SpMM order accumulates into memory there, into registers here), so a config's time differs too and
a model trained on one family ranks the other worse. This backend times the MetaSchedule kernels,
for the datasets that teach `CognateModel()` the kernels it ranks
(`benchmarks/metaschedule_finetune.py`). A config outside the MetaSchedule space fails, naming why.

One `measure` call times its configs side by side: it builds them all, then times them in `rounds`
rounds, the order rotated each round, and reports each one's median. The machine's speed moves
from one round to the next (docs/metaschedule.md, `benchmarks/runner_drift.py`), so configs timed a
minute apart are on different scales, and one matrix's configs are what a ranking compares.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from ..backends.base import Backend, MeasureResult, measure_inputs
from ..backends.export import export_llvm_kernel
from ..ops import Op
from ..space.base import Config
from .runner import BuiltKernel, device_inputs, time_side_by_side
from .space import schedule_config


class MetaScheduleBackend(Backend):
    """Measures CPU-space configs as `tune_sparse` builds them (`schedule_config` + `tvm.tirx.build`).

    Parameters
    ----------
    num_threads : threads of TVM's pool and of the parallel schedules (default: all cores); set through
        ``TVM_NUM_THREADS``, which takes effect only if TVM's pool has not started in this process.
    rounds : side-by-side timing rounds (the median of the rounds is the time).
    repeat, min_repeat_ms : TVM time_evaluator settings of one round (its median is the round's time).
    mcpu : LLVM CPU name to compile for (default: this machine's).
    """

    target = "llvm"
    platform = "cpu"
    kernels = "metaschedule"
    export_kernel = export_llvm_kernel

    def __init__(self, *, num_threads: int | None = None, rounds: int = 3, repeat: int = 5,
                 min_repeat_ms: int = 20, mcpu: str | None = None):
        if num_threads is not None and int(num_threads) < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        if int(rounds) < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        self.num_threads = int(num_threads or os.cpu_count() or 1)
        self.rounds, self.repeat, self.min_repeat_ms = int(rounds), int(repeat), int(min_repeat_ms)
        self.mcpu = mcpu
        self._setup()

    def _setup(self) -> None:
        os.environ["TVM_NUM_THREADS"] = str(self.num_threads)  # as LLVMBackend: before TVM's pool starts
        from ..kernels.cpu import cpu_target

        self._target = cpu_target(self.num_threads, self.mcpu)

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._setup()

    def kernel_threads(self) -> int:
        return self.num_threads

    def metadata(self) -> dict:
        return {**super().metadata(), "kernels": self.kernels, "num_threads": self.num_threads,
                "rounds": self.rounds, "repeat": self.repeat, "min_repeat_ms": self.min_repeat_ms}

    def measure(self, op: Op, matrix: sp.csr_matrix, configs: Sequence[Config], feat: int, *,
                check: bool = False, seed: int = 0) -> list[MeasureResult]:
        op, matrix, feat, _ = measure_inputs(op, matrix, feat, seed)
        inputs = device_inputs(op, matrix, feat, seed)
        results: list[MeasureResult | None] = [None] * len(configs)
        kernels: dict[int, object] = {}
        correct: dict[int, bool | None] = {}
        for n, config in enumerate(configs):
            try:
                mod = schedule_config(op, matrix, feat, config, workers=self.num_threads)
                kernel = BuiltKernel(op, mod, matrix, feat, self._target, seed=seed, inputs=inputs)
                correct[n] = kernel.correct() if check else None
                kernels[n] = kernel
            except Exception as exc:  # a failing config is recorded and the sweep goes on
                results[n] = MeasureResult(config, None, error=f"{type(exc).__name__}: {exc}")
        samples = self._time_side_by_side(kernels, results, configs)
        for n, times in samples.items():
            if results[n] is None:
                results[n] = MeasureResult(configs[n], float(np.median(times)), correct=correct[n],
                                           extra={"round_times_ms": [float(t) for t in times]})
        return results

    def _time_side_by_side(self, kernels: dict, results: list, configs: Sequence[Config]) -> dict[int, list]:
        """{config index: its time in each round}; a kernel that fails to run gets its error in `results`
        and is not run again."""
        order = list(kernels)

        def timer(i: int) -> float | None:
            n = order[i]
            if results[n] is not None:
                return None
            try:
                return kernels[n].time_ms(repeat=self.repeat, min_repeat_ms=self.min_repeat_ms)
            except Exception as exc:
                results[n] = MeasureResult(configs[n], None, error=f"run failed: {type(exc).__name__}: {exc}")
                return None

        samples = time_side_by_side([kernels[n] for n in order], self.rounds, timer=timer)
        return {n: t for n, t in zip(order, samples) if results[n] is None}
