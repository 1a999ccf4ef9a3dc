"""Scoring rankers on the protocol's groups, the oracle ranker, and the summary over seeds."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..data import Group, matrix_hash
from ..metrics import evaluate_group, summarize
from ..model.cognate import RankingModel

# the metrics of every row (summary key, column title)
COLUMNS = (("speedup_top1", "top-1 speedup"), ("speedup_topk", "top-5 speedup"),
           ("oracle_fraction_top1", "top-1 / oracle"), ("oracle_fraction_topk", "top-5 / oracle"),
           ("oracle_fraction_topk_diverse", "diverse top-5 / oracle"),
           ("ape_top1", "APE %"), ("pair_accuracy", "pair acc."), ("kendall_tau", "Kendall tau"))
# train.select_metric names -> evaluate_groups summary keys
SUMMARY_KEY = {"pair_accuracy": "pair_accuracy", "top1_fraction": "oracle_fraction_top1"}


def evaluate_groups(model: RankingModel, groups: Sequence[Group], space, k: int) -> tuple[dict, list[dict]]:
    """Summary metrics (`cognate_tvm.metrics.summarize`) and per-group picks of `model` on `groups`; the
    diverse top-k is the k that `tune` measures from the ranking (`space.pick_distance` knobs apart)."""
    results, rows = [], []
    base = space.baseline()
    for g in groups:
        configs = list(g.configs)
        baseline_ms = float(g.times_ms[configs.index(base)])
        scores = np.asarray(model.predict(g.matrix, configs, space=space, feat=g.feat), dtype=np.float64)
        r = evaluate_group(g.times_ms, scores, baseline_ms=baseline_ms, k=k, configs=configs,
                           min_distance=space.pick_distance)
        results.append(r)
        rows.append({"matrix": g.name, "nnz": int(g.matrix.nnz), "baseline_ms": r.baseline_ms,
                     "oracle_ms": r.oracle_ms, "top1_ms": r.top1_ms, "topk_ms": r.topk_ms,
                     "topk_diverse_ms": r.topk_diverse_ms})
    return summarize(results), rows


class OracleRanker(RankingModel):
    """Scores = the measured times: the best config of each group first (the upper bound)."""

    name = "oracle"

    def __init__(self, groups: Sequence[Group]):
        self.times = {(matrix_hash(g.matrix), g.feat, c.to_json()): t
                      for g in groups for c, t in zip(g.configs, g.times_ms)}
        self._hash = matrix_hash

    def fit(self, groups, *, space):
        return self

    def finetune(self, groups, *, space):
        return self

    def predict(self, matrix, configs, *, space, feat):
        key = self._hash(matrix)
        return np.array([self.times[(key, feat, c.to_json())] for c in configs], dtype=np.float64)


def samples(groups: Sequence[Group]) -> int:
    return int(sum(len(g.configs) for g in groups))


def val_score(model: RankingModel, val: Sequence[Group], space, k: int) -> dict:
    summary, _ = evaluate_groups(model, val, space, k)
    return summary


def summarize_runs(runs: list[dict]) -> dict[str, dict[str, float]]:
    keys = [k for k, _ in COLUMNS] + ["speedup_oracle", "target_samples", "seconds"]
    out: dict[str, dict[str, float]] = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        rows = [r for r in runs if r["method"] == method]
        entry = {"seeds": float(len(rows))}
        for key in keys:
            values = np.array([r[key] for r in rows], dtype=np.float64)
            entry[key] = float(values.mean())
            entry[key + "_std"] = float(values.std())
        out[method] = entry
    return out
