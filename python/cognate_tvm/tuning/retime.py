"""Choosing among the measured configs: the finalists re-timed side by side with the baseline, then the
fastest one's output checked against scipy (the next is tried when it is wrong)."""
from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from ..backends.base import Backend, MeasureResult, measure_side_by_side, pick_checked
from ..ops import Op
from .options import FINAL_ROUNDS, FINALISTS
from .result import TuneResult

log = logging.getLogger(__name__)


def retime_finalists(backend: Backend, op: Op, matrix: sp.csr_matrix, tuned: TuneResult, feat: int, *,
                     seed: int = 0, finalists: int = FINALISTS, rounds: int = FINAL_ROUNDS) -> dict:
    """{config: its times over `rounds` side-by-side calls} of the baseline and the `finalists`
    fastest measured configs; `tuned.retimed` gets the medians of those that ran every round."""
    ok = sorted((r for r in tuned.measured if r.ok), key=lambda r: r.time_ms)[:finalists]
    configs = list(dict.fromkeys([tuned.baseline.config] + [r.config for r in ok]))
    if rounds < 1 or len(configs) < 2 or backend.deterministic:
        return {}
    per_round = measure_side_by_side(backend, op, matrix, configs, feat, rounds=rounds, seed=seed)
    times = {c: [r[c].time_ms if c in r and r[c].ok else None for r in per_round] for c in configs}
    tuned.retimed = {c: float(np.median(t)) for c, t in times.items() if None not in t}
    return times


def choose(backend: Backend, op: Op, matrix: sp.csr_matrix, tuned: TuneResult, feat: int, *, seed: int = 0,
           finalists: int = FINALISTS, rounds: int = FINAL_ROUNDS) -> None:
    """Re-time the finalists beside the baseline (`retime_finalists`); check the fastest one's output,
    timed once more beside the baseline; take the next if wrong.

    Sets `tuned.retimed`, `tuned.checked`, `tuned.confirmed` and `tuned.rejected`; each rejected
    config's entry in `tuned.measured` becomes a failure carrying the reason.
    """
    times = retime_finalists(backend, op, matrix, tuned, feat, seed=seed, finalists=finalists, rounds=rounds)
    # the re-timed finalists first (by median), then the rest by their measured times
    order = lambda r: (0, tuned.retimed[r.config]) if r.config in tuned.retimed else (1, r.time_ms)  # noqa: E731
    pick = pick_checked(backend, op, matrix, tuned.measured, feat, seed=seed, beside=tuned.baseline.config,
                        key=order)
    tuned.rejected = list(pick.rejected)
    reasons = {r.config: r for r in pick.rejected}
    tuned.measured = [MeasureResult(r.config, None, error=reasons[r.config].error,
                                    correct=reasons[r.config].correct, extra=r.extra)
                      if r.config in reasons else r for r in tuned.measured]
    if tuned.baseline.config in reasons:
        tuned.baseline = tuned.measured[0]
    for r in pick.rejected:
        tuned.notes.append(f"config {r.config.to_json()} rejected: {r.error}")
        log.warning(tuned.notes[-1])
    tuned.checked = pick.best
    if pick.best is None:
        return
    if pick.best.correct is None:
        tuned.notes.append(f"target {backend.target!r} computes no outputs: the chosen config's output "
                           f"was not checked")
    if pick.beside is not None and pick.beside.ok and pick.best.config != tuned.baseline.config:
        tuned.confirmed = tuple(_with_rounds(r, times.get(r.config)) for r in (pick.beside, pick.best))
        if pick.beside.correct is False:
            tuned.notes.append("the baseline config's output is wrong on this matrix; it is never chosen")


def _with_rounds(result: MeasureResult, round_times: list | None) -> MeasureResult:
    """`result` with its time the median of it and its side-by-side rounds' (those that ran)."""
    samples = [t for t in (round_times or []) if t is not None] + [result.time_ms]
    return MeasureResult(result.config, float(np.median(samples)), error=result.error, correct=result.correct,
                         extra=result.extra)
