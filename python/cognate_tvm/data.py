"""Measurement datasets: collection, storage as parquet, grouping and splitting.

A dataset is a directory of parquet files, one per task measured (a matrix, an
op, a dense width, a platform and one chunk of configs), plus ``meta.json``
(format version); where pyarrow is missing a part holds the same columns as
JSON records (``.json``), and `load_frame` reads both. Each part file is written to a temporary name and renamed,
so a killed collection never leaves half a part, and a rerun skips the parts
already there: nothing finished is lost and nothing is measured twice. Tasks
run on an executor (`cognate_tvm.executors`: this process, or a cluster).
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

import functools
import hashlib
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Hashable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import __version__
from .errors import DatasetMismatchError, ModelVersionError, ShapeError
from .ops import Op, get_op
from .space.base import Config, Space

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2
COLUMNS = ("matrix", "matrix_hash", "rows", "cols", "nnz", "op", "platform", "target", "feat", "config",
           "time_ms", "error", "correct", "extra", "backend", "timestamp")
META_FILE = "meta.json"


def matrix_hash(matrix: sp.csr_matrix) -> str:
    """Content hash of a sparsity pattern (shape, indptr, indices; values are ignored)."""
    csr = sp.csr_matrix(matrix)
    digest = hashlib.sha1()
    digest.update(np.asarray(csr.shape, dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(csr.indptr, dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(csr.indices, dtype=np.int32).tobytes())
    return digest.hexdigest()


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


def _build(item) -> sp.csr_matrix:
    return item.build() if hasattr(item, "build") else item


def _checked_build(name: str, item, recorded: pd.Series) -> sp.csr_matrix:
    """The matrix `item` builds, checked against the pattern hash the dataset recorded for `name`."""
    matrix = _build(item)
    hashes = {h for h in recorded.dropna().unique() if h}
    if hashes and matrix_hash(matrix) not in hashes:
        raise DatasetMismatchError(
            f"matrix {name!r} builds a pattern ({matrix.shape[0]}x{matrix.shape[1]}, {matrix.nnz} nonzeros, hash "
            f"{matrix_hash(matrix)[:12]}) other than the one the dataset timed (hash {sorted(hashes)[0][:12]}): "
            "the corpus changed since the data was collected; collect it again")
    return matrix


@dataclass(frozen=True)
class MeasureTask:
    """One unit of collection: a chunk of configs of one matrix, written as one part."""

    name: str
    source: object              # a CSR matrix, or a recipe with .build() (e.g. a CorpusEntry)
    op: str
    feat: int
    configs: tuple[Config, ...]
    part: str                   # file name of its Parquet part
    check: bool = False
    seed: int = 0


# The last matrix built in this process: consecutive chunks of one matrix reuse it.
_LAST_BUILT: dict[tuple, sp.csr_matrix] = {}


def _task_matrix(task: MeasureTask) -> sp.csr_matrix:
    source = task.source
    key = (task.name, source if isinstance(source, Hashable) else id(source))
    if key not in _LAST_BUILT:
        _LAST_BUILT.clear()
        _LAST_BUILT[key] = sp.csr_matrix(_build(source))
    return _LAST_BUILT[key]


def run_task(backend, task: MeasureTask) -> pd.DataFrame:
    """Measure one task with `backend`; its rows as a DataFrame of `COLUMNS` (a pure function)."""
    matrix = _task_matrix(task)
    results = backend.measure(get_op(task.op), matrix, list(task.configs), task.feat, check=task.check,
                              seed=task.seed)
    if len(results) != len(task.configs):
        raise ShapeError(f"{type(backend).__name__}.measure returned {len(results)} results "
                         f"for {len(task.configs)} configs on {task.name!r}")
    return results_frame(backend, task.name, matrix, task.op, task.feat, results)


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


def plan_tasks(op: str | Op, platform: str, matrices: Mapping[str, object] | Iterable, configs, *, feat: int,
               check: bool = False, seed: int = 0, chunk: int | None = None) -> list[MeasureTask]:
    """The tasks of a collection (see `collect` for the arguments); chunk=None: one task per matrix."""
    op = get_op(op)
    items = list(matrices.items()) if isinstance(matrices, Mapping) else [(m.name, m) for m in matrices]
    if chunk is not None and int(chunk) < 1:
        raise ValueError(f"chunk must be >= 1 config, got {chunk}")
    tasks = []
    for name, item in items:
        if isinstance(configs, Mapping):
            chosen = list(configs[name])
        elif callable(configs):
            chosen = list(configs(name, _build(item)))
        else:
            chosen = list(configs)
        pieces = [(None, chosen)] if chunk is None else [
            (n, chosen[start:start + chunk]) for n, start in enumerate(range(0, len(chosen), chunk))]
        for index, piece in pieces:
            tasks.append(MeasureTask(name, item, op.name, int(feat), tuple(piece),
                                     _part_name(name, op.name, feat, platform, index), check, seed))
    return tasks


def collect(backend, op: str | Op, matrices: Mapping[str, object] | Iterable, configs, path: str | os.PathLike,
            *, feat: int, check: bool = False, seed: int = 0, progress: bool = True, chunk: int | None = None,
            executor=None) -> Path:
    """Measure `configs` of every matrix with `backend` and append them to the dataset at `path`.

    Parameters
    ----------
    backend : cognate_tvm.backends.Backend (picklable, for executors that ship it to workers)
    op : "spmm", "sddmm" or an Op.
    matrices : mapping name -> CSR matrix (or an object with ``.build()``, e.g. a
        `CorpusEntry`), or an iterable of objects with ``.name`` and ``.build()``.
    configs : a sequence of configs for every matrix, a mapping name -> configs, or a
        callable ``(name, matrix) -> configs`` (e.g. a seeded per-matrix sample).
    path : dataset directory; created if missing. Tasks whose part exists are skipped.
    feat : dense width N.
    chunk : configs per task (one Parquet part each); None = one task per matrix.
    executor : an `cognate_tvm.executors.Executor` or its kind (default: this process).

    Returns the dataset path. Each finished task is written atomically, so a
    killed run resumes where it stopped.
    """
    from tqdm.auto import tqdm

    from .executors import create as create_executor

    path = Path(path)
    _check_meta(path, create=True)
    for stale in [*path.glob(".*.parquet.*.tmp"), *path.glob(".*.json.*.tmp")]:  # a part a killed run was writing: it is measured again
        stale.unlink(missing_ok=True)
    tasks = plan_tasks(op, backend.platform, matrices, configs, feat=feat, check=check, seed=seed, chunk=chunk)
    todo = [t for t in tasks if not _part_done(path / t.part)]
    logger.info("collect: %d of %d tasks to measure into %s", len(todo), len(tasks), path)
    runner = create_executor(executor or "local")
    bar = tqdm(total=sum(len(t.configs) for t in todo), desc=f"collect {get_op(op).name}/{backend.platform}",
               unit="config", disable=not progress)
    with bar:
        for task, frame in runner.run(functools.partial(run_task, backend), todo):
            _write_part(path / task.part, frame)
            bar.update(len(task.configs))
    return path


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


def groups_from_frame(frame: pd.DataFrame, *, space: Space, matrices: Mapping[str, object],
                      op: str | None = None, drop_failed: bool = True) -> list[Group]:
    """One Group per (matrix, feat) of `space`'s platform (and `op`), configs parsed by `space`.

    `matrices` maps matrix names to CSR matrices (or builders); a name missing from
    it raises KeyError naming it, and a matrix whose pattern hash differs from the
    dataset's (the timings were taken on another matrix) raises DatasetMismatchError.
    """
    frame = frame[frame["platform"] == space.platform]
    frame = frame[frame["op"] == (op or space.op.name)]
    groups, built = [], {}
    for (name, feat), part in frame.groupby(["matrix", "feat"], sort=True):
        if name not in matrices:
            raise KeyError(f"matrix {name!r} of the dataset is not in `matrices`")
        if name not in built:
            built[name] = _checked_build(name, matrices[name], part["matrix_hash"])
        group = Group(name=str(name), matrix=built[name], feat=int(feat),
                      configs=tuple(space.config_from_json(c) for c in part["config"]),
                      times_ms=part["time_ms"].to_numpy(dtype=np.float64))
        groups.append(group.ok() if drop_failed else group)
    return groups


def split_by_matrix(names: Sequence[str], *, fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
                    seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """Seeded train / validation / test split of distinct matrix names (no matrix in two parts)."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or not np.isclose(sum(fractions), 1.0):
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    unique = sorted(set(names))
    order = np.random.default_rng(seed).permutation(len(unique))
    n_train = int(round(fractions[0] * len(unique)))
    n_val = int(round(fractions[1] * len(unique)))
    pick = [unique[i] for i in order]
    return pick[:n_train], pick[n_train:n_train + n_val], pick[n_train + n_val:]


def pick_across_sizes(sizes: Mapping[str, float], count: int, *, seed: int = 0) -> list[str]:
    """`count` matrix names, one seeded draw from each of `count` equal strata of `sizes` (e.g. nnz).

    A small validation set drawn uniformly can miss the large matrices, where
    configuration choice matters most; one per size stratum cannot.
    """
    if not 1 <= count <= len(sizes):
        raise ValueError(f"cannot pick {count} of {len(sizes)} matrices")
    ordered = sorted(sizes, key=lambda name: (sizes[name], name))
    rng = np.random.default_rng(seed)
    return [str(stratum[rng.integers(len(stratum))]) for stratum in np.array_split(np.array(ordered), count)]


def pick_diverse(embeddings: Mapping[str, np.ndarray], count: int, *, seed: int = 0,
                 prefer: Mapping[str, float] | None = None) -> list[str]:
    """`count` matrix names that cover the embedding space: the matrix nearest each centre of a
    seeded k-means (k-means++ start) of the standardized `embeddings` (name -> vector), or, with
    `prefer` (name -> score, e.g. nnz), the highest-scoring matrix of each cluster.

    A user picks which target matrices to spend simulations on before simulating any; the
    matrix embedding is free. A uniform draw of 5 misses a family 1 time in 2 when a family is
    an eighth of the pool (a draw without an R-MAT graph then picks no R-MAT matrix right). `prefer`
    lets each cluster send its largest matrix, where the configuration choice matters most.
    """
    from scipy.cluster.vq import kmeans2

    if not 1 <= count <= len(embeddings):
        raise ValueError(f"cannot pick {count} of {len(embeddings)} matrices")
    names = sorted(embeddings)
    if prefer is not None and not set(names) <= set(prefer):
        raise ValueError(f"no preference score for {sorted(set(names) - set(prefer))[:5]}")
    points = np.stack([np.asarray(embeddings[n], dtype=np.float64).ravel() for n in names])
    if not np.isfinite(points).all():
        raise ValueError("matrix embeddings hold NaN or infinite values")
    spread = points.std(axis=0)
    points = (points - points.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    centres, labels = kmeans2(points, count, minit="++", seed=np.random.default_rng([seed, 11]))
    chosen: list[int] = []
    for cluster, centre in enumerate(centres):  # a matrix not chosen yet (two centres may share one)
        order = list(np.argsort(((points - centre) ** 2).sum(axis=1), kind="stable"))
        if prefer is not None:  # the cluster's members by score, then the rest by distance (an empty cluster)
            members = sorted((i for i in order if labels[i] == cluster), key=lambda i: (-prefer[names[i]], names[i]))
            order = members + [i for i in order if labels[i] != cluster]
        chosen.append(int(next(i for i in order if i not in chosen)))
    return [names[i] for i in chosen]


def select(groups: Sequence[Group], names: Iterable[str]) -> list[Group]:
    """The groups whose matrix is in `names`."""
    wanted = set(names)
    return [g for g in groups if g.name in wanted]
