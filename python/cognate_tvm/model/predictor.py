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


# Fixed scales that bring the size fields (log2 I, log2 K, log2 J, log2 K/cols,
# log2 J/N) and log2 N to roughly [-1, 1]; they are numbers, not categories, so a
# size never seen in training lands between the sizes that were (I = 4 between
# I = 2 and I = 8), which a per-value lookup table cannot do.
FIELD_SCALE = (8.0, 20.0, 7.0, 10.0, 5.0)
FEAT_SCALE = 8.0


class ConfigEmbedding(nn.Module):
    """Shared vector [size fields, omega(36)] and log2 N -> config embedding.

    The size fields and log2 N go through an MLP on scalars; omega through a
    linear map; both are concatenated and mixed by a second MLP.
    """

    def __init__(self, config: PredictorConfig = PredictorConfig()):
        super().__init__()
        self.register_buffer("scale", torch.tensor(FIELD_SCALE + (FEAT_SCALE,), dtype=torch.float32),
                             persistent=False)
        self.fields = nn.Sequential(nn.Linear(N_FIELDS + 1, config.field_dim), nn.ReLU(),
                                    nn.Linear(config.field_dim, config.field_dim), nn.ReLU())
        self.omega = nn.Linear(SHARED_WIDTH - N_FIELDS, config.omega_dim)
        width = config.field_dim + config.omega_dim
        self.mlp = nn.Sequential(nn.Linear(width, config.config_dim), nn.ReLU(),
                                 nn.Linear(config.config_dim, config.config_dim), nn.ReLU())

    def forward(self, shared: torch.Tensor, log2_feat: torch.Tensor) -> torch.Tensor:
        if shared.ndim != 2 or shared.shape[1] != SHARED_WIDTH:
            raise ShapeError(f"shared coordinates of shape {tuple(shared.shape)}, expected [n, {SHARED_WIDTH}]")
        scalars = torch.cat([shared[:, :N_FIELDS], log2_feat.reshape(-1, 1)], dim=1) / self.scale
        parts = [self.fields(scalars), self.omega(shared[:, N_FIELDS:])]
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

    components: tuple[str, ...] = COMPONENTS  # what `component` (and a trainer's `frozen`) may name

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
