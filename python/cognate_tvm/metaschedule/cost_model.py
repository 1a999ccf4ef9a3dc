"""`CognateModel`: COGNATE as a MetaSchedule cost model (a thin ``PyCostModel`` adapter).

It decodes each candidate's trace into a :class:`~cognate_tvm.space.cpu.CPUConfig`, asks the
wrapped :class:`~cognate_tvm.model.cognate.CognateCostModel` for scores, and hands the measured
times back to its ``finetune``. With no arguments it loads, when the workload becomes known
(`tune_sparse` tells it; `set_workload` by hand), the shipped model of MetaSchedule's kernels
for the op and thread count where one ships (`shipped_platform`), else the shipped CPU model of
the op and thread count (``model.load_shipped_model``).
"""
from __future__ import annotations

import logging
import os
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from ..data import Group
from ..errors import InvalidConfigError, UnknownKindError
from ..ops import Op, get_op
from ..space.cpu import CPUConfig, CPUSpace
from ..tvm_intrinsics import load_tensor_intrinsics
from .runner import record_ms
from .space import Variant, config_from_knobs, knobs_from_trace, variants

log = logging.getLogger(__name__)

# Shipped models of these kernels (``pretrained/<op>-cpu-metaschedule-<T>t``): fine-tuned from the CPU
# models on MetaSchedule's own kernels, which time differently from tune's (benchmarks/metaschedule_finetune.py).
METASCHEDULE_PLATFORM = "cpu-metaschedule"

# added to the model's score (lower = faster) of a config that `Space.candidates` leaves out at the
# workload's thread count: far above any score's spread, so such configs rank after every candidate
OUTSIDE_CANDIDATES = 1e3


def merit(scores: np.ndarray) -> np.ndarray:
    """The model's scores (lower = faster, any sign) as MetaSchedule's predictions (> 0, higher = faster).

    The evolutionary search clips every prediction below 0 to 0 (``PredictNormalizedScore``) and
    samples its next population in proportion to them. The shipped models score most configs above 0,
    so with plain -score the search met ties and measured whichever draws came first, not the model's
    picks. This map is fixed (predictions of separate calls share one heap), strictly
    decreasing and positive: 1 / (1 + s) for s >= 0, 1 - s below (both 1 at 0)."""
    scores = np.asarray(scores, dtype=np.float64)
    # np.where computes both branches: abs keeps the unused one finite where s <= -1
    return np.where(scores >= 0, 1.0 / (1.0 + np.abs(scores)), 1.0 - scores)


def shipped_platform(op: str | Op, num_threads: int | None, *, root: str | os.PathLike | None = None) -> str:
    """The shipped models that `CognateModel()` loads for `op` on `num_threads`: those of MetaSchedule's
    kernels when one ships for the op at this thread count, else the CPU models of tune's kernels (the
    thread count matters more: a model of 2-thread timings never saw a serial kernel)."""
    from ..model.pretrained import available_pretrained, threaded_platform

    wanted = (get_op(op).name, threaded_platform(METASCHEDULE_PLATFORM, num_threads))
    return METASCHEDULE_PLATFORM if wanted in available_pretrained(root=root) else "cpu"


@derived_object
class CognateModel(ms.cost_model.PyCostModel):
    """MetaSchedule cost model backed by a `CognateCostModel` (a thin adapter).

    Parameters
    ----------
    model : CognateCostModel or None
        The wrapped model; None loads the shipped CPU model of the workload's op and
        thread count (``model.load_shipped_model(op, "cpu", threads=...)``) once the
        workload is known.
    pretrained_root : directory of shipped models (default: the package's).
    finetune_after : fine-tune once this many new successful measurements have
        arrived (0 disables fine-tuning).
    finetune_epochs : epochs of each fine-tune (default: the model's own setting).
    platform : the shipped models to load when `model` is None: ``"cpu"`` (trained on tune's
        kernels) or `METASCHEDULE_PLATFORM` (fine-tuned on MetaSchedule's); None (default): the
        latter where one ships for the op and thread count, else the former.
    op, matrix, feat : the workload, when known up front (else `set_workload`,
        which `tune_sparse` calls).
    """

    def __init__(self, model=None, *, pretrained_root: str | os.PathLike | None = None, finetune_after: int = 8,
                 finetune_epochs: int | None = None, platform: str | None = None, op: str | Op | None = None,
                 matrix: sp.csr_matrix | None = None, feat: int | None = None):
        if finetune_after < 0:
            raise ValueError(f"finetune_after must be >= 0, got {finetune_after}")
        # the TuneContext this model goes into imports TVM's tensor intrinsics: minutes with inspect's
        # own stack, seconds with ours. Here, not at import: MetaSchedule's builder and runner workers
        # import this package for build_kernel and alloc_sparse_arguments, and need no intrinsics
        load_tensor_intrinsics()
        self.model = model
        self.pretrained_root = pretrained_root
        self.finetune_after = int(finetune_after)
        self.finetune_epochs = finetune_epochs
        if platform not in (None, "cpu", METASCHEDULE_PLATFORM):
            raise UnknownKindError("CognateModel platform", platform, ["cpu", METASCHEDULE_PLATFORM])
        self.platform = platform
        self.op: Op | None = None
        self.matrix: sp.csr_matrix | None = None
        self.feat: int | None = None
        self.space: CPUSpace | None = None
        self._variants: list[Variant] = []
        self._candidates: set[CPUConfig] | None = None
        self.records: list[tuple[CPUConfig, float]] = []  # (config, time in ms)
        self.pending = 0
        self.finetunes = 0
        self._scores: dict[CPUConfig, float] = {}
        if op is not None or matrix is not None or feat is not None:
            if op is None or matrix is None or feat is None:
                raise ValueError("give op, matrix and feat together (or none, and call set_workload later)")
            self.set_workload(op, matrix, feat)

    def set_workload(self, op: str | Op, matrix: sp.csr_matrix, feat: int, *,
                     num_threads: int | None = None) -> "CognateModel":
        """The sparse workload being tuned (op, its matrix, the dense width, the kernels' threads);
        loads the shipped CPU model of that thread count (or the closest that ships) if needed."""
        self.op, self.matrix, self.feat = get_op(op), sp.csr_matrix(matrix), int(feat)
        self.space = CPUSpace(self.op)
        self._variants = variants(self.op, self.feat)
        # what tune would rank on that many threads (on 2+, the parallel configs): the rest go last,
        # as a model trained on multi-thread timings of parallel kernels never saw a serial one
        self._candidates = set(self.space.candidates(num_threads)) if num_threads is not None else None
        self._scores.clear()
        if self.model is None:
            from ..model.loading import load_shipped_model

            self.model, source, notes = load_shipped_model(self.op.name, self.shipped_platform(num_threads),
                                                           root=self.pretrained_root, threads=num_threads)
            log.info("CognateModel: loaded the shipped %s model %s", self.op.name, source)
            for note in notes:
                log.warning("CognateModel: %s", note)
        return self

    def shipped_platform(self, num_threads: int | None) -> str:
        """The shipped models this adapter loads (`platform`, or `shipped_platform` of the op)."""
        return self.platform or shipped_platform(self.op, num_threads, root=self.pretrained_root)

    def _need_workload(self) -> None:
        if self.matrix is None:
            raise InvalidConfigError("CognateModel does not know the workload's matrix: tune with "
                                     "cognate_tvm.metaschedule.tune_sparse, or call set_workload(op, matrix, feat)")

    def decode(self, candidates: Sequence) -> list[CPUConfig]:
        self._need_workload()
        configs = [config_from_knobs(knobs_from_trace(c.sch.trace), self._variants) for c in candidates]
        for config in configs:
            self.space.check(config)
        return configs

    def predict(self, context, candidates) -> np.ndarray:
        """Each candidate's merit, float64, > 0 and higher = predicted faster: `merit` of the model's score."""
        configs = self.decode(candidates)
        todo = list(dict.fromkeys(c for c in configs if c not in self._scores))
        if todo:
            scores = self.model.predict(self.matrix, todo, space=self.space, feat=self.feat)
            self._scores.update(zip(todo, (float(s) + self._outside_penalty(c) for c, s in zip(todo, scores))))
        return merit(np.array([self._scores[c] for c in configs], dtype=np.float64))

    def _outside_penalty(self, config: CPUConfig) -> float:
        """OUTSIDE_CANDIDATES for a config that is not a candidate at the workload's thread count, else 0."""
        return 0.0 if self._candidates is None or config in self._candidates else OUTSIDE_CANDIDATES

    def update(self, context, candidates, results) -> None:
        """Record (config, time) of each successful run; fine-tune when enough are new."""
        for config, result in zip(self.decode(candidates), results):
            if result.error_msg is not None or not result.run_secs:
                log.info("skipping failed run of %s: %s", config.to_json(), result.error_msg)
                continue
            self.records.append((config, record_ms(result.run_secs)))
            self.pending += 1
        if self.finetune_after and self.pending >= self.finetune_after:
            self._finetune()

    def group(self) -> Group:
        """The measurements so far as one ranking group (repeated configs averaged)."""
        times: dict[CPUConfig, list[float]] = {}
        for config, ms_ in self.records:
            times.setdefault(config, []).append(ms_)
        configs = tuple(times)
        return Group(name="metaschedule", matrix=self.matrix, feat=self.feat, configs=configs,
                     times_ms=np.array([np.mean(times[c]) for c in configs], dtype=np.float64))

    def _finetune(self) -> None:
        group = self.group()
        if len(group.configs) < 2:
            return  # one config cannot teach a ranking; wait for more
        log.info("fine-tuning on %d measured configs", len(group.configs))
        self.model.finetune([group], space=self.space, epochs=self.finetune_epochs)
        self.pending = 0
        self.finetunes += 1
        self._scores.clear()

    def save(self, path: str) -> None:
        if self.model is None:
            raise InvalidConfigError("CognateModel has no model to save yet (its workload is not known)")
        self.model.save(path)

    def load(self, path: str) -> None:
        from ..model.cognate import CognateCostModel

        self.model = (type(self.model) if self.model is not None else CognateCostModel).load(path)
        self._scores.clear()

