"""The comparison points of the paper, all behind the `RankingModel` interface.

Each takes the same calls as COGNATE: ``fit(source groups, space=source space)``,
``finetune(target groups, space=target space)``, ``predict`` / ``rank`` / ``top_k``.

- ``"cognate"``: the full method (`CognateCostModel`).
- ``"no_transfer"``: the COGNATE network trained on the target data alone
  (`fit` on the source is ignored; `finetune` trains from scratch, every part).
- ``"zero_shot"``: the source model applied to the target unchanged; `finetune`
  only trains the target platform's knob encoder (unsupervised, no runtimes).
- ``"waco_fa"``: WACO with feature augmentation: no mapper (raw config
  parameters zero-padded to a common width), no knob encoder; pre-trained and
  fine-tuned like COGNATE.
- ``"waco_fm"``: WACO with feature mapping: the standard mapper, but the
  platform knobs are fed raw (zero-padded) instead of through latent encoders.
- ``"random_mapping"``: the ablation: COGNATE with the seeded random-permutation
  mapper (the roles of I, K, J and of the loops shuffled; `ModelConfig.mapper_seed`).
- ``"xgboost"``: an XGBoost ranker (``rank:pairwise``) over matrix statistics
  (with ``locality=True`` also the matrix's `locality_profile`),
  log2 feat, the mapped shared coordinates and the zero-padded knobs;
  `finetune` continues boosting from the source model on the target data.
- ``"best_fixed"``: one global order of configs, ignoring the matrix: each
  config's mean log slowdown against the best config of each matrix where it
  was measured (`fit` on the source, `finetune` re-chosen on the target
  matrices); unseen configs go last. Its top-1 is the best fixed config.
- ``"random"``: a seeded random order.
"""
from __future__ import annotations

import logging
from typing import Hashable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from . import mapper as mapper_mod
from .data import Group, matrix_hash
from .errors import NotFittedError, UnknownKindError
from .matrix import locality_profile, matrix_stats
from .metrics import mean_log_slowdown
from .model.cognate import CognateCostModel, RankingModel
from .model.config import ModelConfig
from .space.base import Config, Space

logger = logging.getLogger(__name__)


class NoTransferModel(RankingModel):
    """COGNATE's network trained on the target platform only."""

    name = "no_transfer"

    def __init__(self, config: ModelConfig | None = None, *, seed: int = 0, progress: bool = False):
        self.config, self.seed, self.progress = config or ModelConfig(), seed, progress
        self.model: CognateCostModel | None = None

    def fit(self, groups, *, space):
        return self  # no source data on purpose

    def finetune(self, groups, *, space):
        self.model = CognateCostModel(self.config, seed=self.seed, progress=self.progress)
        self.model.fit(groups, space=space)
        return self

    def predict(self, matrix, configs, *, space, feat):
        if self.model is None:
            raise NotFittedError("NoTransferModel: call finetune(target groups) before predict")
        return self.model.predict(matrix, configs, space=space, feat=feat)


class ZeroShotModel(RankingModel):
    """The source-trained COGNATE model applied to the target without any target runtime."""

    name = "zero_shot"

    def __init__(self, config: ModelConfig | None = None, *, seed: int = 0, progress: bool = False):
        self.model = CognateCostModel(config, seed=seed, progress=progress)

    def fit(self, groups, *, space):
        self.model.fit(groups, space=space)
        return self

    def finetune(self, groups, *, space):
        self.model.encoder_for(space)  # unsupervised: needs the space, not the runtimes
        return self

    def predict(self, matrix, configs, *, space, feat):
        return self.model.predict(matrix, configs, space=space, feat=feat)


class XGBoostRanker(RankingModel):
    """`rank:pairwise` gradient boosting on matrix statistics + mapped config features."""

    name = "xgboost"

    def __init__(self, *, seed: int = 0, rounds: int = 200, finetune_rounds: int = 100, knob_width: int = 16,
                 max_depth: int = 6, learning_rate: float = 0.1, num_threads: int | None = None,
                 locality: bool = False):
        self.seed, self.rounds, self.finetune_rounds = seed, rounds, finetune_rounds
        self.locality = locality
        self.knob_width = knob_width
        self.params = {"objective": "rank:pairwise", "max_depth": max_depth, "eta": learning_rate,
                       "seed": seed, "verbosity": 0}
        if num_threads is not None:
            self.params["nthread"] = int(num_threads)
        self.mapper = mapper_mod.StandardMapper()
        self.booster = None
        self._stats: dict[str, np.ndarray] = {}

    def features(self, matrix: sp.csr_matrix, configs: Sequence[Config], *, space: Space, feat: int) -> np.ndarray:
        key = matrix_hash(matrix)
        if key not in self._stats:
            stats = matrix_stats(matrix).as_vector()
            self._stats[key] = np.r_[stats, locality_profile(matrix)] if self.locality else stats
        shared, knobs = self.mapper(space, configs, rows=matrix.shape[0], cols=matrix.shape[1], feat=feat)
        padded = np.zeros((len(configs), self.knob_width), dtype=np.float32)
        padded[:, :min(knobs.shape[1], self.knob_width)] = knobs[:, :self.knob_width]
        stats = np.broadcast_to(self._stats[key], (len(configs), self._stats[key].size))
        log2_feat = np.full((len(configs), 1), np.log2(max(feat, 1)), dtype=np.float32)
        return np.hstack([stats, log2_feat, shared, padded])

    def _dmatrix(self, groups: Sequence[Group], space: Space):
        import xgboost as xgb

        xs, labels, qids = [], [], []
        for q, group in enumerate(groups):
            group = group.ok()
            if len(group.configs) < 2:
                continue
            xs.append(self.features(group.matrix, group.configs, space=space, feat=group.feat))
            # relevance: the fastest config gets the highest label (dense rank of -time)
            _, inverse = np.unique(group.times_ms, return_inverse=True)
            labels.append(inverse.max() - inverse)
            qids.append(np.full(len(group.configs), q))
        if not xs:
            raise ValueError("XGBoostRanker: no group with at least 2 successful configs")
        return xgb.DMatrix(np.vstack(xs), label=np.concatenate(labels), qid=np.concatenate(qids))

    def fit(self, groups, *, space):
        import xgboost as xgb

        self.booster = xgb.train(self.params, self._dmatrix(groups, space), num_boost_round=self.rounds)
        return self

    def finetune(self, groups, *, space):
        import xgboost as xgb

        if not groups:
            return self
        self.booster = xgb.train(self.params, self._dmatrix(groups, space), num_boost_round=self.finetune_rounds,
                                 xgb_model=self.booster)
        return self

    def predict(self, matrix, configs, *, space, feat):
        import xgboost as xgb

        if self.booster is None:
            raise NotFittedError("XGBoostRanker: call fit or finetune before predict")
        if not configs:
            return np.zeros(0)
        x = self.features(matrix, configs, space=space, feat=feat)
        return -self.booster.predict(xgb.DMatrix(x)).astype(np.float64)


class RandomRanker(RankingModel):
    """Random scores, seeded by (seed, matrix content, feat): the floor every model must beat."""

    name = "random"

    def __init__(self, *, seed: int = 0):
        self.seed = seed

    def fit(self, groups, *, space):
        return self

    def finetune(self, groups, *, space):
        return self

    def predict(self, matrix, configs, *, space, feat):
        rng = np.random.default_rng([self.seed, int(matrix_hash(matrix)[:12], 16), int(feat)])
        return rng.random(len(configs))


def best_fixed_leave_one_out(tables: Mapping[Hashable, Mapping[Hashable, float | None]]) -> dict:
    """{name: the best fixed config of the other tables} (None when no config was timed in all of them).

    Each table (config -> time) is left out in turn; the config with the lowest
    `mean_log_slowdown` over the rest, among the configs timed in every one of them,
    is its pick: the best fixed config as a user who had measured only the other
    matrices would choose it.
    """
    picks = {}
    for name in tables:
        others = [t for other, t in tables.items() if other != name]
        scores = mean_log_slowdown(others, min_tables=len(others)) if others else {}
        picks[name] = min(scores, key=scores.get) if scores else None
    return picks


class BestFixedRanker(RankingModel):
    """The best fixed config (and the order behind it), chosen on training matrices.

    A config's score is its mean ``log(t / t_best)`` over the groups that
    measured it, where ``t_best`` is that group's fastest time: the config that
    is closest to each matrix's best on average comes first. Configs seen in
    fewer than `min_groups` groups, or never, rank after every seen one.
    """

    name = "best_fixed"

    def __init__(self, *, min_groups: int = 1):
        self.min_groups = int(min_groups)
        self.scores: dict[str, float] = {}

    def _fit(self, groups: Sequence[Group]) -> "BestFixedRanker":
        self.scores = mean_log_slowdown([g.times_by_config() for g in groups], min_tables=self.min_groups)
        if not self.scores:
            raise ValueError("BestFixedRanker: no config measured in enough groups")
        return self

    def fit(self, groups, *, space):
        return self._fit(groups)

    def finetune(self, groups, *, space):
        return self._fit(groups) if groups else self

    def best(self) -> str:
        """JSON of the best fixed config."""
        return min(self.scores, key=self.scores.get)

    def predict(self, matrix, configs, *, space, feat):
        unseen = max(self.scores.values(), default=0.0) + 1.0
        return np.array([self.scores.get(c.to_json(), unseen) for c in configs], dtype=np.float64)


def _cognate_variant(name: str, mapper: str, knob_encoder: str):
    def build(*, config: ModelConfig | None = None, seed: int = 0, progress: bool = False, **_):
        config = (config or ModelConfig()).replace(mapper=mapper, knob_encoder=knob_encoder)
        model = CognateCostModel(config, seed=seed, progress=progress)
        model.name = name
        return model
    return build


_KINDS = {
    "cognate": lambda *, config=None, seed=0, progress=False, **_: CognateCostModel(config, seed=seed,
                                                                                   progress=progress),
    "no_transfer": lambda *, config=None, seed=0, progress=False, **_: NoTransferModel(config, seed=seed,
                                                                                       progress=progress),
    "zero_shot": lambda *, config=None, seed=0, progress=False, **_: ZeroShotModel(config, seed=seed,
                                                                                   progress=progress),
    "waco_fa": _cognate_variant("waco_fa", "none", "none"),
    "waco_fm": _cognate_variant("waco_fm", "standard", "pad"),
    "random_mapping": _cognate_variant("random_mapping", "random", "latent"),
    "xgboost": lambda *, seed=0, xgb_options=None, **_: XGBoostRanker(seed=seed, **(xgb_options or {})),
    "best_fixed": lambda **_: BestFixedRanker(),
    "random": lambda *, seed=0, **_: RandomRanker(seed=seed),
}
KINDS = tuple(_KINDS)


def create(kind: str, *, config: ModelConfig | None = None, seed: int = 0, progress: bool = False,
           xgb_options: dict | None = None) -> RankingModel:
    """A ranking model by kind (see the module docstring); `config` applies to the neural ones."""
    if kind not in _KINDS:
        raise UnknownKindError("baseline", kind, list(_KINDS))
    return _KINDS[kind](config=config, seed=seed, progress=progress, xgb_options=xgb_options)
