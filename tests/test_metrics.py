"""Metrics on hand-made examples."""
import math

import numpy as np
import pytest

from cognate_tvm.errors import ShapeError
from cognate_tvm.metrics import (evaluate_group, geomean, kendall_tau, ordered_pair_accuracy, summarize,
                                 top_k_time)

TIMES = np.array([4.0, 1.0, 2.0, 8.0])


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert math.isnan(geomean([]))
    with pytest.raises(ValueError, match="positive"):
        geomean([1.0, 0.0])


def test_perfect_and_reversed_ranking():
    perfect = TIMES.copy()  # scores ordered exactly like the times
    assert ordered_pair_accuracy(TIMES, perfect) == 1.0
    assert kendall_tau(TIMES, perfect) == pytest.approx(1.0)
    assert ordered_pair_accuracy(TIMES, -perfect) == 0.0
    assert kendall_tau(TIMES, -perfect) == pytest.approx(-1.0)


def test_pair_accuracy_by_hand():
    # scores order: idx1 < idx0 < idx3 < idx2 -> pairs (6): wrong only on (2, 3) and (0, 2)?
    scores = np.array([1.0, 0.0, 3.0, 2.0])
    # true order by time: 1 < 2 < 0 < 3. Pairs: (0,1) ok, (0,2) wrong, (0,3) ok, (1,2) ok, (1,3) ok, (2,3) wrong
    assert ordered_pair_accuracy(TIMES, scores) == pytest.approx(4 / 6)
    # equal scores count half; failed (NaN) configs are left out
    assert ordered_pair_accuracy(np.array([1.0, 2.0, np.nan]), np.array([0.0, 0.0, 5.0])) == 0.5


def test_top_k_time_skips_failures_and_falls_back():
    scores = np.array([0.0, 3.0, 1.0, 2.0])  # order: 0, 2, 3, 1
    assert top_k_time(TIMES, scores, 1, baseline_time=5.0) == 4.0
    assert top_k_time(TIMES, scores, 2, baseline_time=5.0) == 2.0
    times = np.array([np.nan, 1.0, np.nan, 8.0])
    assert top_k_time(times, scores, 2, baseline_time=5.0) == 5.0  # both picks failed -> baseline
    assert top_k_time(times, scores, 3, baseline_time=5.0) == 8.0


def test_evaluate_and_summarize_by_hand():
    scores = np.array([0.0, 3.0, 1.0, 2.0])
    g1 = evaluate_group(TIMES, scores, baseline_ms=8.0, k=2)  # top1 4 ms, top2 2 ms, oracle 1 ms
    g2 = evaluate_group(np.array([2.0, 1.0]), np.array([1.0, 0.0]), baseline_ms=2.0, k=2)  # perfect
    assert (g1.top1_ms, g1.topk_ms, g1.oracle_ms) == (4.0, 2.0, 1.0)
    s = summarize([g1, g2])
    assert s["speedup_top1"] == pytest.approx(math.sqrt(2.0 * 2.0))
    assert s["speedup_topk"] == pytest.approx(math.sqrt(4.0 * 2.0))
    assert s["speedup_oracle"] == pytest.approx(math.sqrt(8.0 * 2.0))
    assert s["oracle_fraction_top1"] == pytest.approx(math.sqrt(0.25 * 1.0))
    assert s["ape_top1"] == pytest.approx((300.0 + 0.0) / 2)
    # g1 pairs: only (0, 3) and (2, 3) are ordered right -> 2/6; g2 is perfect
    assert s["pair_accuracy"] == pytest.approx((2 / 6 + 1.0) / 2)


def test_bad_inputs():
    with pytest.raises(ShapeError):
        ordered_pair_accuracy(TIMES, np.zeros(3))
    with pytest.raises(ValueError, match="non-finite"):
        kendall_tau(TIMES, np.array([0.0, np.nan, 1.0, 2.0]))
    with pytest.raises(ValueError, match="baseline time"):
        evaluate_group(TIMES, TIMES, baseline_ms=0.0)
