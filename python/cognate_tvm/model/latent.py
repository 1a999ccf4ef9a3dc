"""Platform-only knobs -> a fixed-size code z: one autoencoder per platform.

Each platform has its own knobs (CPU: vector width, unroll, ...; SPADE: barrier,
bypass; GPU: threads, vector width, ...). The autoencoder of a platform is
trained without any runtime, on the knob vectors of that platform's whole space,
so its encoder gives every config a code of the same width (64 by default)
whatever the platform. The predictor reads z beside the shared coordinates.

Encoders for the ablations share the interface (`KnobEncoder`): "pad" (WACO+FM:
the raw, standardized knobs zero-padded to the latent width) and "none" (no
knob information at all).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..errors import ShapeError, UnknownKindError
from .config import LatentConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconstructionReport:
    """How well an autoencoder reproduces its space's knobs.

    ``exact_fraction``: share of distinct knob vectors whose every knob, snapped to the
    nearest value that knob takes in the space, equals the original.
    """

    mse: float
    exact_fraction: float
    vectors: int


class KnobEncoder(nn.Module):
    """Base: knobs [n, width] (raw units) -> z [n, latent_dim]."""

    kind = ""

    def __init__(self, width: int, latent_dim: int):
        super().__init__()
        self.width = int(width)
        self.latent_dim = int(latent_dim)
        # Standardization of the raw knobs, set by `fit_on`.
        self.register_buffer("mean", torch.zeros(self.width))
        self.register_buffer("std", torch.ones(self.width))

    def _normalize(self, knobs: torch.Tensor) -> torch.Tensor:
        if knobs.ndim != 2 or knobs.shape[1] != self.width:
            raise ShapeError(f"knobs of shape {tuple(knobs.shape)}, expected [n, {self.width}]")
        return (knobs - self.mean) / self.std

    def _set_scale(self, knobs: np.ndarray) -> None:
        if knobs.size:
            self.mean.copy_(torch.as_tensor(knobs.mean(0)))
            self.std.copy_(torch.as_tensor(np.maximum(knobs.std(0), 1e-6)))

    def fit_on(self, knobs: np.ndarray, *, seed: int = 0) -> ReconstructionReport | None:
        """Fit to the whole space's knob matrix (unsupervised). Returns a report if it reconstructs."""
        knobs = np.asarray(knobs, dtype=np.float32)
        if knobs.size:
            self._set_scale(knobs.reshape(-1, self.width))
        return None


class LatentAutoencoder(KnobEncoder):
    """MLP autoencoder: standardized knobs -> tanh code of `latent_dim` -> knobs."""

    kind = "latent"

    def __init__(self, width: int, config: LatentConfig = LatentConfig()):
        super().__init__(width, config.latent_dim)
        self.config = config
        hidden = config.hidden
        self.encoder = nn.Sequential(nn.Linear(max(width, 1), hidden), nn.ReLU(),
                                     nn.Linear(hidden, config.latent_dim), nn.Tanh())
        self.decoder = nn.Sequential(nn.Linear(config.latent_dim, hidden), nn.ReLU(),
                                     nn.Linear(hidden, max(width, 1)))

    def forward(self, knobs: torch.Tensor) -> torch.Tensor:
        if self.width == 0:
            return knobs.new_zeros((knobs.shape[0], self.latent_dim))
        return self.encoder(self._normalize(knobs))

    def reconstruct(self, knobs: torch.Tensor) -> torch.Tensor:
        """Knobs -> code -> knobs, in raw units."""
        if self.width == 0:
            return knobs
        return self.decoder(self.forward(knobs)) * self.std + self.mean

    def fit_on(self, knobs: np.ndarray, *, seed: int = 0) -> ReconstructionReport:
        knobs = np.asarray(knobs, dtype=np.float32)
        if self.width == 0 or knobs.size == 0:
            return ReconstructionReport(mse=0.0, exact_fraction=1.0, vectors=min(len(knobs), 1))
        knobs = np.unique(knobs.reshape(-1, self.width), axis=0)
        self._set_scale(knobs)
        torch.manual_seed(seed)
        for module in (self.encoder, self.decoder):
            for layer in module:
                if isinstance(layer, nn.Linear):
                    layer.reset_parameters()
        x = torch.as_tensor(knobs)
        target = self._normalize(x)
        params = list(self.encoder.parameters()) + list(self.decoder.parameters())
        opt = torch.optim.Adam(params, lr=self.config.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.config.epochs)
        self.train()
        for _ in range(self.config.epochs):
            opt.zero_grad()
            loss = nn.functional.mse_loss(self.decoder(self.encoder(target)), target)
            loss.backward()
            opt.step()
            sched.step()
        self.eval()
        report = self.report(knobs)
        logger.info("latent autoencoder (%d knobs, %d vectors): mse %.2e, exact %.1f%%",
                    self.width, report.vectors, report.mse, 100 * report.exact_fraction)
        return report

    @torch.no_grad()
    def report(self, knobs: np.ndarray) -> ReconstructionReport:
        """Reconstruction error and exact-recovery share on `knobs` (the space's knob matrix)."""
        knobs = np.unique(np.asarray(knobs, dtype=np.float32).reshape(-1, self.width), axis=0)
        recon = self.reconstruct(torch.as_tensor(knobs)).numpy()
        mse = float(np.mean(((recon - knobs) / self.std.numpy()) ** 2)) if knobs.size else 0.0
        snapped = np.empty_like(recon)
        for col in range(self.width):
            values = np.unique(knobs[:, col])
            snapped[:, col] = values[np.abs(recon[:, col, None] - values[None, :]).argmin(1)]
        exact = float(np.mean(np.all(snapped == knobs, axis=1))) if len(knobs) else 1.0
        return ReconstructionReport(mse=mse, exact_fraction=exact, vectors=len(knobs))


class PaddedKnobs(KnobEncoder):
    """No encoder: standardized raw knobs zero-padded (or cut) to `latent_dim` (WACO+FM)."""

    kind = "pad"

    def forward(self, knobs: torch.Tensor) -> torch.Tensor:
        x = self._normalize(knobs)[:, :self.latent_dim]
        return nn.functional.pad(x, (0, self.latent_dim - x.shape[1]))


class NoKnobs(KnobEncoder):
    """No knob information: z = 0."""

    kind = "none"

    def forward(self, knobs: torch.Tensor) -> torch.Tensor:
        return knobs.new_zeros((knobs.shape[0], self.latent_dim))


_ENCODERS = {"latent": LatentAutoencoder, "pad": PaddedKnobs, "none": NoKnobs}
ENCODER_KINDS = tuple(_ENCODERS)


def create_encoder(kind: str, width: int, config: LatentConfig = LatentConfig()) -> KnobEncoder:
    """A knob encoder of `kind` ("latent", "pad", "none") for knob vectors of `width`."""
    if kind not in _ENCODERS:
        raise UnknownKindError("knob encoder", kind, list(_ENCODERS))
    if kind == "latent":
        return LatentAutoencoder(width, config)
    return _ENCODERS[kind](width, config.latent_dim)
