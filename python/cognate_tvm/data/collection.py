"""Collecting a dataset: the tasks of a sweep, measured on an executor, one part each.

A collection is planned as tasks (`MeasureTask`: a chunk of configs of one matrix), each
measured by the pure function `run_task` and written as one part of the store. Tasks run
on an executor (`cognate_tvm.executors`: this process, or a cluster); tasks whose part
exists are skipped, so a killed collection resumes where it stopped.
"""
from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Hashable, Iterable, Mapping

import pandas as pd
import scipy.sparse as sp

from ..errors import ShapeError
from ..ops import Op, get_op
from ..space.base import Config
from .matrices import build_matrix
from .store import _check_meta, _part_done, _part_name, _write_part, results_frame

logger = logging.getLogger(__name__)


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
        _LAST_BUILT[key] = sp.csr_matrix(build_matrix(source))
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
            chosen = list(configs(name, build_matrix(item)))
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

    from ..executors import create as create_executor

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
