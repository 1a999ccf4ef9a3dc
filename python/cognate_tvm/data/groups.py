"""The unit of ranking: a `Group`, the measured configs of one matrix at one dense width."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..errors import DatasetMismatchError, ShapeError
from ..space.base import Config, Space
from .matrices import checked_build


@dataclass(frozen=True)
class Group:
    """The measured configs of one matrix at one dense width: the unit of ranking."""

    name: str
    matrix: sp.csr_matrix
    feat: int
    configs: tuple[Config, ...]
    times_ms: np.ndarray  # NaN where the config failed

    def __post_init__(self):
        times = np.asarray(self.times_ms, dtype=np.float64)
        if times.shape != (len(self.configs),):
            raise ShapeError(f"group {self.name!r}: {len(self.configs)} configs but times of shape {times.shape}")
        object.__setattr__(self, "times_ms", times)

    def times_by_config(self) -> dict[str, float]:
        """{config JSON: time in ms (NaN if it failed)}: the table `metrics.mean_log_slowdown` takes."""
        return {c.to_json(): float(t) for c, t in zip(self.configs, self.times_ms)}

    def ok(self) -> "Group":
        """The same group without the failed configs."""
        keep = np.isfinite(self.times_ms)
        return Group(self.name, self.matrix, self.feat, tuple(c for c, k in zip(self.configs, keep) if k),
                     self.times_ms[keep])


def groups_from_frame(frame: pd.DataFrame, *, space: Space, matrices: Mapping[str, object],
                      op: str | None = None, drop_failed: bool = True,
                      on_mismatch: Callable[[str, DatasetMismatchError], None] | None = None) -> list[Group]:
    """One Group per (matrix, feat) of `space`'s platform (and `op`), configs parsed by `space`.

    `matrices` maps matrix names to CSR matrices (or builders); a name missing from
    it raises KeyError naming it. A matrix whose pattern hash differs from the
    dataset's (the timings were taken on another matrix) raises DatasetMismatchError,
    or, with `on_mismatch`, is left out after ``on_mismatch(name, error)`` is called:
    its timings belong to no matrix this machine builds, so they are never used.
    """
    frame = frame[frame["platform"] == space.platform]
    frame = frame[frame["op"] == (op or space.op.name)]
    groups, built, mismatched = [], {}, set()
    for (name, feat), part in frame.groupby(["matrix", "feat"], sort=True):
        if name not in matrices:
            raise KeyError(f"matrix {name!r} of the dataset is not in `matrices`")
        if name in mismatched:
            continue
        if name not in built:
            try:
                built[name] = checked_build(name, matrices[name], part["matrix_hash"])
            except DatasetMismatchError as error:
                if on_mismatch is None:
                    raise
                mismatched.add(name)
                on_mismatch(str(name), error)
                continue
        group = Group(name=str(name), matrix=built[name], feat=int(feat),
                      configs=tuple(space.config_from_json(c) for c in part["config"]),
                      times_ms=part["time_ms"].to_numpy(dtype=np.float64))
        groups.append(group.ok() if drop_failed else group)
    return groups
