"""`TrialLog`: the measure callback that keeps every measured candidate in search order."""
from __future__ import annotations

from typing import Sequence

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from ..space.cpu import CPUConfig
from .runner import record_ms
from .space import Variant, config_from_knobs, knobs_from_trace


@derived_object
class TrialLog(ms.measure_callback.PyMeasureCallback):
    """Measure callback: every measured candidate's config and time, in the order the search measured
    them (the database keeps records sorted by time, so a search's best after its first t trials is
    only known from here)."""

    def __init__(self, variant_list: Sequence[Variant]):
        self.variant_list = list(variant_list)
        self.trials: list[tuple[CPUConfig, float | None]] = []

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        for candidate, built, ran in zip(measure_candidates, builder_results, runner_results):
            config = config_from_knobs(knobs_from_trace(candidate.sch.trace), self.variant_list)
            ok = built.error_msg is None and ran.error_msg is None and ran.run_secs
            self.trials.append((config, record_ms(ran.run_secs) if ok else None))

