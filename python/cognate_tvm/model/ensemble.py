"""A ranking model that averages the standardized scores of several ranking models.

Each member's scores of one call (one matrix, its candidate configs) are centred and
divided by their standard deviation before the mean: a margin loss fixes only score
differences, so members trained with other learning rates or a re-drawn head score on
other scales, and an unscaled mean would follow whichever member spreads widest.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from ..space.base import Config, Space
from .cognate import RankingModel


def standardized(scores: np.ndarray) -> np.ndarray:
    """`scores` centred and scaled to unit standard deviation (all zeros when they are all equal)."""
    scores = np.asarray(scores, dtype=np.float64)
    spread = scores.std()
    return (scores - scores.mean()) / spread if spread > 0 else np.zeros_like(scores)


class RankEnsemble(RankingModel):
    """The mean of the members' standardized scores (lower = predicted faster)."""

    name = "ensemble"

    def __init__(self, members: Sequence[RankingModel]):
        if not members:
            raise ValueError("an ensemble needs at least one member")
        self.members = list(members)

    def fit(self, groups, *, space: Space) -> "RankEnsemble":
        for member in self.members:
            member.fit(groups, space=space)
        return self

    def finetune(self, groups, *, space: Space) -> "RankEnsemble":
        for member in self.members:
            member.finetune(groups, space=space)
        return self

    def predict(self, matrix: sp.csr_matrix, configs: Sequence[Config], *, space: Space,
                feat: int) -> np.ndarray:
        scores = [standardized(m.predict(matrix, configs, space=space, feat=feat)) for m in self.members]
        return np.mean(scores, axis=0)
