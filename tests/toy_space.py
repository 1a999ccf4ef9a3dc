"""Small Space subclasses and a synthetic runtime for the model's tests.

`ToySpace` behaves like a CPU platform (configs live in the shared coordinates,
so the standard mapping is the identity on them); `ToyAccelSpace` behaves like an
accelerator (panel sizes, a split factor, a barrier that changes the loop order).
`synthetic_time_ms` is a known, deterministic function of matrix statistics and
the shared coordinates: the best I follows the average row length, the best K
follows the column count, the best J follows the dense width.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from cognate_tvm.errors import InvalidConfigError
from cognate_tvm.space import PLATFORMS, create
from cognate_tvm.space.base import Config, SharedCoords, Space

ORDERS = (("i1", "k1", "j1", "i0", "k0", "j0"), ("k1", "i1", "j1", "i0", "k0", "j0"))


@dataclass(frozen=True)
class ToyConfig(Config):
    i: int
    k: int
    j: int
    order: tuple[str, ...]
    unroll: int
    parallel: bool


class ListedSpace(Space):
    """A space whose valid configs are exactly the ones `configs` lists."""

    def check(self, config):
        if not isinstance(config, self.config_type) or config not in set(self.configs()):
            raise InvalidConfigError(f"not a {self.platform} config: {config!r}")


class ToySpace(ListedSpace):
    platform = "toy"
    config_type = ToyConfig
    knob_names = ("unroll", "parallel")

    def configs(self):
        return [ToyConfig(i, k, j, order, u, p) for i, k, j, order, u, p in itertools.product(
            (1, 4, 16, 64), (64, 512, 4096), (8, 32), ORDERS, (1, 4), (False, True))]

    def baseline(self):
        return ToyConfig(16, 4096, 32, ORDERS[0], 1, True)

    def shared_coords(self, config, *, rows, cols, feat):
        return SharedCoords(math.log2(config.i), math.log2(config.k), math.log2(min(config.j, feat)),
                            config.order)

    def platform_knobs(self, config):
        return np.array([math.log2(config.unroll), float(config.parallel)], dtype=np.float32)


@dataclass(frozen=True)
class AccelConfig(Config):
    row_panel: int
    col_panel: int
    split: int
    barrier: bool
    bypass: bool


class ToyAccelSpace(ListedSpace):
    platform = "toyaccel"
    config_type = AccelConfig
    knob_names = ("barrier", "bypass")

    def configs(self):
        return [AccelConfig(*c) for c in itertools.product(
            (2, 8, 32, 128), (128, 1024, 8192), (1, 2, 4), (False, True), (False, True))]

    def baseline(self):
        return AccelConfig(8, 1024, 1, False, False)

    def shared_coords(self, config, *, rows, cols, feat):
        order = ORDERS[1] if config.barrier else ORDERS[0]
        return SharedCoords(math.log2(config.row_panel), math.log2(config.col_panel),
                            math.log2(max(feat / config.split, 1.0)), order)

    def platform_knobs(self, config):
        return np.array([float(config.barrier), float(config.bypass)], dtype=np.float32)


def synthetic_time_ms(matrix: sp.csr_matrix, space: Space, config: Config, feat: int) -> float:
    """Deterministic runtime: a product of penalties for distance from the matrix's best tiles."""
    rows, cols = matrix.shape
    nnz = max(matrix.nnz, 1)
    c = space.shared_coords(config, rows=rows, cols=cols, feat=feat)
    best_i = np.clip(np.log2(1 + nnz / max(rows, 1)) + 1.0, 0, 7)
    best_k = np.clip(np.log2(max(cols, 2)) - 2.0, 6, 13)
    best_j = np.log2(min(feat, 32))
    penalty = (1.0 + 0.35 * abs(c.log2_i - best_i)) * (1.0 + 0.2 * abs(c.log2_k - best_k)) \
        * (1.0 + 0.3 * abs(c.log2_j - best_j))
    if c.loop_order[0] == "k1":
        penalty *= 1.0 + 0.3 * (rows > cols)
    knobs = space.platform_knobs(config)
    penalty *= 1.0 + 0.1 * float(knobs[0]) * (nnz / max(rows, 1) < 4)
    return float(1e-4 * nnz * feat * penalty)


def measured_groups(space: Space, matrices: dict[str, sp.csr_matrix], *, feat: int = 32,
                    configs_per_matrix: int | None = None, seed: int = 0):
    """Groups (see cognate_tvm.data.Group) with synthetic times for every matrix."""
    from cognate_tvm.data import Group

    groups = []
    for n, (name, matrix) in enumerate(sorted(matrices.items())):
        configs = space.configs() if configs_per_matrix is None else space.sample(configs_per_matrix, seed + n)
        times = np.array([synthetic_time_ms(matrix, space, c, feat) for c in configs])
        groups.append(Group(name=name, matrix=matrix, feat=feat, configs=tuple(configs), times_ms=times))
    return groups


def small_corpus(count_per_family: int = 3, *, seed: int = 0, min_rows: int = 120, max_rows: int = 900
                 ) -> dict[str, sp.csr_matrix]:
    """A few small matrices of every generator family (fast to embed)."""
    from cognate_tvm.matrix import FAMILIES, generate

    rng = np.random.default_rng(seed)
    out = {}
    for family in sorted(FAMILIES):
        for n in range(count_per_family):
            rows = int(rng.integers(min_rows, max_rows))
            out[f"{family}_{n}"] = generate(family, rows, seed=seed * 100 + n)
    return out


def fast_model_config(**changes):
    """A small, fast ModelConfig for tests (embeddings cached: the featurizer is not trained)."""
    from cognate_tvm.model import ModelConfig

    base = ModelConfig().replace(**{
        "featurizer.stem_channels": 8, "featurizer.stage_channels": (8, 8, 8), "featurizer.max_points": 4096,
        "latent.epochs": 300, "predictor.hidden": (64, 32), "train.epochs": 25, "train.finetune_epochs": 20,
        "train.train_featurizer": False, "train.lr": 3e-3, "train.finetune_lr": 2e-3,
        "train.batch_matrices": 4, "train.pairs_per_matrix": 128})
    return base.replace(**changes)


class FakeBackend:
    """A picklable stand-in for a Backend: synthetic times, chosen configs fail."""

    target = "fake"

    def __init__(self, space: Space, *, fail_every: int = 0, crash_on: str | None = None):
        self.space, self.platform = space, space.platform
        self.fail_every, self.crash_on = fail_every, crash_on
        self.calls: list[int] = []

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        from cognate_tvm.backends.base import MeasureResult

        if self.crash_on is not None and matrix.shape[0] == int(self.crash_on):
            raise RuntimeError("simulated crash of the whole process")
        self.calls.append(matrix.shape[0])
        out = []
        for n, config in enumerate(configs):
            if self.fail_every and n % self.fail_every == 0:
                out.append(MeasureResult(config=config, time_ms=None, error=f"failed config {n}"))
            else:
                out.append(MeasureResult(config=config, time_ms=synthetic_time_ms(matrix, self.space, config, feat)))
        return out


def real_spaces(ops: tuple[str, ...] = ("spmm",)) -> list[Space]:
    """The project's platform spaces (cpu, spade, gpu) for `ops`."""
    return [create(platform, op) for platform in PLATFORMS for op in ops]
