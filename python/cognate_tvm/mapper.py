"""Configuration mappers (COGNATE's F_M): a platform config -> model inputs.

A mapper turns configs of any `Space` into two float32 arrays:

- ``shared``: ``[log2 I, log2 K, log2 J, log2 (K / cols), log2 (J / N), omega
  (6x6, row-major)]``, width `SHARED_WIDTH` = 41, the homogeneous part every
  platform shares. Sizes are numbers (the model feeds them to an MLP), with
  scale-free forms beside them, and omega is that of the canonical order
  (`SharedCoords.canonical`: one-iteration loops moved outermost);
- ``knobs``: the platform-only knobs, width ``len(space.knob_names)``, that the
  platform's latent autoencoder compresses.

Variants (``create(kind)``):

- ``"standard"``: the space's own mapping (`Space.shared_coords`,
  `Space.platform_knobs`); on a platform whose configs are already in the
  shared space (CPU) it is the identity on the shared coordinates.
- ``"random"``: the standard mapping followed by a seeded, fixed shuffle of
  the roles of (I, K, J) and of the six loops in omega: the ablation that
  asks whether the *right* correspondence matters, not just a common width.
- ``"none"``: no mapping at all: the config's raw parameters (its JSON fields,
  flattened to numbers) zero-padded into a vector of `SHARED_WIDTH`, and no
  platform knobs: what WACO with feature augmentation sees.

Mappers only use the Space interface; they never look at a platform's name.
"""
from __future__ import annotations

import math
import zlib
from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from .errors import InvalidConfigError, UnknownKindError
from .space.base import LOOPS, Config, Space

N_FIELDS = 5  # log2 I, log2 K, log2 J, log2 (K / cols), log2 (J / N)
SHARED_WIDTH = N_FIELDS + len(LOOPS) * len(LOOPS)


class ConfigMapper(ABC):
    """Maps configs of a space into the model's (shared, knobs) inputs."""

    kind: str = ""

    @abstractmethod
    def shared(self, space: Space, configs: Sequence[Config], *, rows: int, cols: int,
               feat: int) -> np.ndarray:
        """float32 [len(configs), SHARED_WIDTH]."""

    @abstractmethod
    def knobs(self, space: Space, configs: Sequence[Config]) -> np.ndarray:
        """float32 [len(configs), knob_width(space)]."""

    @abstractmethod
    def knob_width(self, space: Space) -> int:
        """Width of `knobs` for `space`."""

    def __call__(self, space: Space, configs: Sequence[Config], *, rows: int, cols: int,
                 feat: int) -> tuple[np.ndarray, np.ndarray]:
        return (self.shared(space, configs, rows=rows, cols=cols, feat=feat),
                self.knobs(space, configs))

    def to_dict(self) -> dict:
        """JSON form, so a saved model rebuilds the same mapper."""
        return {"kind": self.kind}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()})"


def _standard_shared(space: Space, configs: Sequence[Config], rows: int, cols: int,
                     feat: int) -> np.ndarray:
    out = np.empty((len(configs), SHARED_WIDTH), dtype=np.float32)
    log2_cols, log2_feat = math.log2(max(1, cols)), math.log2(max(1, feat))
    for n, config in enumerate(configs):
        coords = space.shared_coords(config, rows=rows, cols=cols, feat=feat).canonical(cols=cols, feat=feat)
        out[n, :N_FIELDS] = (coords.log2_i, coords.log2_k, coords.log2_j,
                             coords.log2_k - log2_cols, coords.log2_j - log2_feat)
        out[n, N_FIELDS:] = coords.omega().ravel()
    return out


def _knob_matrix(space: Space, configs: Sequence[Config]) -> np.ndarray:
    width = len(space.knob_names)
    if not configs:
        return np.zeros((0, width), dtype=np.float32)
    knobs = space.knob_matrix(configs).reshape(len(configs), -1)
    if knobs.shape[1] != width:
        raise InvalidConfigError(f"{space!r}: platform_knobs gives {knobs.shape[1]} values, "
                                 f"knob_names has {width}")
    return knobs


class StandardMapper(ConfigMapper):
    """The space's own mapping into shared coordinates plus its platform-only knobs."""

    kind = "standard"

    def shared(self, space, configs, *, rows, cols, feat):
        return _standard_shared(space, configs, rows, cols, feat)

    def knobs(self, space, configs):
        return _knob_matrix(space, configs)

    def knob_width(self, space):
        return len(space.knob_names)


class RandomPermutationMapper(ConfigMapper):
    """Standard mapping with the roles of (I, K, J) and of the six loops shuffled (seeded).

    Loop ``LOOPS[l]`` of the standard mapping is reported as loop
    ``LOOPS[loop_perm[l]]``, and field ``f`` of the `N_FIELDS` size fields is
    written to position ``field_perm[f]``. Identity permutations are redrawn, so the
    mapping always differs from the standard one.
    """

    kind = "random"

    def __init__(self, *, seed: int = 0):
        self.seed = int(seed)
        rng = np.random.default_rng([self.seed, 0x5EED])
        self.field_perm = self._non_identity(rng, N_FIELDS)
        self.loop_perm = self._non_identity(rng, len(LOOPS))

    @staticmethod
    def _non_identity(rng: np.random.Generator, size: int) -> np.ndarray:
        while True:
            perm = rng.permutation(size)
            if np.any(perm != np.arange(size)):
                return perm

    def shared(self, space, configs, *, rows, cols, feat):
        std = _standard_shared(space, configs, rows, cols, feat)
        out = np.empty_like(std)
        out[:, self.field_perm] = std[:, :N_FIELDS]
        omega = std[:, N_FIELDS:].reshape(-1, len(LOOPS), len(LOOPS))
        shuffled = np.empty_like(omega)
        shuffled[:, :, self.loop_perm] = omega
        out[:, N_FIELDS:] = shuffled.reshape(len(configs), -1)
        return out

    def knobs(self, space, configs):
        return _knob_matrix(space, configs)

    def knob_width(self, space):
        return len(space.knob_names)

    def to_dict(self):
        return {"kind": self.kind, "seed": self.seed}


def _raw_values(value) -> list[float]:
    """A JSON field flattened to numbers: bool -> 0/1, number -> signed log2(1 + |x|),
    string -> a stable hash in [0, 1), sequence -> its items in order."""
    if isinstance(value, bool):
        return [float(value)]
    if isinstance(value, (int, float, np.integer, np.floating)):
        x = float(value)
        return [math.copysign(math.log2(1.0 + abs(x)), x)]
    if isinstance(value, str):
        return [(zlib.crc32(value.encode()) % 10007) / 10007.0]
    if value is None:
        return [0.0]
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _raw_values(item)]
    raise InvalidConfigError(f"cannot turn config field value {value!r} into numbers")


class NoMapper(ConfigMapper):
    """No mapping: raw config fields (sorted by name, flattened) zero-padded to `width`; no knobs."""

    kind = "none"

    def __init__(self, *, width: int = SHARED_WIDTH):
        self.width = int(width)

    def raw(self, config: Config) -> np.ndarray:
        data = config.to_dict()
        values = [v for name in sorted(data) for v in _raw_values(data[name])]
        if len(values) > self.width:
            raise InvalidConfigError(f"{type(config).__name__} flattens to {len(values)} numbers, "
                                     f"more than the padded width {self.width}: {config.to_json()}")
        out = np.zeros(self.width, dtype=np.float32)
        out[:len(values)] = values
        return out

    def shared(self, space, configs, *, rows, cols, feat):
        if not configs:
            return np.zeros((0, self.width), dtype=np.float32)
        return np.stack([self.raw(c) for c in configs])

    def knobs(self, space, configs):
        return np.zeros((len(configs), 0), dtype=np.float32)

    def knob_width(self, space):
        return 0

    def to_dict(self):
        return {"kind": self.kind, "width": self.width}


_MAPPERS: dict[str, type[ConfigMapper]] = {
    StandardMapper.kind: StandardMapper,
    RandomPermutationMapper.kind: RandomPermutationMapper,
    NoMapper.kind: NoMapper,
}
MAPPER_KINDS = tuple(_MAPPERS)


def create(kind: str | ConfigMapper = "standard", **options) -> ConfigMapper:
    """A mapper by kind ("standard", "random", "none"); a ConfigMapper passes through."""
    if isinstance(kind, ConfigMapper):
        return kind
    if kind not in _MAPPERS:
        raise UnknownKindError("mapper", kind, list(_MAPPERS))
    return _MAPPERS[kind](**options)


def from_dict(data: dict) -> ConfigMapper:
    """Rebuild a mapper from `ConfigMapper.to_dict()`."""
    data = dict(data)
    return create(data.pop("kind"), **data)


__all__ = ["ConfigMapper", "StandardMapper", "RandomPermutationMapper", "NoMapper", "MAPPER_KINDS",
           "N_FIELDS", "SHARED_WIDTH", "create", "from_dict"]
