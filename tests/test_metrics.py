"""Metrics on hand-made examples."""
import math

import numpy as np
import pytest

from cognate_tvm.errors import ShapeError
from cognate_tvm.metrics import (diverse_top_k_time, evaluate_group, geomean, kendall_tau, ordered_pair_accuracy,
                                 summarize, top_k_time)
from cognate_tvm.space import create

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


def test_diverse_top_k_time_measures_the_picks_several_knobs_apart():
    spade = create("spade", "spmm")
    configs = spade.configs()[:6]  # 0 differs from 1, 2 and 4 in one knob, from 3 and 5 in two
    times = np.array([5.0, 6.0, 7.0, 1.0, 9.0, 8.0])
    scores = np.arange(6.0)  # ranking 0, 1, 2, ...
    assert top_k_time(times, scores, 2, baseline_time=10.0) == 5.0  # 0 and its one-knob neighbour 1
    assert configs[0].knobs_differing(configs[3]) == 2
    assert diverse_top_k_time(times, scores, configs, 2, 2, baseline_time=10.0) == 1.0  # 0, then 3
    assert diverse_top_k_time(times, scores, configs, 2, 1, baseline_time=10.0) == 5.0
    failed = np.array([np.nan, 6.0, 7.0, np.nan, 9.0, 8.0])
    assert diverse_top_k_time(failed, scores, configs, 2, 2, baseline_time=10.0) == 10.0  # both picks failed
    g = evaluate_group(times, scores, baseline_ms=10.0, k=2, configs=configs, min_distance=2)
    assert g.topk_diverse_ms == 1.0 and g.topk_ms == 5.0
    summary = summarize([g])
    assert summary["oracle_fraction_topk_diverse"] == pytest.approx(1.0)
    assert summary["speedup_topk_diverse"] == pytest.approx(10.0)
    assert "oracle_fraction_topk_diverse" not in summarize([evaluate_group(times, scores, baseline_ms=10.0)])
    with pytest.raises(ShapeError, match="5 configs for 6 times"):
        diverse_top_k_time(times, scores, configs[:5], 2, 2, baseline_time=10.0)
