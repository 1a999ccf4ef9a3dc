"""Executors: where collection tasks run.

A collection is a list of independent tasks (one matrix, one chunk of its
configs); `Executor.run(fn, tasks)` applies a picklable module-level `fn` to
each and yields ``(task, result)`` pairs as they finish, in any order. The
driver (`cognate_tvm.data.collect`) writes each result as one atomic Parquet
part, so whichever executor ran it, a killed run resumes from the parts on disk.

- ``"local"``: this process, one task after the other.
- ``"ray"``: a Ray cluster (`RayExecutor`): the one at ``address``, or a local
  one started on the spot with ``workers`` CPUs. Needs the ``[distributed]`` extra.
"""
from __future__ import annotations

import hashlib
import logging
import os
import pickle
from abc import ABC, abstractmethod
from typing import Callable, Iterable, Iterator, TypeVar

from .errors import UnknownKindError

log = logging.getLogger(__name__)

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


# -- Ray ---------------------------------------------------------------------------------

# In each Ray worker process: the last task function unpickled, by the digest of its bytes.
# Consecutive tasks of a run reuse it, so a worker keeps one backend, and with it its
# in-memory kernel cache, for as long as the worker lives.
_WORKER_FN: dict[str, Callable] = {}


def _ray_call(digest: str, fn_bytes: bytes, task):
    """Run in a Ray worker: fn(task), with fn unpickled once per worker process."""
    fn = _WORKER_FN.get(digest)
    if fn is None:
        _WORKER_FN.clear()
        fn = _WORKER_FN[digest] = pickle.loads(fn_bytes)
    return fn(task)


class RayExecutor(Executor):
    """Runs tasks on a Ray cluster; results come back to this process.

    Parameters
    ----------
    address
        The cluster to join (``ray.init(address=...)``, e.g. ``"auto"`` or
        ``"ray://head:10001"``); None starts a local cluster with `workers` CPUs.
    workers
        CPUs of the local cluster (default: all cores); with `address`, the most
        tasks kept in flight is twice the cluster's CPUs regardless.
    cpus_per_task
        CPUs each task reserves on its node: 1 for a single-threaded simulator;
        the kernel's thread count for llvm timing, so that tasks sharing a node
        do not oversubscribe its cores.
    max_retries
        How often a task whose worker process died (killed, out of memory, a
        crashing kernel) is run again on another worker. An exception raised by
        the task itself is not retried: it reaches the caller, as with the local
        executor (per-config failures are results, never exceptions).
    init_options
        Further keyword arguments of ``ray.init`` (e.g. ``runtime_env``).

    The task function is pickled once (``pickle``: a module-level function or a
    partial of one, e.g. ``partial(run_task, backend)``; workers must be able to
    import its module) and unpickled once per worker process, so each worker
    keeps its own backend and kernel cache across tasks. A cluster this executor
    started is shut down by `close`; a cluster it joined is left running.
    """

    kind = "ray"

    def __init__(self, *, address: str | None = None, workers: int | None = None, cpus_per_task: float = 1.0,
                 max_retries: int = 3, init_options: dict | None = None):
        import ray

        if workers is not None and int(workers) < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if float(cpus_per_task) <= 0:
            raise ValueError(f"cpus_per_task must be > 0, got {cpus_per_task}")
        if int(max_retries) < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.address, self.max_retries = address, int(max_retries)
        self.cpus_per_task = float(cpus_per_task)
        self._owns_cluster = False
        if not ray.is_initialized():
            options = {"include_dashboard": False, "logging_level": logging.WARNING, **(init_options or {})}
            if address is None:
                options["num_cpus"] = int(workers or os.cpu_count() or 1)
                # a cluster started here sends no usage statistics anywhere unless the user asked for it
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            ray.init(address=address, **options)
            self._owns_cluster = True
        self.workers = int(ray.cluster_resources().get("CPU", 1))
        largest = max((node["Resources"].get("CPU", 0) for node in ray.nodes() if node["Alive"]), default=0)
        if self.cpus_per_task > largest:  # Ray would wait forever for a node that fits the task
            self.close()
            raise ValueError(f"tasks need {self.cpus_per_task:g} CPUs but the largest node of the Ray "
                             f"cluster has {largest:g}")
        log.info("ray executor: %d CPUs in the cluster%s", self.workers,
                 f" at {address}" if address else " (local)")

    def run(self, fn, tasks):
        import ray

        fn_bytes = pickle.dumps(fn)
        digest = hashlib.sha1(fn_bytes).hexdigest()
        fn_ref = ray.put(fn_bytes)
        remote = ray.remote(num_cpus=self.cpus_per_task, max_retries=self.max_retries)(_ray_call)
        queue = iter(tasks)
        in_flight: dict = {}
        # enough to keep every worker busy; tasks are submitted lazily
        limit = max(1, int(2 * self.workers / self.cpus_per_task))
        try:
            while True:
                for task in queue:
                    in_flight[remote.remote(digest, fn_ref, task)] = task
                    if len(in_flight) >= limit:
                        break
                if not in_flight:
                    return
                done, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in done:
                    task = in_flight.pop(ref)
                    yield task, ray.get(ref)
        finally:
            for ref in in_flight:  # the caller stopped early or a task failed: drop the rest
                ray.cancel(ref, force=True)

    def close(self) -> None:
        import ray

        if self._owns_cluster and ray.is_initialized():
            ray.shutdown()
        self._owns_cluster = False


_EXECUTORS: dict[str, str] = {"local": "cognate_tvm.executors:LocalExecutor",
                              "ray": "cognate_tvm.executors:RayExecutor"}
KINDS = tuple(_EXECUTORS)


def create(kind: str | Executor = "local", **options) -> Executor:
    """An executor by kind; an Executor passes through. Raises UnknownKindError listing the kinds."""
    import importlib

    if isinstance(kind, Executor):
        return kind
    if kind not in _EXECUTORS:
        raise UnknownKindError("executor", kind, list(_EXECUTORS))
    module, cls = _EXECUTORS[kind].split(":")
    return getattr(importlib.import_module(module), cls)(**options)


__all__ = ["KINDS", "Executor", "LocalExecutor", "RayExecutor", "create"]
