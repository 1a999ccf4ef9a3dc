"""The SPADE space: row panel x column panel x dense split x barrier x bypass (256 configs).

A SPADE tile instruction covers `row_panel` rows of A by `col_panel` columns;
without barrier, row panels are handed to PEs dynamically. `split` runs the
kernel in that many passes over A, each over N / split dense columns.
`barrier` makes all PEs finish column panel c before any starts c + 1 (they
then share that panel's dense rows in the LLC) with row panels statically owned
by PEs, so each PE keeps its output tiles on chip across column panels;
`bypass` streams the row-indexed dense operand (SpMM: the output C, SDDMM: X)
to and from DRAM without allocating it in the caches, leaving them to the
gathered operand. docs/spade_model.md explains how the simulator models each
knob and why these values were chosen.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidConfigError
from .base import Config, SharedCoords, Space

# Values of each knob. Row panels span "one PE per few rows" (small matrices
# need many panels to keep 224 PEs busy) to "long runs of neighbouring rows on
# one core" (L2 reuse on banded and stencil matrices). Column panels span
# "the panel's dense rows fit one core's L2" (2^11 rows of 512 B = 1 MiB at
# N = 128) to "no column tiling" for the corpus' sizes. Splits trade re-reading
# A for a dense working set that is 2-8x smaller.
ROW_PANELS: tuple[int, ...] = (4, 16, 64, 256)
COL_PANELS: tuple[int, ...] = (2048, 16384, 131072, 1 << 20)
SPLITS: tuple[int, ...] = (1, 2, 4, 8)
BARRIERS: tuple[bool, ...] = (False, True)
BYPASSES: tuple[bool, ...] = (False, True)

# What a user would run untuned, without looking at the matrix: one mid-range
# tile height (64 rows: 256 B of row pointers per tile, long enough
# to amortise a tile dispatch), no column tiling, one pass, no barrier, caches
# used for everything. It is deliberately not the best average config (see
# docs/spade_model.md for how far it is from the oracle and from the best
# fixed config).
BASELINE = dict(row_panel=64, col_panel=1 << 20, split=1, barrier=False, bypass=False)

ORDER_BARRIER: tuple[str, ...] = ("k1", "i1", "j1", "i0", "k0", "j0")
ORDER_FREE: tuple[str, ...] = ("i1", "k1", "j1", "i0", "k0", "j0")


@dataclass(frozen=True)
class SpadeConfig(Config):
    """One SPADE program configuration."""

    row_panel: int
    col_panel: int
    split: int
    barrier: bool
    bypass: bool


class SpadeSpace(Space):
    """All 4 x 4 x 4 x 2 x 2 = 256 SPADE configs of one op."""

    platform = "spade"
    config_type = SpadeConfig
    knob_names = ("bypass", "barrier")
    # With 5 knobs and models fine-tuned on a handful of matrices, a wrong `split` or `col_panel` is shared
    # by all of a model's top configs; picks 2 knobs apart hedge it. 2 was chosen on the transfer
    # validation matrices (`benchmarks/pick_distance.py`; docs/decisions.md).
    pick_distance = 2

    def configs(self) -> list[SpadeConfig]:
        return [SpadeConfig(rp, cp, s, b, y)
                for rp, cp, s, b, y in itertools.product(ROW_PANELS, COL_PANELS, SPLITS, BARRIERS, BYPASSES)]

    def baseline(self) -> SpadeConfig:
        return SpadeConfig(**BASELINE)

    def check(self, config: Config) -> None:
        if not isinstance(config, SpadeConfig):
            raise InvalidConfigError(f"expected a SpadeConfig, got {type(config).__name__}: {config!r}")
        for name, allowed in (("row_panel", ROW_PANELS), ("col_panel", COL_PANELS), ("split", SPLITS),
                              ("barrier", BARRIERS), ("bypass", BYPASSES)):
            value = getattr(config, name)
            is_bool = isinstance(value, (bool, np.bool_))
            if is_bool != isinstance(allowed[0], bool) or value not in allowed:
                raise InvalidConfigError(f"SPADE {name}={value!r} is not one of {list(allowed)}")

    def shared_coords(self, config: Config, *, rows: int, cols: int, feat: int) -> SharedCoords:
        """I = row panel, K = column panel (both capped at the matrix), J = N / split."""
        self.check(config)
        return SharedCoords(
            log2_i=math.log2(max(1, min(config.row_panel, rows))),
            log2_k=math.log2(max(1, min(config.col_panel, cols))),
            log2_j=math.log2(max(1.0, feat / config.split)),
            loop_order=ORDER_BARRIER if config.barrier else ORDER_FREE,
        )

    def platform_knobs(self, config: Config) -> np.ndarray:
        self.check(config)
        return np.array([float(config.bypass), float(config.barrier)], dtype=np.float32)
