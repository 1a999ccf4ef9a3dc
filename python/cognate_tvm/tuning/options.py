"""`TuneOptions`: how `tune` searches (everything but the op, matrix, backend and width), and its defaults."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Sequence

from ..space.base import Config
from .search import DEFAULT_STRATEGY, SearchStrategy

DEFAULT_TOP_K = 5        # configs measured from the model's ranking (the protocol's top-5, docs/transfer.md)
DEFAULT_BUDGET = 0       # target measurements to fine-tune on before ranking
# Of the top-k, how many are the model's best fixed configs (the ones that did best over its
# training matrices, `RankingModel.fixed_configs`) rather than its picks for this matrix: one
# config that is good everywhere guards against the model's misses on a matrix unlike its data.
DEFAULT_FIXED = 1
# Before choosing, the FINALISTS fastest measured configs and the baseline are timed again side
# by side, FINAL_ROUNDS calls with the order rotated, and compared by their medians: one timing
# each on a shared machine whose speed drifts by 10-40% over minutes picks the wrong one too often.
FINALISTS = 3
FINAL_ROUNDS = 3
# --oracle measures the whole space when it has at most ORACLE_WHOLE_SPACE configs (spade: 256,
# gpu: 912), else a seeded sample of ORACLE_SAMPLE configs plus every config tune measured (the
# CPU space has ~50k configs; 512 llvm configs take a few minutes with a cold kernel cache).
ORACLE_WHOLE_SPACE = 1024
ORACLE_SAMPLE = 512


@dataclass(frozen=True)
class TuneOptions:
    """How `tune` searches; every field has the CLI's default.

    model : a CognateCostModel (or any model with rank / finetune), or None for
        the shipped model of the op on the backend's platform (`model.load_shipped_model`).
    model_source : where `model` came from, for the report.
    pretrained_root : directory of shipped models (default: the package's).
    budget : configs sampled and measured before ranking; the model is
        fine-tuned on them (and the baseline) from its loaded weights.
    top_k : configs the search measures after the baseline (and the sample); None: the
        strategy's default (`search.OneShot`: 5, `search.Adaptive`: 7). Ignored when `search`
        is a strategy object.
    fixed : how many of the first picks are the model's best fixed configs (`search.pick_top`).
    seed : seeds the sample, the measured inputs and the oracle's sample.
    diversity : the first ranked picks differ pairwise in at least this many knobs (`space.diverse_top`);
        None: the platform's `Space.pick_distance` (1, the plain top-k, but on SPADE).
    search : the search strategy (`tuning.search`): "adaptive" (rounds of measure, fine-tune,
        re-rank), "oneshot" (one ranking, one batch), or a `SearchStrategy`.
    candidates : the configs to search among (default: `Space.candidates` of the backend's threads).
    oracle : also sweep the space (`measure_oracle`) to see how far the choice is from its best.
    oracle_sample : the oracle's sample size on a space larger than `ORACLE_WHOLE_SPACE`.
    name : the matrix's name in the fine-tuning data.
    progress : show progress bars.
    """

    model: object | None = None
    model_source: str | None = None
    pretrained_root: str | os.PathLike | None = None
    budget: int = DEFAULT_BUDGET
    top_k: int | None = None
    fixed: int = DEFAULT_FIXED
    seed: int = 0
    diversity: int | None = None
    search: str | SearchStrategy = DEFAULT_STRATEGY
    candidates: Sequence[Config] | None = None
    oracle: bool = False
    oracle_sample: int = ORACLE_SAMPLE
    name: str = "matrix"
    progress: bool = False

    def replace(self, **changes) -> "TuneOptions":
        """A copy with `changes` (field names) applied."""
        return dataclasses.replace(self, **changes)

    def check(self, feat: int) -> None:
        """ValueError naming the first option out of range (`check_tune_options`)."""
        check_tune_options(feat=feat, top_k=self.top_k, budget=self.budget, fixed=self.fixed,
                           diversity=self.diversity)


def check_tune_options(*, feat: int, top_k: int | None, budget: int, fixed: int, diversity: int | None = None,
                       oracle_sample: int | None = None, name=lambda option: option) -> None:
    """ValueError naming the first of `tune`'s options out of range (`oracle_sample`: only when given;
    `top_k` None: the search strategy's default).

    `name` spells an option as the caller knows it (the CLI: ``--top-k`` for ``top_k``).
    """
    if int(feat) < 1:
        raise ValueError(f"{name('feat')} must be >= 1, got {feat}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"{name('top_k')} must be >= 1, got {top_k}")
    if budget < 0:
        raise ValueError(f"{name('budget')} must be >= 0, got {budget}")
    if fixed < 0 or (top_k is not None and fixed > top_k):
        raise ValueError(f"{name('fixed')} must be in [0, {name('top_k')}={top_k}], got {fixed}")
    if oracle_sample is not None and oracle_sample < 1:
        raise ValueError(f"{name('oracle_sample')} must be >= 1, got {oracle_sample}")
    if diversity is not None and diversity < 1:
        raise ValueError(f"{name('diversity')} must be >= 1, got {diversity}")
