"""The scoring network: [matrix embedding || config embedding || latent z] -> MLP -> score.

Lower scores mean predicted faster. WACO's split is kept: the matrix is
embedded once (`SparseConvFeaturizer`), each config is embedded on its own
(`ConfigEmbedding`), and `ScoreHead` scores the pairs, so one matrix embedding
serves every candidate config.
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import ShapeError
from ..mapper import N_FIELDS, SHARED_WIDTH
from .config import ModelConfig, PredictorConfig
from .featurizer import SparseConvFeaturizer
from .latent import KnobEncoder

COMPONENTS = ("featurizer", "config", "head", "latent")  # what `freeze` may name


class FieldEmbedding(nn.Module):
    """Embedding table over integer log2 values, linearly interpolated for fractional ones.

    Values are clamped to [0, buckets - 1]; log2 7.5 (e.g. a GPU column partition)
    mixes the rows of 7 and 8, so nearby sizes get nearby embeddings.
    """

    def __init__(self, buckets: int, dim: int):
        super().__init__()
        self.table = nn.Embedding(buckets, dim)
        nn.init.normal_(self.table.weight, std=0.3)
        self.buckets = buckets

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        value = value.clamp(0.0, self.buckets - 1.0)
        low = value.floor().long().clamp(max=self.buckets - 2) if self.buckets > 1 else value.long() * 0
        frac = (value - low.to(value.dtype)).unsqueeze(1)
        high = (low + 1).clamp(max=self.buckets - 1)
        return self.table(low) * (1.0 - frac) + self.table(high) * frac


class ConfigEmbedding(nn.Module):
    """Shared vector [log2 I, log2 K, log2 J, omega(36)] and log2 feat -> config embedding."""

    def __init__(self, config: PredictorConfig = PredictorConfig()):
        super().__init__()
        self.fields = nn.ModuleList(FieldEmbedding(config.field_buckets, config.field_dim)
                                    for _ in range(N_FIELDS))
        self.omega = nn.Linear(SHARED_WIDTH - N_FIELDS, config.omega_dim)
        width = N_FIELDS * config.field_dim + config.omega_dim + 1
        self.mlp = nn.Sequential(nn.Linear(width, config.config_dim), nn.ReLU(),
                                 nn.Linear(config.config_dim, config.config_dim), nn.ReLU())

    def forward(self, shared: torch.Tensor, log2_feat: torch.Tensor) -> torch.Tensor:
        if shared.ndim != 2 or shared.shape[1] != SHARED_WIDTH:
            raise ShapeError(f"shared coordinates of shape {tuple(shared.shape)}, expected [n, {SHARED_WIDTH}]")
        parts = [emb(shared[:, f]) for f, emb in enumerate(self.fields)]
        parts.append(self.omega(shared[:, N_FIELDS:]))
        parts.append(log2_feat.reshape(-1, 1) / 8.0)
        return self.mlp(torch.cat(parts, dim=1))


class ScoreHead(nn.Module):
    """MLP over [s_M || config embedding || z] -> one score per config."""

    def __init__(self, matrix_dim: int, config_dim: int, latent_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        layers, width = [], matrix_dim + config_dim + latent_dim
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, matrix_emb: torch.Tensor, config_emb: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        if matrix_emb.ndim == 1:  # one matrix for every config
            matrix_emb = matrix_emb.reshape(1, -1).expand(config_emb.shape[0], -1)
        x = torch.cat([matrix_emb, config_emb, z], dim=1)
        return self.mlp(x).squeeze(1)


class CostPredictor(nn.Module):
    """Featurizer, config embedding, score head and one knob encoder per platform."""

    def __init__(self, config: ModelConfig = ModelConfig()):
        super().__init__()
        self.featurizer = SparseConvFeaturizer(config.featurizer)
        self.config_embedding = ConfigEmbedding(config.predictor)
        self.head = ScoreHead(config.featurizer.out_dim, config.predictor.config_dim,
                              config.latent.latent_dim, config.predictor.hidden)
        # platform -> KnobEncoder; keys are prefixed because ModuleDict keys may not shadow
        # nn.Module attributes (a platform named "cpu" or "cuda" would).
        self.encoders = nn.ModuleDict()

    @staticmethod
    def _key(platform: str) -> str:
        return f"platform_{platform}"

    def has_encoder(self, platform: str) -> bool:
        return self._key(platform) in self.encoders

    def get_encoder(self, platform: str) -> KnobEncoder:
        return self.encoders[self._key(platform)]

    def set_encoder(self, platform: str, encoder: KnobEncoder) -> None:
        self.encoders[self._key(platform)] = encoder

    def platforms(self) -> list[str]:
        """Platforms that have a knob encoder, in insertion order."""
        prefix = self._key("")
        return [key[len(prefix):] for key in self.encoders]

    def component(self, name: str) -> list[nn.Module]:
        """Modules of a named component (see COMPONENTS)."""
        table = {"featurizer": [self.featurizer], "config": [self.config_embedding],
                 "head": [self.head], "latent": list(self.encoders.values())}
        if name not in table:
            raise ValueError(f"unknown model component {name!r}; valid: {', '.join(COMPONENTS)}")
        return table[name]

    def score(self, matrix_emb: torch.Tensor, shared: torch.Tensor, log2_feat: torch.Tensor,
              knobs: torch.Tensor, encoder: KnobEncoder) -> torch.Tensor:
        """Scores [n] of n configs (lower = predicted faster).

        `matrix_emb` is one embedding [D] shared by all configs, or one row per config [n, D].
        """
        return self.head(matrix_emb, self.config_embedding(shared, log2_feat), encoder(knobs))
