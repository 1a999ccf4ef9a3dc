"""A backend that replays recorded timings instead of running kernels.

`ReplayBackend.measure` looks each config up in a recording of (matrix, op,
dense width) -> {config: time}: a recorded sweep (a dataset directory, see
`cognate_tvm.data`) or a mapping built in memory. A matrix is recognised by its
pattern's content hash (`data.matrix_hash`), so the same matrix rebuilt from its
corpus spec finds its timings. A config that was not recorded (or that failed
when it was) comes back as a failed result naming it, as any backend's failures
do; nothing is raised for it. The same call gives the same answer, so the
backend is `deterministic`: `tuning.tune` runs unchanged on it and offline, and a
search strategy can be compared against a full sweep without noise.

>>> backend = ReplayBackend.from_dataset("data/cpu_spmm_2t")            # doctest: +SKIP
>>> tuned = tuning.tune("spmm", A, backend=backend, feat=128)            # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
import os
from typing import Mapping, Sequence

import pandas as pd
import scipy.sparse as sp

from ..data import load_frame, matrix_hash
from ..matrix import as_csr
from ..ops import Op, get_op
from ..space.base import Config
from .base import Backend, MeasureResult

# A recording: (matrix hash, op name, dense width) -> {config JSON: time in ms, or None if it failed}.
Key = tuple[str, str, int]
NOT_RECORDED = "not recorded"


class ReplayBackend(Backend):
    """Replays recorded times of one platform's configs.

    Parameters
    ----------
    recorded : {(matrix hash, op name, dense width): {config JSON (`Config.to_json`): time in ms,
        or None / NaN for a config that failed}}.
    platform : the space the configs belong to ("cpu", "spade", "gpu").
    target : the target the times were measured on (default: the platform's usual target).
    threads : the kernel threads the times were measured with (None: not a setting of the target).
    """

    target = "replay"
    platform = "replay"
    deterministic = True  # the same lookup gives the same time

    def __init__(self, recorded: Mapping[Key, Mapping[str, float | None]], *, platform: str,
                 target: str | None = None, threads: int | None = None):
        if threads is not None and int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.recorded = {(str(h), str(o), int(f)): {str(c): _time(t) for c, t in times.items()}
                         for (h, o, f), times in recorded.items()}
        self.platform = platform
        self.target = target or _DEFAULT_TARGET.get(platform, platform)
        self.threads = None if threads is None else int(threads)

    # -- building one -----------------------------------------------------------------
    @classmethod
    def from_frame(cls, frame: pd.DataFrame, *, platform: str | None = None, target: str | None = None,
                   threads: int | None = None) -> "ReplayBackend":
        """The recording of a dataset frame (`data.load_frame`); platform, target and threads default
        to the frame's own (ValueError when the frame mixes them, or has no rows)."""
        if frame.empty:
            raise ValueError("the frame holds no measurements to replay")
        platform = platform or _single(frame, "platform")
        frame = frame[frame["platform"] == platform]
        if frame.empty:
            raise ValueError(f"the frame holds no measurements of platform {platform!r}")
        target = target or _single(frame, "target")
        if threads is None:
            threads = _frame_threads(frame)
        recorded: dict[Key, dict[str, float | None]] = {}
        for row in frame[["matrix_hash", "op", "feat", "config", "time_ms", "error", "correct"]].itertuples(False):
            ok = _missing(row.error) and row.correct is not False
            key = (row.matrix_hash, row.op, int(row.feat))
            recorded.setdefault(key, {})[_canonical(row.config)] = row.time_ms if ok else None
        return cls(recorded, platform=platform, target=target, threads=threads)

    @classmethod
    def from_dataset(cls, *paths: str | os.PathLike, **options) -> "ReplayBackend":
        """The recording of one or more dataset directories (options as `from_frame`)."""
        if not paths:
            raise ValueError("from_dataset needs at least one dataset directory")
        frame = pd.concat([load_frame(p) for p in paths], ignore_index=True)
        return cls.from_frame(frame, **options)

    @classmethod
    def from_timings(cls, timings: Mapping[str, Mapping[Config | str, float | None]], *,
                     matrices: Mapping[str, sp.spmatrix], op: Op | str, feat: int, platform: str,
                     target: str | None = None, threads: int | None = None) -> "ReplayBackend":
        """The recording of {matrix name: {config (or its JSON): time}} for `op` at width `feat`;
        `matrices` maps each name to its matrix (KeyError naming a missing one)."""
        op = get_op(op)
        recorded = {}
        for name, times in timings.items():
            if name not in matrices:
                raise KeyError(f"matrix {name!r} of the timings is not in `matrices`")
            key = (matrix_hash(as_csr(matrices[name])), op.name, int(feat))
            recorded[key] = {_config_key(c): t for c, t in times.items()}
        return cls(recorded, platform=platform, target=target, threads=threads)

    # -- Backend ------------------------------------------------------------------------
    def measure(self, op: Op | str, matrix: sp.csr_matrix, configs: Sequence[Config], feat: int, *,
                check: bool = False, seed: int = 0) -> list[MeasureResult]:
        """Each config's recorded time; a config not recorded for this matrix, op and width (or
        recorded as failed) is a failed result naming it. Outputs are never computed (`correct`
        stays None)."""
        op = get_op(op)
        key = (matrix_hash(as_csr(matrix)), op.name, int(feat))
        times = self.recorded.get(key)
        results = []
        for config in configs:
            text = config.to_json()
            if times is None:
                results.append(MeasureResult(config, None, error=f"{NOT_RECORDED}: no timings of {op.name} at "
                                                                 f"width {feat} for this matrix ({key[0][:12]})"))
            elif text not in times:
                results.append(MeasureResult(config, None, error=f"{NOT_RECORDED}: config {text}"))
            elif times[text] is None:
                results.append(MeasureResult(config, None, error=f"recorded as failed: config {text}"))
            else:
                results.append(MeasureResult(config, times[text], extra={"replayed": True}))
        return results

    def kernel_threads(self) -> int | None:
        return self.threads

    def metadata(self) -> dict:
        return dict(super().metadata(), replayed=True, threads=self.threads)

    # -- what was recorded ------------------------------------------------------------------
    def recorded_configs(self, op: Op | str, matrix: sp.csr_matrix, feat: int) -> list[str]:
        """The JSON forms of the configs recorded as ran for this matrix, op and width (empty if none)."""
        key = (matrix_hash(as_csr(matrix)), get_op(op).name, int(feat))
        return [c for c, t in self.recorded.get(key, {}).items() if t is not None]


_DEFAULT_TARGET = {"cpu": "llvm", "spade": "spade", "gpu": "cuda"}


def _time(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _missing(value) -> bool:
    """None, or a parquet / pandas missing value (NaN) in an object column."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _canonical(text: str) -> str:
    """A config's JSON in `Config.to_json`'s form (sorted keys, no spaces)."""
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def _config_key(config: Config | str | Mapping) -> str:
    if isinstance(config, Config):
        return config.to_json()
    if isinstance(config, str):
        return _canonical(config)
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


def _single(frame: pd.DataFrame, column: str) -> str:
    values = sorted(set(frame[column].dropna()))
    if len(values) != 1:
        raise ValueError(f"the frame holds {column} values {values}; pass {column}= to choose one")
    return str(values[0])


def _frame_threads(frame: pd.DataFrame) -> int | None:
    """The kernel threads named in the frame's backend metadata (None when it names none)."""
    found = set()
    for text in frame["backend"].dropna().unique():
        threads = json.loads(text).get("num_threads")
        if threads is not None:
            found.add(int(threads))
    if len(found) > 1:
        raise ValueError(f"the frame mixes kernel thread counts {sorted(found)}; pass threads= to choose one")
    return found.pop() if found else None
