"""The Space interface: a platform's configuration space for one op.

A space enumerates (or samples) its configurations, checks validity, names a
baseline configuration, gives each configuration a stable JSON form, and maps
it into the coordinates every platform shares (log2 I, log2 K, log2 J and the loop
order omega over (i1, k1, j1, i0, k0, j0)) plus the platform-only knobs that the
platform's latent autoencoder compresses. The model never looks past this
interface, so a new platform is one new file in this folder.
"""
from __future__ import annotations

import dataclasses
import json
import math
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

    def to_json_values(self) -> tuple:
        """The field values in declaration order, hashable (sequences as tuples)."""
        return tuple(tuple(v) if isinstance(v, list) else v for v in dataclasses.astuple(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def knobs_differing(self, other: "Config") -> int:
        """How many fields of `self` and `other` hold different values."""
        return sum(a != b for a, b in zip(self.to_json_values(), other.to_json_values()))

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

    def canonical(self, *, cols: int, feat: int) -> "SharedCoords":
        """The same program with its one-iteration loops moved outermost, in LOOPS order.

        A loop of one iteration (i0 when I = 1, k1 when one panel covers all
        columns, j1 when one dense tile covers the width) can sit anywhere in the
        nest without changing the program, so two platforms' orders that differ
        only there must map to the same omega, or the CPU data never covers them.
        """
        trivial = {"i0": self.log2_i <= 0.0,
                   "k1": self.log2_k >= math.log2(max(1, cols)) - 1e-9,
                   "j1": self.log2_j >= math.log2(max(1, feat)) - 1e-9}
        front = [name for name in LOOPS if trivial.get(name, False)]
        order = tuple(front + [name for name in self.loop_order if name not in front])
        return dataclasses.replace(self, loop_order=order)

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
    # Knobs a model must know to rank this space: a space may append knobs after models were trained on
    # it (None: all of them), and a model fitted before reads only the first ones (model/cognate.py).
    min_knobs: ClassVar[int | None] = None
    # tune's picks from a ranking differ pairwise in at least this many fields (`diverse_top`); 1 = the
    # plain top-k. A space whose models transfer with few target samples hedges their errors with more.
    pick_distance: ClassVar[int] = 1

    def __init__(self, op: str | Op):
        self.op = get_op(op)

    @property
    def first_knobs(self) -> int:
        """How many of `knob_names` (the first ones) every model of this space reads; see `min_knobs`."""
        return len(self.knob_names) if self.min_knobs is None else self.min_knobs

    # -- the space ---------------------------------------------------------
    @abstractmethod
    def configs(self) -> list[Config]:
        """Every valid config, in a fixed order."""

    def candidates(self, threads: int | None = None) -> list[Config]:
        """The configs worth ranking for kernels that run on `threads` threads (None: not known).

        Every config here; a space whose knobs follow the thread count narrows it.
        """
        return self.configs()

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

    def sample_covering(self, count: int, seed: int, configs: Sequence[Config] | None = None) -> list[Config]:
        """`count` distinct configs in which every value of every config field occurs.

        Each (field, value) not yet covered gets one random config that has it;
        the rest are drawn uniformly. Training data sampled this way never leaves
        a knob value unseen (a plain uniform sample of a large space can).
        `configs` (default: the whole space) is what is sampled from.
        """
        space = list(self.configs() if configs is None else configs)
        if count >= len(space):
            return list(space)
        rng = np.random.default_rng(seed)
        values = [c.to_json_values() for c in space]
        chosen: set[int] = set()
        for field_index in range(len(values[0])):
            column = [v[field_index] for v in values]
            for value in sorted(set(column), key=repr):
                if any(column[i] == value for i in chosen):
                    continue
                having = [i for i, v in enumerate(column) if v == value]
                chosen.add(int(rng.choice(having)))
        if len(chosen) > count:
            raise ValueError(f"{self!r}: {count} configs cannot cover every knob value "
                             f"(needs at least {len(chosen)})")
        rest = np.setdiff1d(np.arange(len(space)), np.fromiter(chosen, dtype=np.int64))
        chosen.update(int(i) for i in rng.choice(rest, size=count - len(chosen), replace=False))
        return [space[i] for i in sorted(chosen)]

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


def diverse_top(ranked: Sequence[Config], k: int, min_distance: int) -> list[Config]:
    """`k` configs of `ranked` (best first): its first, then each next one in rank order that differs
    from every config already picked in at least `min_distance` fields; when too few do, the best-ranked
    of the rest fill the list. `min_distance` <= 1 gives the plain top k.

    Why: a model that is wrong about one knob on a matrix ranks that knob's wrong value first in all of
    its top configs (the 5 best of a SPADE model then share a `split` that costs 2x), so measuring them
    learns nothing new; picks that differ in several knobs hedge that error (docs/decisions.md).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    picks: list[Config] = []
    for config in ranked:
        if len(picks) == k:
            return picks
        if all(config.knobs_differing(p) >= min_distance for p in picks):
            picks.append(config)
    chosen = set(picks)
    return picks + [c for c in ranked if c not in chosen][:k - len(picks)]
