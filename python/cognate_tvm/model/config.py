"""Hyperparameters of the cost model, as frozen dataclasses saved beside the weights.

The defaults are the shipped models' settings (docs/pretraining.md); they are starting points to
be tuned on validation matrices only.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..errors import ModelVersionError


@dataclass(frozen=True)
class FeaturizerConfig:
    """Multi-scale sparse-convolution featurizer."""

    stem_channels: int = 32
    stage_channels: tuple[int, ...] = (32, 32, 48, 48, 64, 64)  # one stride-2 stage each
    stats_hidden: int = 32          # MLP over (log2 rows, log2 cols, log2 nnz, binning level)
    out_dim: int = 128              # the matrix embedding s_M
    max_points: int = 1 << 16       # larger patterns are binned 2x2 until they fit
    backend: str = "auto"           # "auto", "torch" or "torchsparse"
    # also feed the stats MLP `cognate_tvm.matrix.locality_profile` (column-access locality that
    # binning hides at 100k+ columns); off in the shipped models (docs/transfer.md, the locality probe)
    locality: bool = False


@dataclass(frozen=True)
class LatentConfig:
    """Per-platform autoencoder over the platform-only knobs."""

    latent_dim: int = 64
    hidden: int = 64
    epochs: int = 400
    lr: float = 1e-2


@dataclass(frozen=True)
class PredictorConfig:
    """Config embedding and scoring MLP."""

    field_dim: int = 32             # MLP over the size fields (log2 I, K, J, K/cols, J/N, N)
    omega_dim: int = 32
    config_dim: int = 64
    hidden: tuple[int, ...] = (256, 128)


@dataclass(frozen=True)
class TrainConfig:
    """Pre-training and fine-tuning loops."""

    epochs: int = 30
    lr: float = 1e-3
    weight_decay: float = 1e-5
    batch_matrices: int = 8
    pairs_per_matrix: int = 256
    margin: float = 1.0
    train_featurizer: bool = True   # pre-training updates the featurizer (else embeddings are cached)
    # "pairwise" (margin ranking), "slowdown" (regress log t / t_best) or "listwise" (ListNet: cross-entropy
    # between the softmax of the scores and a target that puts its weight on each matrix's fastest configs)
    loss: str = "pairwise"
    listwise_temperature: float = 0.1  # listwise target weight of a config: (t_best / t) ** (1 / temperature)
    pair_weighting: str = "uniform"  # "uniform", or "log_ratio": pairs weighted by |log t_a/t_b| (capped)
    select_metric: str = "pair_accuracy"  # validation picks the epoch on "pair_accuracy" or "top1_fraction"
    finetune_epochs: int = 60
    finetune_lr: float = 5e-4
    finetune_freeze: tuple[str, ...] = ("featurizer",)
    # L2-SP (Li et al., ICML 2018): fine-tuning adds anchor * sum (w - w_pretrained)^2 over the trained
    # weights, so that what 5 target matrices do not show keeps its pre-trained value
    finetune_anchor: float = 0.0


@dataclass(frozen=True)
class ModelConfig:
    """Everything that defines a cost model: its parts, and how the configs are mapped."""

    featurizer: FeaturizerConfig = field(default_factory=FeaturizerConfig)
    latent: LatentConfig = field(default_factory=LatentConfig)
    predictor: PredictorConfig = field(default_factory=PredictorConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    mapper: str = "standard"        # see cognate_tvm.mapper.create
    mapper_seed: int = 0            # only used by the "random" mapper
    knob_encoder: str = "latent"    # "latent" (autoencoder), "pad" (raw knobs, zero-padded), "none"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        parts = {"featurizer": FeaturizerConfig, "latent": LatentConfig,
                 "predictor": PredictorConfig, "train": TrainConfig}
        kwargs = {}
        for name, value in data.items():
            if name in parts:
                kwargs[name] = _build(parts[name], value)
            elif name in {f.name for f in dataclasses.fields(cls)}:
                kwargs[name] = value
            else:
                raise ModelVersionError(f"unknown model hyperparameter {name!r}")
        return cls(**kwargs)

    def replace(self, **changes) -> "ModelConfig":
        """A copy with top-level fields or dotted sub-fields ("train.epochs") changed."""
        top, nested = {}, {}
        for key, value in changes.items():
            part, _, sub = key.partition(".")
            if sub:
                nested.setdefault(part, {})[sub] = value
            else:
                top[key] = value
        for part, sub in nested.items():
            top[part] = dataclasses.replace(top.get(part, getattr(self, part)), **sub)
        return dataclasses.replace(self, **top)


def _build(cls, data: dict):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ModelVersionError(f"unknown {cls.__name__} hyperparameters {sorted(unknown)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
