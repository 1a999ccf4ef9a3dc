"""A dataset on disk: a directory of parts, one per task measured, and its format version.

A dataset is a directory of parquet files, one per task measured (a matrix, an
op, a dense width, a platform and one chunk of configs), plus ``meta.json``
(format version); where pyarrow is missing a part holds the same columns as
JSON records (``.json``), and `load_frame` reads both. Each part file is written to a temporary name and renamed,
so a killed collection never leaves half a part, and a rerun skips the parts
already there: nothing finished is lost and nothing is measured twice.
`load_frame` reads all parts into one pandas DataFrame with the columns of
`COLUMNS`:

``matrix`` (name), ``matrix_hash`` (content hash of the pattern), ``rows``,
``cols``, ``nnz``, ``op``,
``platform``, ``target``, ``feat``, ``config`` (the config's JSON form),
``time_ms`` (NaN when the config failed), ``error`` (None or the message),
``correct`` (the output check: True/False, or None when not checked), ``extra``
(JSON of the backend's per-config extras, e.g. simulated cycles and their
breakdown), ``backend`` (JSON of `Backend.metadata()`: where and how it was
measured, with the package and backend versions, so datasets from many
machines can be merged) and ``timestamp`` (UTC, ISO 8601, when the task ended).

Per-config failures are stored as rows with an error; they never stop a sweep.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .. import __version__
from ..errors import ModelVersionError
from ..ops import Op, get_op
from .matrices import matrix_hash

FORMAT_VERSION = 2
COLUMNS = ("matrix", "matrix_hash", "rows", "cols", "nnz", "op", "platform", "target", "feat", "config",
           "time_ms", "error", "correct", "extra", "backend", "timestamp")
META_FILE = "meta.json"


def _part_name(matrix: str, op: str, feat: int, platform: str, chunk: int | None = None) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", matrix)[:80]
    suffix = "" if chunk is None else f"-c{chunk}"
    tag = hashlib.sha1(f"{matrix}|{op}|{feat}|{platform}{suffix}".encode()).hexdigest()[:10]
    return f"{safe}-{op}-{feat}-{platform}{suffix}-{tag}.parquet"


def _check_meta(path: Path, *, create: bool) -> None:
    meta = path / META_FILE
    if meta.is_file():
        version = json.loads(meta.read_text()).get("format_version")
        if version != FORMAT_VERSION:
            raise ModelVersionError(f"{path}: dataset format version {version!r}, this code reads {FORMAT_VERSION}")
    elif create:
        path.mkdir(parents=True, exist_ok=True)
        _atomic_write(meta, json.dumps({"format_version": FORMAT_VERSION, "columns": list(COLUMNS)}).encode())


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _json_name(part: Path) -> Path:
    return part.with_suffix(".json")


def _write_part(path: Path, frame: pd.DataFrame) -> Path:
    """Write one part atomically: Parquet, or the same columns as JSON records where pyarrow is
    missing (`load_frame` reads both). Returns the file written."""
    if not _has_pyarrow():
        path = _json_name(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if path.suffix == ".json":
            frame.to_json(tmp, orient="records", double_precision=15)
        else:
            frame.to_parquet(tmp, engine="pyarrow", index=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _part_done(path: Path) -> bool:
    return path.exists() or _json_name(path).exists()


def _read_part(path: Path) -> pd.DataFrame:
    if path.suffix == ".json":
        frame = pd.DataFrame.from_records(json.loads(path.read_text()), columns=list(COLUMNS))
        frame["time_ms"] = frame["time_ms"].astype(np.float64)  # null (a failed config) -> NaN
        return frame
    return pd.read_parquet(path, engine="pyarrow")


def save_results(path: str | os.PathLike, backend, name: str, matrix: sp.csr_matrix, op: str | Op, feat: int,
                 results: Sequence, *, chunk: int | None = None, metadata: Mapping | None = None) -> Path:
    """Append measured `results` (MeasureResults of one matrix, op and dense width) to the dataset at
    `path` as one part, as `collect` writes them; for callers that measure themselves (a sweep
    that times every config in one call). `metadata` joins the backend's in the ``backend``
    column (e.g. the device's name, the generator arguments of the matrix). Returns the part
    written (Parquet, or JSON without pyarrow); a part of the same matrix, op, width, platform
    and `chunk` is replaced."""
    path = Path(path)
    _check_meta(path, create=True)
    frame = results_frame(backend, name, matrix, get_op(op).name, feat, results, metadata=metadata)
    return _write_part(path / _part_name(name, get_op(op).name, feat, backend.platform, chunk), frame)


def results_frame(backend, name: str, matrix: sp.csr_matrix, op: str, feat: int, results: Sequence, *,
                  metadata: Mapping | None = None) -> pd.DataFrame:
    """The rows (`COLUMNS`) of `results`, measured by `backend` on `matrix` (named `name`);
    `metadata` is added to the backend's own in the ``backend`` column."""
    import datetime

    extra = dict(metadata or {})
    metadata = backend.metadata() if hasattr(backend, "metadata") else {"target": backend.target}
    metadata.update(extra)
    metadata["cognate_tvm"] = __version__
    frame = pd.DataFrame({
        "matrix": name, "matrix_hash": matrix_hash(matrix), "rows": int(matrix.shape[0]),
        "cols": int(matrix.shape[1]), "nnz": int(matrix.nnz), "op": op, "platform": backend.platform,
        "target": backend.target, "feat": int(feat),
        "config": [r.config.to_json() for r in results],
        "time_ms": [float(r.time_ms) if r.ok else np.nan for r in results],
        "error": [None if r.ok else (r.error or "output check failed") for r in results],
        "correct": [r.correct for r in results],
        "extra": [json.dumps(r.extra, sort_keys=True, default=str) for r in results],
        "backend": json.dumps(metadata, sort_keys=True, default=str),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }, columns=list(COLUMNS))
    frame["error"] = frame["error"].astype(object)
    frame["correct"] = frame["correct"].astype(object)
    return frame


def load_frame(path: str | os.PathLike) -> pd.DataFrame:
    """All measurements of the dataset at `path` (an empty frame if it has none)."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"dataset directory not found: {path}")
    _check_meta(path, create=False)
    parts = sorted([*path.glob("*.parquet"), *path.glob("*.json")])
    parts = [p for p in parts if p.name != META_FILE]
    if not parts:
        return pd.DataFrame({c: [] for c in COLUMNS})
    return pd.concat([_read_part(p) for p in parts], ignore_index=True)
