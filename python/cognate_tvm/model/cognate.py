"""The COGNATE cost model: pre-train on a source platform, fine-tune on a few target matrices.

`CognateCostModel` holds the scoring network (`CostPredictor`), a config mapper
and one knob encoder per platform seen so far, and follows the `RankingModel`
interface that every baseline of `cognate_tvm.baselines` shares:

>>> model = CognateCostModel(seed=0).fit(cpu_groups, space=cpu_space)      # doctest: +SKIP
>>> model.finetune(spade_groups, space=spade_space)                        # doctest: +SKIP
>>> best = model.top_k(matrix, spade_space.configs(), 5, space=spade_space, feat=128)  # doctest: +SKIP

(the name ``CognateModel`` is kept for the TVM MetaSchedule adapter.)
"""
from __future__ import annotations

import copy
import json
import logging
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from .. import mapper as mapper_mod
from ..data import Group, matrix_hash
from ..errors import ModelVersionError
from ..metrics import mean_log_slowdown
from ..space.base import Config, Space
from ..train import train_ranking
from .config import ModelConfig
from .featurizer import SparsePattern
from .latent import KnobEncoder, ReconstructionReport, create_encoder
from .predictor import CostPredictor

logger = logging.getLogger(__name__)

# 2: size fields through an MLP on scalars, scale-free K/cols and J/N, canonical omega.
FORMAT_VERSION = 2
WEIGHTS_FILE = "model.pt"
HPARAMS_FILE = "hparams.json"
META_FILE = "meta.json"
# The best fixed configs a model remembers from its training data (`CognateCostModel.fixed_configs`):
# FIXED_COUNT per platform, among configs timed on at least FIXED_MIN_GROUPS matrices (a config
# seen on one or two can top the list by luck), from data of at least FIXED_MIN_GROUPS matrices
# (fine-tuning on fewer, as `tune --budget` does on the one matrix, keeps what the model had).
FIXED_COUNT = 5
FIXED_MIN_GROUPS = 3


class RankingModel(ABC):
    """What every cost model (COGNATE and the baselines) offers: fit, fine-tune, score, rank."""

    name: str = ""

    @abstractmethod
    def fit(self, groups: Sequence[Group], *, space: Space) -> "RankingModel":
        """Train on source-platform measurements."""

    @abstractmethod
    def finetune(self, groups: Sequence[Group], *, space: Space) -> "RankingModel":
        """Adapt to a target platform from a few measured matrices."""

    @abstractmethod
    def predict(self, matrix: sp.csr_matrix, configs: Sequence[Config], *, space: Space,
                feat: int) -> np.ndarray:
        """Scores of `configs` on `matrix` (lower = predicted faster)."""

    def rank(self, matrix: sp.csr_matrix, configs: Sequence[Config], *, space: Space,
             feat: int) -> list[Config]:
        """`configs` ordered from predicted fastest to slowest."""
        scores = self.predict(matrix, configs, space=space, feat=feat)
        return [configs[i] for i in np.argsort(scores, kind="stable")]

    def top_k(self, matrix: sp.csr_matrix, configs: Sequence[Config], k: int, *, space: Space,
              feat: int) -> list[Config]:
        """The `k` configs predicted fastest."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return self.rank(matrix, configs, space=space, feat=feat)[:k]

    def fixed_configs(self, space: Space) -> list[Config]:
        """The configs of `space` that did best over the model's training matrices, best first
        (whatever the matrix); none for a model that keeps no such list."""
        return []


class CognateCostModel(RankingModel):
    """COGNATE: featurizer + mapped config embedding + per-platform latent code -> score.

    Parameters
    ----------
    config : ModelConfig
        Hyperparameters (saved beside the weights).
    seed : int
        Seeds weight initialisation, pair sampling and batching.
    num_threads : int or None
        If given, `torch.set_num_threads(num_threads)` at construction.
    progress : bool
        Show tqdm bars while training.
    """

    name = "cognate"

    def __init__(self, config: ModelConfig | None = None, *, seed: int = 0, num_threads: int | None = None,
                 progress: bool = False):
        self.config = config or ModelConfig()
        self.seed = int(seed)
        self.progress = progress
        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        options = {"seed": self.config.mapper_seed} if self.config.mapper == "random" else {}
        self.mapper = mapper_mod.create(self.config.mapper, **options)
        torch.manual_seed(self.seed)
        self.net = CostPredictor(self.config)
        self.net.eval()
        self.encoder_reports: dict[str, ReconstructionReport] = {}
        self.history: list[dict] = []
        self.fixed: dict[str, list[str]] = {}  # platform -> config JSON of its best fixed configs
        self._patterns: dict[str, SparsePattern] = {}
        self._embeddings: dict[str, torch.Tensor] = {}
        self._narrow_warned: set[str] = set()

    # -- parts -----------------------------------------------------------------------
    def unread_knobs(self, space: Space) -> tuple[str, ...]:
        """The names of `space`'s knobs that this model's knob encoder does not read: knobs appended to the
        space after the model was trained, on which it scores configs alike."""
        return tuple(space.knob_names[self.encoder_for(space).width:])

    def encoder_for(self, space: Space) -> KnobEncoder:
        """The knob encoder of `space`'s platform, trained on its whole space on first use."""
        platform = space.platform
        width = self.mapper.knob_width(space)
        if self.net.has_encoder(platform):
            encoder = self.net.get_encoder(platform)
            # A model fitted before knobs were appended to the space reads the knobs it knows (`inputs`).
            appended = width == len(space.knob_names) and space.first_knobs <= encoder.width < width
            if encoder.width != width and not appended:
                raise ModelVersionError(f"platform {platform!r}: the model's knob encoder takes {encoder.width} "
                                        f"knobs, {space!r} gives {width}")
            if encoder.width < width and platform not in self._narrow_warned:
                self._narrow_warned.add(platform)
                logger.warning("the model's %s knob encoder predates the knobs %s: it scores configs that "
                               "differ only in them alike", platform, space.knob_names[encoder.width:])
            return encoder
        encoder = create_encoder(self.config.knob_encoder, width, self.config.latent)
        knobs = self.mapper.knobs(space, space.configs())
        torch.manual_seed(self.seed)
        report = encoder.fit_on(knobs, seed=self.seed)
        if report is not None:
            self.encoder_reports[platform] = report
        encoder.eval()
        for p in encoder.parameters():
            p.requires_grad_(False)
        self.net.set_encoder(platform, encoder)
        return encoder

    def refit_knob_encoder(self, space: Space) -> KnobEncoder:
        """A new knob encoder of `space`'s platform fitted on all of the space's knobs, in place of the
        model's: for a model fitted before knobs were appended to the space. The codes the predictor
        reads change with it, so train the model again afterwards."""
        if self.net.has_encoder(space.platform):
            del self.net.encoders[self.net._key(space.platform)]
        self._narrow_warned.discard(space.platform)
        return self.encoder_for(space)

    def __deepcopy__(self, memo):
        """A deep copy that shares the pattern cache: a pattern depends on the matrix and the featurizer's
        `max_points` and `locality` only, never on weights, and a 1000-matrix pool's patterns take ~1.3 GB
        per copy (`cognate_tvm.transfer.recipes` copies a model per recipe). Embeddings depend on weights: copied."""
        memo[id(self._patterns)] = self._patterns
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        for name, value in self.__dict__.items():
            setattr(clone, name, copy.deepcopy(value, memo))
        return clone

    def adopt_patterns(self, other: "CognateCostModel") -> None:
        """Share `other`'s pattern cache (both then fill one), so that a second model of the same
        matrices does not bin each of them again."""
        mine, theirs = self.net.featurizer.config, other.net.featurizer.config
        if (mine.max_points, mine.locality) != (theirs.max_points, theirs.locality):
            raise ValueError(f"cannot share patterns (max_points {theirs.max_points}, locality {theirs.locality}) "
                             f"with a featurizer of max_points {mine.max_points}, locality {mine.locality}")
        other._patterns.update(self._patterns)
        self._patterns = other._patterns

    def with_locality_stats(self) -> "CognateCostModel":
        """A copy whose featurizer also reads each matrix's `locality_profile`. The new inputs of the
        stats MLP start at zero weight, so the copy scores exactly as this model until it is trained."""
        if self.config.featurizer.locality:
            raise ValueError("this model already reads locality statistics")
        wider = type(self)(self.config.replace(**{"featurizer.locality": True}), seed=self.seed,
                           progress=self.progress)
        wider.mapper, wider.fixed = self.mapper, copy.deepcopy(self.fixed)
        wider.encoder_reports, wider.history = dict(self.encoder_reports), list(self.history)
        for platform in self.net.platforms():
            wider.net.set_encoder(platform, copy.deepcopy(self.net.get_encoder(platform)))
        state = self.net.state_dict()
        first = "featurizer.stats_mlp.0.weight"
        grown = torch.zeros_like(wider.net.state_dict()[first])
        grown[:, :state[first].shape[1]] = state[first]
        wider.net.load_state_dict({**state, first: grown})
        wider.net.eval()
        return wider

    def pattern(self, matrix: sp.csr_matrix, key: str | None = None) -> SparsePattern:
        key = key or matrix_hash(matrix)
        if key not in self._patterns:
            self._patterns[key] = self.net.featurizer.pattern(matrix)
        return self._patterns[key]

    def embedding(self, matrix: sp.csr_matrix, *, key: str | None = None, grad: bool = False) -> torch.Tensor:
        """Matrix embedding s_M; cached per content hash unless gradients are wanted."""
        key = key or matrix_hash(matrix)
        if grad:
            return self.net.featurizer(self.pattern(matrix, key))
        if key not in self._embeddings:
            with torch.no_grad():
                self._embeddings[key] = self.net.featurizer(self.pattern(matrix, key))
        return self._embeddings[key]

    def clear_embedding_cache(self) -> None:
        """Forget cached embeddings (call after the featurizer's weights change)."""
        self._embeddings.clear()

    def inputs(self, space: Space, configs: Sequence[Config], *, rows: int, cols: int,
               feat: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(shared coords, knobs, log2 feat) tensors of `configs`."""
        shared, knobs = self.mapper(space, configs, rows=rows, cols=cols, feat=feat)
        if self.net.has_encoder(space.platform):
            knobs = knobs[:, :self.encoder_for(space).width]
        log2_feat = torch.full((len(configs),), float(np.log2(max(feat, 1))))
        return torch.from_numpy(shared), torch.from_numpy(knobs), log2_feat

    # -- best fixed configs ------------------------------------------------------------
    def remember_fixed(self, groups: Sequence[Group], space: Space,
                       among: Sequence[Config] | None = None) -> list[Config]:
        """Keep `space`'s best fixed configs of `groups` (lowest mean ln(time / the matrix's
        best) over the matrices that timed them), only configs of `among` if given (e.g. the
        candidates of the data's thread count); `groups` of fewer than FIXED_MIN_GROUPS
        matrices leave the kept list as it is."""
        if len({g.name for g in groups}) >= FIXED_MIN_GROUPS:
            scores = mean_log_slowdown([g.times_by_config() for g in groups], min_tables=FIXED_MIN_GROUPS)
            if among is not None:
                allowed = {c.to_json() for c in among}
                scores = {c: v for c, v in scores.items() if c in allowed}
            self.fixed[space.platform] = sorted(scores, key=scores.get)[:FIXED_COUNT]
        return self.fixed_configs(space)

    def fixed_configs(self, space: Space) -> list[Config]:
        return [space.config_from_json(text) for text in self.fixed.get(space.platform, [])]

    # -- training ----------------------------------------------------------------------
    def fit(self, groups: Sequence[Group], *, space: Space, val_groups: Sequence[Group] | None = None,
            epochs: int | None = None) -> "CognateCostModel":
        """Pre-train every part (the featurizer too if `train.train_featurizer`) on `groups`."""
        t = self.config.train
        frozen = {"latent"} | (set() if t.train_featurizer else {"featurizer"})
        self.history += train_ranking(self, groups, space=space, epochs=t.epochs if epochs is None else epochs,
                                      lr=t.lr, frozen=frozen, val_groups=val_groups, phase="pretrain")
        self.remember_fixed(groups, space)
        return self

    def finetune(self, groups: Sequence[Group], *, space: Space, freeze: Sequence[str] | None = None,
                 epochs: int | None = None, lr: float | None = None,
                 val_groups: Sequence[Group] | None = None) -> "CognateCostModel":
        """Fine-tune on target `groups`; `freeze` names components kept fixed (default from config).

        The target platform's knob encoder is trained on its whole space first
        (unsupervised); it stays frozen like every encoder.
        """
        t = self.config.train
        self.encoder_for(space)
        if not groups:
            logger.info("finetune: no target measurements; only the %s knob encoder was trained", space.platform)
            return self
        frozen = set(t.finetune_freeze if freeze is None else freeze) | {"latent"}
        self.history += train_ranking(self, groups, space=space,
                                      epochs=t.finetune_epochs if epochs is None else epochs,
                                      lr=t.finetune_lr if lr is None else lr, frozen=frozen,
                                      val_groups=val_groups, phase="finetune", anchor=t.finetune_anchor)
        self.remember_fixed(groups, space)
        return self

    # -- inference -----------------------------------------------------------------------
    def predict(self, matrix: sp.csr_matrix, configs: Sequence[Config], *, space: Space,
                feat: int) -> np.ndarray:
        if not configs:
            return np.zeros(0, dtype=np.float32)
        encoder = self.encoder_for(space)
        self.net.eval()
        with torch.no_grad():
            emb = self.embedding(matrix)
            shared, knobs, log2_feat = self.inputs(space, configs, rows=matrix.shape[0], cols=matrix.shape[1],
                                                   feat=feat)
            return self.net.score(emb, shared, log2_feat, knobs, encoder).numpy().astype(np.float64)

    # -- persistence ---------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the model to directory `path`: weights, hyperparameters, format version."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        encoders = {name: {"kind": self.net.get_encoder(name).kind, "width": self.net.get_encoder(name).width}
                    for name in self.net.platforms()}
        meta = {"format_version": FORMAT_VERSION, "class": type(self).__name__, "seed": self.seed,
                "mapper": self.mapper.to_dict(), "encoders": encoders,
                "encoder_reports": {k: vars(v) for k, v in self.encoder_reports.items()},
                "fixed_configs": self.fixed}
        torch.save(self.net.state_dict(), path / WEIGHTS_FILE)
        (path / HPARAMS_FILE).write_text(json.dumps(self.config.to_dict(), indent=2, sort_keys=True))
        (path / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, *, num_threads: int | None = None) -> "CognateCostModel":
        """Read a model written by `save`; ModelVersionError if its format version differs."""
        path = Path(path)
        meta_path = path / META_FILE
        if not meta_path.is_file():
            raise FileNotFoundError(f"no saved model in {path} (missing {META_FILE})")
        meta = json.loads(meta_path.read_text())
        version = meta.get("format_version")
        if version != FORMAT_VERSION:
            raise ModelVersionError(f"{path}: model format version {version!r}, this code reads {FORMAT_VERSION}")
        config = ModelConfig.from_dict(json.loads((path / HPARAMS_FILE).read_text()))
        model = cls(config, seed=meta["seed"], num_threads=num_threads)
        model.mapper = mapper_mod.from_dict(meta["mapper"])
        for name, enc in meta["encoders"].items():
            encoder = create_encoder(enc["kind"], enc["width"], config.latent)
            for p in encoder.parameters():
                p.requires_grad_(False)
            model.net.set_encoder(name, encoder.eval())
        model.encoder_reports = {k: ReconstructionReport(**v) for k, v in meta["encoder_reports"].items()}
        # a model saved without the list has no best fixed configs
        model.fixed = {k: list(v) for k, v in meta.get("fixed_configs", {}).items()}
        state = torch.load(path / WEIGHTS_FILE, map_location="cpu", weights_only=True)
        model.net.load_state_dict(state)
        model.net.eval()
        return model
