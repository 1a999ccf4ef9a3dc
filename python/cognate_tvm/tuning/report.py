"""The JSON forms of `measure` and `tune` runs (what ``--json`` prints and ``--out`` writes)."""
from __future__ import annotations

from typing import Sequence

import scipy.sparse as sp

from ..backends.base import MeasureResult
from .options import DEFAULT_FIXED
from .result import TuneResult, chosen_time_ms


def matrix_report(path, matrix: sp.csr_matrix) -> dict:
    return {"path": str(path), "rows": matrix.shape[0], "cols": matrix.shape[1], "nnz": int(matrix.nnz)}


def measure_report(*, op: str, target: str, feat: int, matrix_path, matrix: sp.csr_matrix,
                   results: Sequence[MeasureResult], vendor: dict | None) -> dict:
    """The JSON form of a `measure` run: every result, the baseline (first) and the vendor."""
    report = {"op": op, "target": target, "feat": feat, "matrix": matrix_report(matrix_path, matrix),
              "baseline": {"config": results[0].config.to_dict(), "time_ms": results[0].time_ms},
              "results": [r.to_dict() for r in results]}
    if vendor is not None:
        report["vendor"] = vendor
    return report


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def tune_report(tuned: TuneResult, *, op: str, target: str, feat: int, matrix_path, matrix: sp.csr_matrix,
                budget: int, top_k: int | None, fixed: int = DEFAULT_FIXED, vendor: dict | None = None,
                saved_model: str | None = None) -> dict:
    """The JSON form of a tuning run; every time in it was measured in this run."""
    best = tuned.best
    report = {
        "op": op, "target": target, "feat": feat, "matrix": matrix_report(matrix_path, matrix),
        "mode": "finetuned" if tuned.finetuned else "ranked",
        "model": tuned.model_source, "budget": budget, "fixed": fixed,
        "top_k": len(tuned.measured) - 1 - tuned.sampled if top_k is None else top_k,
        "search": tuned.search, "rounds": tuned.rounds,
        "diversity": tuned.diversity,
        "saved_model": saved_model,
        "samples_measured": len(tuned.measured),
        "failed": len(tuned.failed),
        "baseline": {"config": tuned.baseline.config.to_dict(), "time_ms": tuned.baseline.time_ms,
                     "error": tuned.baseline.error},
        "best": None if best is None else {
            "config": best.config.to_dict(), "time_ms": best.time_ms,
            "speedup_vs_baseline": _ratio(tuned.baseline.time_ms, best.time_ms),
            "predicted_rank": tuned.predicted_rank[tuned.measured.index(best)],
            "correct": tuned.checked.correct if tuned.checked is not None else None},
        "measured": [{"config": r.config.to_dict(), "time_ms": r.time_ms, "error": r.error, "correct": r.correct,
                      "predicted_rank": rank, "sampled": 0 < n <= tuned.sampled,
                      "best_fixed": r.config in tuned.fixed}
                     for n, (r, rank) in enumerate(zip(tuned.measured, tuned.predicted_rank))],
        "rejected": [{"config": r.config.to_dict(), "error": r.error} for r in tuned.rejected],
        "finalists": [{"config": c.to_dict(), "median_ms": t} for c, t in tuned.retimed.items()],
        "chosen": None if tuned.chosen is None else tuned.chosen.config.to_dict(),
        "confirmed": None if tuned.confirmed is None else {
            "baseline_ms": tuned.confirmed[0].time_ms, "best_ms": tuned.confirmed[1].time_ms,
            "speedup_vs_baseline": _ratio(tuned.confirmed[0].time_ms, tuned.confirmed[1].time_ms)},
        "notes": list(tuned.notes),
    }
    if tuned.oracle is not None:
        report["oracle"] = tuned.oracle.to_dict()
        report["oracle_fraction"] = tuned.oracle.fraction
    if vendor is not None:
        chosen_ms = chosen_time_ms(tuned)
        report["vendor"] = dict(vendor, speedup_vs_vendor=_ratio(vendor["time_ms"], chosen_ms))
    return report

