"""The `spade` target: SPADE configs measured on the built-in C++ performance model.

Time is simulated, not measured: `time_ms = cycles / clock`, with the cycle
count and its breakdown in `MeasureResult.extra`. The model does no arithmetic,
so `check=True` cannot verify outputs and leaves `correct=None`.
"""
from __future__ import annotations

import logging
import os
from typing import Sequence

import scipy.sparse as sp

from .. import simulator
from ..errors import InvalidConfigError
from ..ops import Op, get_op
from ..space import create as create_space
from ..space.base import Config
from ..simulator import HardwareParams
from .base import Backend, MeasureResult

logger = logging.getLogger(__name__)


class SpadeBackend(Backend):
    """Simulates SPADE configs with the C++ model, in parallel over configs (C++ threads).

    Parameters
    ----------
    hardware : the modelled machine (default HardwareParams()); a dict is accepted.
    workers : threads over configs (default: this machine's CPU count).
    sampling : largest block-sampling factor of the cache models (1 = exact).
    """

    target = "spade"
    platform = "spade"
    deterministic = True  # simulated cycles

    def __init__(self, *, hardware: HardwareParams | dict | None = None, workers: int | None = None,
                 sampling: int = simulator.DEFAULT_SAMPLING):
        if isinstance(hardware, dict):
            hardware = HardwareParams.from_dict(hardware)
        self.hardware = hardware or HardwareParams()
        self.workers = max(1, int(workers if workers is not None else (os.cpu_count() or 1)))
        self.sampling = int(sampling)
        self._told_no_check = False

    def measure(self, op: Op | str, matrix: sp.csr_matrix, configs: Sequence[Config], feat: int, *,
                check: bool = False, seed: int = 0) -> list[MeasureResult]:
        """Simulate each config; a config outside the space or unable to run gets `error`."""
        op = get_op(op)
        space = create_space(self.platform, op.name)
        results: list[MeasureResult | None] = [None] * len(configs)
        runnable, positions = [], []
        for n, config in enumerate(configs):
            try:
                space.check(config)
            except InvalidConfigError as exc:
                results[n] = MeasureResult(config, None, error=str(exc))
                continue
            runnable.append(config)
            positions.append(n)
        if runnable:
            sims = simulator.simulate(matrix, op, feat, runnable, hardware=self.hardware,
                                      threads=self.workers, sampling=self.sampling)
            for n, config, sim in zip(positions, runnable, sims):
                if sim.error is not None:
                    results[n] = MeasureResult(config, None, error=sim.error)
                else:
                    # The model does no arithmetic: there is no output to check.
                    results[n] = MeasureResult(config, self.hardware.cycles_to_ms(sim.cycles),
                                               correct=None,
                                               extra={"cycles": sim.cycles, "breakdown": sim.breakdown})
        if check and not self._told_no_check:
            # Said once per backend: tune checks every batch, and a sweep would repeat it thousands of times.
            logger.info("spade: check requested, but the simulator computes no outputs (correct=None)")
            self._told_no_check = True
        return [r for r in results if r is not None]

    def metadata(self) -> dict:
        meta = super().metadata()
        meta.update({"model_version": simulator.MODEL_VERSION, "hardware": self.hardware.to_dict(),
                     "sampling": self.sampling})
        return meta

    def __repr__(self) -> str:
        return f"SpadeBackend(workers={self.workers}, sampling={self.sampling}, hardware={self.hardware})"
