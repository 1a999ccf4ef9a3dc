"""RankEnsemble: the mean of standardized member scores."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm.model import RankEnsemble, RankingModel
from cognate_tvm.model.ensemble import standardized
from cognate_tvm.space import create as create_space


class Fixed(RankingModel):
    def __init__(self, scores):
        self.scores, self.calls = np.asarray(scores, dtype=np.float64), []

    def fit(self, groups, *, space):
        self.calls.append("fit")
        return self

    def finetune(self, groups, *, space):
        self.calls.append("finetune")
        return self

    def predict(self, matrix, configs, *, space, feat):
        return self.scores[: len(configs)]


def test_members_count_equally_whatever_their_score_scale():
    space = create_space("spade", "spmm")
    configs = space.configs()[:4]
    matrix = sp.identity(8, format="csr")
    # the wide member ranks config 0 first, the narrow one config 1, and both put config 1 ahead of 2 and 3:
    # an unscaled mean would follow the wide member (config 0); standardized, config 1 wins
    wide, narrow = Fixed([0.0, 1000.0, 2000.0, 3000.0]), Fixed([3.0, 0.0, 1.0, 2.0])
    assert np.argmin(wide.scores + narrow.scores) == 0
    scores = RankEnsemble([wide, narrow]).predict(matrix, configs, space=space, feat=32)
    assert scores == pytest.approx((standardized(wide.scores) + standardized(narrow.scores)) / 2)
    assert np.argmin(scores) == 1
    assert standardized([2.0, 2.0, 2.0]) == pytest.approx([0.0, 0.0, 0.0])
    assert standardized([1.0, 3.0]) == pytest.approx([-1.0, 1.0])


def test_fit_and_finetune_reach_every_member_and_an_empty_ensemble_is_an_error():
    members = [Fixed([0.0]), Fixed([1.0])]
    ensemble = RankEnsemble(members)
    assert ensemble.finetune([], space=None) is ensemble and ensemble.fit([], space=None) is ensemble
    assert [m.calls for m in members] == [["finetune", "fit"]] * 2
    with pytest.raises(ValueError, match="at least one member"):
        RankEnsemble([])
