"""Executors: where collection tasks run.

A collection is a list of independent tasks (one matrix, one chunk of its
configs); `Executor.run(fn, tasks)` applies a picklable module-level `fn` to
each and yields ``(task, result)`` pairs as they finish, in any order. The
driver (`cognate_tvm.data.collect`) writes each result as one atomic Parquet
part, so whichever executor ran it, a killed run resumes from the parts on disk.

- ``"local"``: this process, one task after the other.

Further executors (a Ray cluster) live beside it and register in `_EXECUTORS`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Iterable, Iterator, TypeVar

from .errors import UnknownKindError

T = TypeVar("T")
R = TypeVar("R")


class Executor(ABC):
    """Runs `fn(task)` for every task and yields (task, result) as each finishes."""

    kind: str = ""

    @abstractmethod
    def run(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[tuple[T, R]]:
        """Apply `fn` to every task; yield (task, fn(task)) in completion order."""

    def close(self) -> None:
        """Release workers (nothing for the local executor)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalExecutor(Executor):
    """Runs tasks one after the other in this process."""

    kind = "local"

    def run(self, fn, tasks):
        for task in tasks:
            yield task, fn(task)


_EXECUTORS: dict[str, str] = {"local": "cognate_tvm.executors:LocalExecutor"}


def create(kind: str | Executor = "local", **options) -> Executor:
    """An executor by kind; an Executor passes through. Raises UnknownKindError listing the kinds."""
    import importlib

    if isinstance(kind, Executor):
        return kind
    if kind not in _EXECUTORS:
        raise UnknownKindError("executor", kind, list(_EXECUTORS))
    module, cls = _EXECUTORS[kind].split(":")
    return getattr(importlib.import_module(module), cls)(**options)


__all__ = ["Executor", "LocalExecutor", "create"]
