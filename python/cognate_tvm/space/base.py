"""The Space interface: a platform's configuration space for one op.

A space enumerates (or samples) its configurations, checks validity, names a
baseline configuration, gives each configuration a stable JSON form, and maps
it into the shared coordinates of DESIGN.md (log2 I, log2 K, log2 J and the loop
order omega over (i1, k1, j1, i0, k0, j0)) plus the platform-only knobs that the
platform's latent autoencoder compresses. The model never looks past this
interface, so a new platform is one new file in this folder.
"""
from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np

from ..errors import InvalidConfigError
from ..ops import Op, get_op

# Loop names of the shared space: 1 = outer (tile) loop, 0 = inner loop.
LOOPS: tuple[str, ...] = ("i1", "k1", "j1", "i0", "k0", "j0")


@dataclass(frozen=True)
class Config:
    """Base of every platform's config: a frozen dataclass with a stable JSON form."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> "Config":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown, missing = set(data) - names, names - set(data)
        if unknown or missing:
            raise InvalidConfigError(f"{cls.__name__}: unknown fields {sorted(unknown)}, "
                                     f"missing fields {sorted(missing)} in {data!r}")
        # JSON has no tuples; configs hold tuples so that they stay hashable.
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


@dataclass(frozen=True)
class SharedCoords:
    """A config in the shared space (COGNATE's homogeneous part)."""

    log2_i: float
    log2_k: float
    log2_j: float
    loop_order: tuple[str, ...]  # a permutation of LOOPS, outermost first

    def __post_init__(self):
        if sorted(self.loop_order) != sorted(LOOPS):
            raise InvalidConfigError(f"loop order {self.loop_order} is not a permutation of {LOOPS}")

    def omega(self) -> np.ndarray:
        """6x6 permutation matrix: omega[pos, LOOPS.index(loop)] = 1."""
        mat = np.zeros((len(LOOPS), len(LOOPS)), dtype=np.float32)
        for pos, loop in enumerate(self.loop_order):
            mat[pos, LOOPS.index(loop)] = 1.0
        return mat


class Space(ABC):
    """Configuration space of one platform for one op."""

    platform: ClassVar[str]            # "cpu", "spade", "gpu"
    config_type: ClassVar[type[Config]]
    knob_names: ClassVar[tuple[str, ...]]  # platform-only knobs, in `platform_knobs` order

    def __init__(self, op: str | Op):
        self.op = get_op(op)

    # -- the space ---------------------------------------------------------
    @abstractmethod
    def configs(self) -> list[Config]:
        """Every valid config, in a fixed order."""

    @abstractmethod
    def baseline(self) -> Config:
        """The fixed default the tuned result is compared against."""

    @abstractmethod
    def check(self, config: Config) -> None:
        """Raise InvalidConfigError naming the rule that `config` breaks."""

    def is_valid(self, config: Config) -> bool:
        try:
            self.check(config)
        except InvalidConfigError:
            return False
        return True

    def sample(self, count: int, seed: int) -> list[Config]:
        """`count` distinct configs drawn without replacement (all of them if count >= size)."""
        space = self.configs()
        if count >= len(space):
            return list(space)
        rng = np.random.default_rng(seed)
        return [space[i] for i in sorted(rng.choice(len(space), size=count, replace=False))]

    def __len__(self) -> int:
        return len(self.configs())

    # -- stable forms --------------------------------------------------------
    def config_from_dict(self, data: dict) -> Config:
        config = self.config_type.from_dict(data)
        self.check(config)
        return config

    def config_from_json(self, text: str) -> Config:
        return self.config_from_dict(json.loads(text))

    # -- mapping (COGNATE's F_M) ---------------------------------------------
    @abstractmethod
    def shared_coords(self, config: Config, *, rows: int, cols: int, feat: int) -> SharedCoords:
        """The config's tile sizes and loop order in the shared space."""

    @abstractmethod
    def platform_knobs(self, config: Config) -> np.ndarray:
        """Numeric vector of the platform-only knobs (float32, len(knob_names))."""

    def knob_matrix(self, configs: Sequence[Config] | None = None) -> np.ndarray:
        """Knob vectors of `configs` (default: the whole space) stacked row-wise."""
        configs = self.configs() if configs is None else configs
        return np.stack([self.platform_knobs(c) for c in configs]).astype(np.float32)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(op={self.op.name!r})"
