"""`tune_sparse`: a MetaSchedule search of a sparse workload, its best records confirmed side by side."""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import tvm
from tvm.s_tir import meta_schedule as ms

from ..backends.base import WRONG_OUTPUT
from ..errors import TuningError, UnknownKindError
from ..ops import Op, get_op
from ..space.cpu import CPUConfig
from ..tvm_intrinsics import load_tensor_intrinsics
from .cost_model import CognateModel
from .runner import (BuiltKernel, builder_and_runner, device_inputs, record_ms, save_sparse_arguments,
                     time_side_by_side)
from .space import config_from_knobs, knobs_from_trace, sparse_space, variants
from .trial_log import TrialLog
from .workload import sparse_module

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _named_log_handlers():
    """Detach unnamed handlers from MetaSchedule's logger while `tune_tir` runs.

    ``tune_tir`` rebuilds its logging config from the names of the handlers
    already on its logger, and fails (``'NoneType' object has no attribute
    'format'``) on one without a name, e.g. one a test harness attached; so a
    second tuning in one process would fail. They are re-attached afterwards.
    """
    logger = logging.getLogger(ms.logging.__name__.rsplit(".", 1)[0])
    unnamed = [h for h in logger.handlers if h.get_name() is None]
    for handler in unnamed:
        logger.removeHandler(handler)
    try:
        yield
    finally:
        for handler in unnamed:
            logger.addHandler(handler)


@dataclass
class MetaScheduleResult:
    """The best correct record of a tuning run."""

    config: CPUConfig
    time_ms: float
    knobs: dict[str, int]
    schedule: object    # s_tir.Schedule with the best trace applied
    records: int        # how many records the database holds
    database: object    # the MetaSchedule Database
    correct: bool       # the schedule's output was checked against scipy (always True when returned)
    rejected: list[tuple[CPUConfig, str]]  # faster records whose output was wrong, with the reason
    trials: list[tuple[CPUConfig, float | None]]  # every measurement in search order (None: failed)
    confirmed: dict  # {config: re-timed ms per round} of the finalists timed side by side ({}: none were)


def _target(target, num_threads: int, mcpu: str | None):
    from ..kernels.cpu import cpu_target

    if isinstance(target, str):
        if target != "llvm":
            raise UnknownKindError("MetaSchedule target", target, ["llvm"])
        return cpu_target(num_threads, mcpu)
    if target.kind.name != "llvm":
        raise UnknownKindError("MetaSchedule target", target.kind.name, ["llvm"])
    return target


def tune_sparse(op: str | Op, matrix: sp.csr_matrix, *, feat: int = 128, target="llvm", max_trials: int,
                cost_model=None, work_dir: str | os.PathLike, num_threads: int | None = None, seed: int = 1,
                mcpu: str | None = None, pretrained_root: str | os.PathLike | None = None, finalists: int = 8,
                rounds: int = 3) -> MetaScheduleResult:
    """Tune `op` on `matrix` with MetaSchedule; return the fastest of its best records, confirmed side by side.

    The `finalists` fastest records of distinct configs whose output matches scipy are timed again, side
    by side in this process (`rounds` rounds, the order rotated), and the lowest median is the result:
    the search's records come from measurements seconds to minutes apart, and on a shared machine the
    same config's record moves more than the gap between the best configs. 8 finalists, not 4: with 4, a
    good config whose record was slow fell out of a 32-trial search's shortlist (docs/metaschedule.md).

    Parameters
    ----------
    op : "spmm" or "sddmm".
    feat : dense width N.
    target : "llvm" (this machine's CPU, `num_threads` cores) or an llvm `tvm.target.Target`.
    max_trials : measured schedules in total (batches of 8).
    cost_model : a :class:`CognateModel` (told the workload here), a MetaSchedule
        cost model or its name ("xgb", "random"); None: ``CognateModel()`` with the shipped model.
    work_dir : MetaSchedule's logs and database, and the runner's input file.
    num_threads : cores of the target and threads of the measured kernels (default: all).
    seed : seed of the search (>= 1).
    pretrained_root : where ``CognateModel()`` finds shipped models (default: the package's).
    finalists, rounds : records re-timed, and rounds of re-timing (1 finalist or 0 rounds: the fastest
        correct record, at its recorded time). Threads: this process's TVM pool
        (``TVM_NUM_THREADS``, set to `num_threads` here if TVM's pool has not started).

    Raises
    ------
    TuningError
        When no record succeeded, or none computes the right output; it carries the search's
        trials and the rejected records.
    """
    op = get_op(op)
    if max_trials < 1:
        raise ValueError(f"max_trials must be >= 1, got {max_trials}")
    if finalists < 1 or rounds < 0:
        raise ValueError(f"finalists must be >= 1 and rounds >= 0, got {finalists} and {rounds}")
    num_threads = int(num_threads or os.cpu_count() or 1)
    os.environ.setdefault("TVM_NUM_THREADS", str(num_threads))  # the finalists are re-timed in this process
    tvm_target = _target(target, num_threads, mcpu)
    workers = int(tvm_target.attrs.get("num-cores", num_threads))
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    matrix = sp.csr_matrix(matrix, dtype=np.float32)
    load_tensor_intrinsics()  # before tune_tir's TuneContext (see CognateModel), whatever the cost model
    if cost_model is None:
        cost_model = CognateModel(pretrained_root=pretrained_root)
    if isinstance(cost_model, CognateModel):
        cost_model.set_workload(op, matrix, feat, num_threads=num_threads)
    inputs = save_sparse_arguments(op, matrix, feat, work_dir / f"{op.name}_inputs.npz")
    mod = sparse_module(op, matrix, feat)
    builder, runner = builder_and_runner(inputs, num_threads)
    variant_list = variants(op, feat)
    trial_log = TrialLog(variant_list)
    with _named_log_handlers():
        db = ms.tune_tir(mod, tvm_target, str(work_dir), max_trials, num_trials_per_iter=8, builder=builder,
                         runner=runner, cost_model=cost_model, space=sparse_space(op, feat, workers), seed=seed,
                         num_tuning_cores=max(1, num_threads),
                         measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), trial_log])
    workload = db.commit_workload(mod)
    records = db.get_top_k(workload, len(db.get_all_tuning_records()) or 1)
    if not records:
        raise TuningError(f"MetaSchedule produced no successful record (see the logs in {work_dir})",
                          trials=trial_log.trials)
    shortlist = _finalists(op, mod, records, matrix, feat, tvm_target, variant_list, finalists)
    if not shortlist.kernels:
        raise TuningError(f"none of the {len(records)} MetaSchedule records computes the right output "
                          f"(see the logs in {work_dir})", trials=trial_log.trials, rejected=shortlist.rejected)
    pick, time_ms, confirmed = shortlist.confirm(rounds)
    config, knobs, sch, _ = shortlist.kernels[pick]
    return MetaScheduleResult(config=config, time_ms=time_ms, knobs=knobs, schedule=sch,
                              records=len(db.get_all_tuning_records()), database=db, correct=True,
                              rejected=shortlist.rejected, trials=trial_log.trials, confirmed=confirmed)


@dataclass
class _Finalists:
    """A search's fastest correct records, one per config, built once: (config, knobs, schedule, kernel)."""

    kernels: list
    records_ms: list[float]
    rejected: list[tuple[CPUConfig, str]]

    def confirm(self, rounds: int) -> tuple[int, float, dict]:
        """(index of the pick, its time in ms, {config: re-timed ms per round}): the finalists timed side
        by side in `rounds` rounds, the order rotated, the lowest median kept. One finalist or no rounds:
        the fastest record, at its recorded time."""
        if rounds < 1 or len(self.kernels) < 2:
            return 0, self.records_ms[0], {}
        samples = time_side_by_side([k[3] for k in self.kernels], rounds)
        medians = [float(np.median(x)) for x in samples]
        pick = int(np.argmin(medians))
        return pick, medians[pick], {k[0]: x for k, x in zip(self.kernels, samples)}


def _finalists(op, mod, records, matrix, feat, target, variant_list, count: int) -> _Finalists:
    """The `count` fastest records of distinct configs whose output matches scipy, fastest first;
    a record with a wrong output is rejected (and the next one taken)."""
    kernels, records_ms, rejected, seen = [], [], [], set()
    inputs = device_inputs(op, matrix, feat)
    for record in records:
        if len(kernels) >= count:
            break
        knobs = knobs_from_trace(record.trace)
        config = config_from_knobs(knobs, variant_list)
        if config in seen:
            continue
        seen.add(config)
        sch = tvm.s_tir.Schedule(mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        kernel = BuiltKernel(op, sch.mod, matrix, feat, target, inputs=inputs)
        if not kernel.correct():
            rejected.append((config, WRONG_OUTPUT))
            log.warning("MetaSchedule record %s rejected: %s", config.to_json(), WRONG_OUTPUT)
            continue
        kernels.append((config, knobs, sch, kernel))
        records_ms.append(record_ms(record.run_secs))
    return _Finalists(kernels, records_ms, rejected)

