"""Metrics of a ranking cost model, computed per (matrix, feat) group.

Every function takes, for one group, the measured times of the candidate
configs (ms; NaN for a config that failed) and the model's scores (lower =
predicted faster). Conventions:

- "top-k" means: measure the k best-scored configs and keep the fastest that
  ran. If none of them ran, the platform baseline is used (speedup 1).
- "diverse top-k" (given the configs): the same over the k picks that `tune`
  measures from the ranking, which differ pairwise in at least `min_distance`
  knobs (`space.diverse_top`); with `min_distance` 1 it is the top-k.
- Speedup over the baseline config: ``t_baseline / t_chosen``.
- Fraction of the oracle: ``t_oracle / t_chosen`` (1 = the model found the best
  config of the candidates); its geomean equals geomean(speedup) / geomean(oracle speedup).
- APE (absolute percentage error of the pick): ``100 * (t_top1 - t_oracle) / t_oracle``,
  how much slower the top-1 pick is than the best candidate, averaged over groups.
- Ordered-pair accuracy: over all pairs with different times, the fraction the
  scores order the same way as the times (ties in score count as half).
- Kendall's tau (tau-b) between scores and times (scipy.stats.kendalltau).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence

import numpy as np
from scipy import stats as _stats

from .errors import ShapeError
from .space.base import Config, diverse_top


def _check(times: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    times = np.asarray(times, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    if times.shape != scores.shape or times.ndim != 1:
        raise ShapeError(f"times {times.shape} and scores {scores.shape} must be equal-length vectors")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"scores contain {int((~np.isfinite(scores)).sum())} non-finite value(s)")
    return times, scores


def geomean(values: Sequence[float] | np.ndarray) -> float:
    """Geometric mean of positive values (NaN for an empty input)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return float("nan")
    if np.any(arr <= 0) or not np.all(np.isfinite(arr)):
        raise ValueError(f"geomean needs positive finite values, got {arr[(arr <= 0) | ~np.isfinite(arr)][:5]}")
    return float(np.exp(np.mean(np.log(arr))))


def top_k_time(times: np.ndarray, scores: np.ndarray, k: int, baseline_time: float) -> float:
    """Time of the fastest successful config among the k best-scored (baseline if none ran)."""
    times, scores = _check(times, scores)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    order = np.argsort(scores, kind="stable")[:k]
    picked = times[order]
    picked = picked[np.isfinite(picked)]
    return float(picked.min()) if picked.size else float(baseline_time)


def diverse_top_k_time(times: np.ndarray, scores: np.ndarray, configs: Sequence[Config], k: int,
                       min_distance: int, baseline_time: float) -> float:
    """Time of the fastest successful config among the k picks of `space.diverse_top` from the
    ranking by `scores` (baseline if none ran)."""
    times, scores = _check(times, scores)
    if len(configs) != times.shape[0]:
        raise ShapeError(f"{len(configs)} configs for {times.shape[0]} times")
    index = {c: i for i, c in enumerate(configs)}
    ranked = [configs[i] for i in np.argsort(scores, kind="stable")]
    picked = times[[index[c] for c in diverse_top(ranked, k, min_distance)]]
    picked = picked[np.isfinite(picked)]
    return float(picked.min()) if picked.size else float(baseline_time)


def ordered_pair_accuracy(times: np.ndarray, scores: np.ndarray) -> float:
    """Fraction of pairs with different (finite) times that the scores order correctly."""
    times, scores = _check(times, scores)
    ok = np.isfinite(times)
    times, scores = times[ok], scores[ok]
    dt = np.sign(times[:, None] - times[None, :])
    ds = np.sign(scores[:, None] - scores[None, :])
    upper = np.triu(np.ones_like(dt, dtype=bool), k=1) & (dt != 0)
    if not upper.any():
        return float("nan")
    agree = (dt[upper] == ds[upper]).astype(np.float64)
    agree[ds[upper] == 0] = 0.5
    return float(agree.mean())


def kendall_tau(times: np.ndarray, scores: np.ndarray) -> float:
    """Kendall's tau-b between scores and finite times (NaN when undefined)."""
    times, scores = _check(times, scores)
    ok = np.isfinite(times)
    if ok.sum() < 2:
        return float("nan")
    return float(_stats.kendalltau(scores[ok], times[ok]).statistic)


@dataclass(frozen=True)
class GroupResult:
    """Per-group outcome used by `summarize`."""

    baseline_ms: float
    oracle_ms: float
    top1_ms: float
    topk_ms: float
    pair_accuracy: float
    tau: float
    topk_diverse_ms: float | None = None  # given the configs (`evaluate_group`)


def evaluate_group(times: np.ndarray, scores: np.ndarray, *, baseline_ms: float, k: int = 5,
                   configs: Sequence[Config] | None = None, min_distance: int = 1) -> GroupResult:
    """All metrics of one group; `baseline_ms` is the measured time of the platform baseline config.
    With the group's `configs` (in `times` order) also the diverse top-k (`min_distance`)."""
    times, scores = _check(times, scores)
    if not np.isfinite(baseline_ms) or baseline_ms <= 0:
        raise ValueError(f"baseline time must be positive and finite, got {baseline_ms}")
    finite = times[np.isfinite(times)]
    oracle = float(min(finite.min(), baseline_ms)) if finite.size else float(baseline_ms)
    return GroupResult(baseline_ms=float(baseline_ms), oracle_ms=oracle,
                       top1_ms=top_k_time(times, scores, 1, baseline_ms),
                       topk_ms=top_k_time(times, scores, k, baseline_ms),
                       pair_accuracy=ordered_pair_accuracy(times, scores),
                       tau=kendall_tau(times, scores),
                       topk_diverse_ms=None if configs is None else
                       diverse_top_k_time(times, scores, configs, k, min_distance, baseline_ms))


def summarize(results: Sequence[GroupResult]) -> dict[str, float]:
    """Aggregate group results: geomean speedups, fractions of the oracle, APE, pair accuracy, tau."""
    if not results:
        raise ValueError("no group results to summarize")
    base = np.array([r.baseline_ms for r in results])
    oracle = np.array([r.oracle_ms for r in results])
    top1 = np.array([r.top1_ms for r in results])
    topk = np.array([r.topk_ms for r in results])
    summary = {
        "groups": float(len(results)),
        "speedup_top1": geomean(base / top1),
        "speedup_topk": geomean(base / topk),
        "speedup_oracle": geomean(base / oracle),
        "oracle_fraction_top1": geomean(oracle / top1),
        "oracle_fraction_topk": geomean(oracle / topk),
        "ape_top1": float(np.mean(100.0 * (top1 - oracle) / oracle)),
        "pair_accuracy": float(np.nanmean([r.pair_accuracy for r in results])),
        "kendall_tau": float(np.nanmean([r.tau for r in results])),
    }
    if all(r.topk_diverse_ms is not None for r in results):
        diverse = np.array([r.topk_diverse_ms for r in results])
        summary["speedup_topk_diverse"] = geomean(base / diverse)
        summary["oracle_fraction_topk_diverse"] = geomean(oracle / diverse)
    return summary


def mean_log_slowdown(tables: Sequence[Mapping[Hashable, float | None]], *,
                      min_tables: int = 1) -> dict[Hashable, float]:
    """{config: mean over `tables` of ln(its time / that table's fastest time)}, for the configs
    timed (finite, > 0) in at least `min_tables` of the tables (each table: config -> time)."""
    sums: dict[Hashable, list[float]] = {}
    for table in tables:
        timed = {c: float(t) for c, t in table.items() if t is not None and np.isfinite(t) and t > 0}
        if not timed:
            continue
        fastest = min(timed.values())
        for config, t in timed.items():
            sums.setdefault(config, []).append(float(np.log(t / fastest)))
    return {c: float(np.mean(v)) for c, v in sums.items() if len(v) >= min_tables}
