"""COGNATE inside TVM MetaSchedule: a cost-model adapter and sparse (CSR SpMM, SDDMM) workloads.

>>> from cognate_tvm import CognateModel                                        # doctest: +SKIP
>>> from cognate_tvm.metaschedule import tune_sparse                            # doctest: +SKIP
>>> result = tune_sparse("spmm", A, feat=128, max_trials=16, work_dir="ms", cost_model=CognateModel())  # doctest: +SKIP

`CognateModel` is a thin `PyCostModel` adapter: it decodes each candidate's
trace into a :class:`~cognate_tvm.space.cpu.CPUConfig`, asks the wrapped
:class:`~cognate_tvm.model.cognate.CognateCostModel` for scores, and hands the
measured times back to its ``finetune``. With no arguments it loads, when the
workload becomes known (`tune_sparse` tells it; `set_workload` by hand), the
shipped model of MetaSchedule's kernels for the op and thread count where one
ships (`shipped_platform`), else the shipped CPU model of the op and thread
count (``tuner.load_shipped_model``).

The workloads are TensorIR specialized to one matrix (M, K, nnz and N are
constants, as ``ArgInfo.from_prim_func`` needs), a "row" block per row and an
"update" block over the row's nonzeros (k) and the dense columns (j):

- SpMM: ``C[i, j] += vals[p] * B[indices[p], j]`` (j spatial, k a reduction);
- SDDMM: ``O[p] += vals[p] * X[i, j] * Y[indices[p], j]`` (k spatial, j a reduction).

The space (:func:`sparse_space`) is a list of design spaces, one per
structural *variant* (:func:`variants`): loop order, vector width, unroll,
parallel and chunk, which change the instruction sequence; inside each, two
``sample_categorical`` draws give the row tile I (from
:data:`~cognate_tvm.space.cpu.I_TILES`) and the dense tile J (from
:data:`~cognate_tvm.space.cpu.J_TILES`, dividing N, a multiple of the vector
width). A first single-valued draw records the variant's index in the trace.
Every knob value is read from ``space/cpu.py`` at call time, so the schedule
follows the CPU space when it changes. The schedule of a variant:

1. split the row loop into (i1, i0) with i0 of extent I; with chunk c > 0
   split i1 into (c1, w, c0) with w the target's cores and c0 of extent c,
   move w outermost and run it in parallel (round-robin chunks of row tiles,
   the CPU kernels' chunk); else run i1 in parallel (or not);
2. split the dense loop into (j1, j0) with j0 of extent J, and reorder the
   update's loops into the variant's order: (k0, j1, j0) nonzero-major,
   (j1, k0, j0) dense-tile-major, or (j1, j0, k0) sparse-innermost;
3. with a vector width V: split j0 into (jo, jv), vectorize jv, unroll jo if asked.

The config of a candidate (:func:`config_from_knobs`) is the CPU space's
plain-CSR config with those fields; `docs/metaschedule.md` says which share of
the CPU space these variants reach and what differs from the CPU kernels
(register accumulators; SDDMM's j loop is a reduction that TVM does not
vectorize, so SDDMM reaches only the sparse-innermost order).

Real CSR arrays reach the runner (random index arrays read out of bounds):
`tune_sparse` writes them to an ``.npz`` file and the ``LocalRunner``'s
``f_alloc_argument`` is :func:`alloc_sparse_arguments` bound to that path.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from .backends.base import WRONG_OUTPUT, check_output, rotated_order
from .data import Group
from .errors import InvalidConfigError, ShapeError, UnknownKindError
from .ops import Op, get_op
from .space import cpu as cpu_space
from .space.cpu import CPUConfig, CPUSpace
from .tvm_intrinsics import load_tensor_intrinsics

log = logging.getLogger(__name__)

# The sampled knobs, in the order the space draws them (and the trace records them).
KNOB_ORDER: tuple[str, ...] = ("variant", "i_tile", "j_tile")
ROW_BLOCK = "row"
VARIANT_ANNOTATION = "cognate_variant"
UPDATE_BLOCK = "update"
SEED_DENSE = 7  # seed of the dense operands fed to the runner
BUILD_TIMEOUT_S = 180  # per batch of builds; the default 30 s is too short on a loaded 2-core machine
# The update block's loop orders that schedule primitives reach, as the CPU space names them (k1 has one
# iteration in plain CSR): what follows i1, i0.
NONZERO_MAJOR = ("k0", "j1", "j0")
TILE_MAJOR = ("j1", "k0", "j0")
SPARSE_INNERMOST = ("j1", "j0", "k0")
# SDDMM's dense loop is a reduction: TVM vectorizes no reduction loop, and rfactor cannot follow the
# data-dependent nonzero index, so only the scalar order maps onto a CPU-space config.
ORDERS = {"spmm": (NONZERO_MAJOR, TILE_MAJOR, SPARSE_INNERMOST), "sddmm": (SPARSE_INNERMOST,)}
# Shipped models of these kernels (``pretrained/<op>-cpu-metaschedule-<T>t``): fine-tuned from the CPU
# models on MetaSchedule's own kernels, which time differently from tune's (benchmarks/metaschedule_finetune.py).
METASCHEDULE_PLATFORM = "cpu-metaschedule"


# -- variants and knobs ------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """The structural part of a schedule: what a Python branch (not a sampled value) decides."""

    inner: tuple[str, ...]  # loops after (i1, i0), one of ORDERS
    vector: int             # 1: no vectorized loop
    unroll: bool
    parallel: bool
    chunk: int

    def loop_order(self) -> tuple[str, ...]:
        """The CPU space's plain-CSR loop order of this nest (k1 placed as the space's CSR orders do)."""
        want = ("i1", "i0") + self.inner
        for order in cpu_space.CSR_ORDERS:
            if tuple(name for name in order if name != "k1") == want:
                return tuple(order)
        raise InvalidConfigError(f"the CPU space has no plain-CSR loop order {want}")


def _baseline() -> CPUConfig:
    base = CPUSpace("spmm").baseline()
    if not base.single_panel:
        raise InvalidConfigError(f"the CPU baseline {base.to_json()} is not plain CSR; the MetaSchedule "
                                 f"workloads are")
    return base


def j_tiles(variant: Variant, feat: int) -> tuple[int, ...]:
    """Dense tiles J of `variant` for width `feat`: divide it, and are multiples of (unroll: above) V."""
    lanes = max(1, variant.vector)
    return tuple(j for j in cpu_space.J_TILES if feat % j == 0 and j % lanes == 0 and j >= lanes
                 and (not variant.unroll or j > lanes))


def variants(op: str | Op, feat: int) -> list[Variant]:
    """The structural variants of `op`'s schedule for dense width `feat` (each valid in the CPU space)."""
    op = get_op(op)
    feat = int(feat)
    out = []
    parallel_modes = [(False, 0)] + [(True, c) for c in cpu_space.CHUNKS]
    for inner in ORDERS[op.name]:
        vectorized = inner[-1] == "j0"
        knobs = [(v, u) for v in cpu_space.VECTORS for u in (False, True)] if vectorized else [(1, False)]
        for (vector, unroll), (parallel, chunk) in ((k, p) for k in knobs for p in parallel_modes):
            variant = Variant(inner, vector, unroll, parallel, chunk)
            try:
                variant.loop_order()
            except InvalidConfigError:
                continue
            if j_tiles(variant, feat) and _valid(config_from_knobs(
                    {"variant": 0, "i_tile": cpu_space.I_TILES[0], "j_tile": j_tiles(variant, feat)[-1]},
                    [variant])):
                out.append(variant)
    if not out:
        raise ShapeError(f"dense width {feat} admits no {op.name} schedule: it must be a multiple of one of "
                         f"the dense tiles {cpu_space.J_TILES}")
    return out


def _valid(config: CPUConfig) -> bool:
    return CPUSpace("spmm").is_valid(config)


def config_from_knobs(knobs: dict[str, int], variant_list: Sequence[Variant]) -> CPUConfig:
    """The CPU-space config of a scheduled nest: the plain-CSR baseline with the variant's and the knobs' fields."""
    index = int(knobs["variant"])
    if not 0 <= index < len(variant_list):
        raise InvalidConfigError(f"variant {index} out of range (the space has {len(variant_list)})")
    v = variant_list[index]
    return dataclasses.replace(_baseline(), i_tile=int(knobs["i_tile"]), j_tile=int(knobs["j_tile"]),
                               loop_order=v.loop_order(), vector=v.vector, unroll=v.unroll, parallel=v.parallel,
                               chunk=v.chunk)


def knobs_from_trace(trace) -> dict[str, int]:
    """The sampled knob values of a schedule trace, named by :data:`KNOB_ORDER`."""
    values = [int(inst.attrs[0][int(trace.decisions[inst])]) for inst in trace.insts
              if inst.kind.name == "SampleCategorical"]
    if len(values) != len(KNOB_ORDER):
        raise InvalidConfigError(f"trace has {len(values)} SampleCategorical decisions {values}, "
                                 f"expected {len(KNOB_ORDER)} ({', '.join(KNOB_ORDER)})")
    return dict(zip(KNOB_ORDER, values))


# -- the workloads ---------------------------------------------------------------------------

def kernel_csr(matrix: sp.csr_matrix) -> sp.csr_matrix:
    """`matrix` with an explicit zero (column 0) in each row that has no nonzero.

    SpMM's init (which zeroes an output row) runs at a row's first nonzero, so a
    row without any would never be written; the stored zero makes the kernel
    write it without changing the product. Canonical CSR otherwise.
    """
    matrix = sp.csr_matrix(matrix, dtype=np.float32)
    lengths = np.diff(matrix.indptr)
    empty = np.flatnonzero(lengths == 0)
    if empty.size == 0:
        return matrix
    rows = np.concatenate([np.repeat(np.arange(matrix.shape[0]), lengths), empty])
    cols = np.concatenate([matrix.indices, np.zeros(empty.size, dtype=matrix.indices.dtype)])
    vals = np.concatenate([matrix.data, np.zeros(empty.size, dtype=np.float32)])
    order = np.lexsort((cols, rows))
    indptr = np.concatenate([[0], np.cumsum(np.maximum(lengths, 1))])
    return sp.csr_matrix((vals[order], cols[order], indptr), shape=matrix.shape)  # arrays keep explicit zeros


def workload_csr(op: str | Op, matrix: sp.csr_matrix) -> sp.csr_matrix:
    """The CSR arrays the workload of `op` reads (SpMM: `kernel_csr`; SDDMM: canonical, outputs per nonzero)."""
    return kernel_csr(matrix) if get_op(op).name == "spmm" else sp.csr_matrix(matrix, dtype=np.float32)


_SPMM_BODY = '''
    B = T.match_buffer(b_h, ({cols}, {feat}), "float32")
    C = T.match_buffer(c_h, ({rows}, {feat}), "float32")
    for i in T.serial({rows}):
        with T.sblock("{row}"):
            vi = T.axis.spatial({rows}, i)
            T.reads(indptr[vi:vi + 2], indices[0:{nnz}], vals[0:{nnz}], B[0:{cols}, 0:{feat}])
            T.writes(C[vi, 0:{feat}])
            for k, j in T.grid(indptr[vi + 1] - indptr[vi], {feat}):
                with T.sblock("{update}"):
                    vk = T.axis.reduce(indptr[vi + 1] - indptr[vi], k)
                    vj = T.axis.spatial({feat}, j)
                    T.reads(indptr[vi], indices[indptr[vi] + vk], vals[indptr[vi] + vk],
                            B[indices[indptr[vi] + vk], vj])
                    T.writes(C[vi, vj])
                    with T.init():
                        C[vi, vj] = T.float32(0)
                    C[vi, vj] = C[vi, vj] + vals[indptr[vi] + vk] * B[indices[indptr[vi] + vk], vj]
'''

_SDDMM_BODY = '''
    X = T.match_buffer(x_h, ({rows}, {feat}), "float32")
    Y = T.match_buffer(y_h, ({cols}, {feat}), "float32")
    O = T.match_buffer(o_h, ({nnz},), "float32")
    for i in T.serial({rows}):
        with T.sblock("{row}"):
            vi = T.axis.spatial({rows}, i)
            T.reads(indptr[vi:vi + 2], indices[0:{nnz}], vals[0:{nnz}], X[vi, 0:{feat}], Y[0:{cols}, 0:{feat}])
            T.writes(O[indptr[vi]:indptr[vi + 1]])
            for k, j in T.grid(indptr[vi + 1] - indptr[vi], {feat}):
                with T.sblock("{update}"):
                    vk = T.axis.spatial(indptr[vi + 1] - indptr[vi], k)
                    vj = T.axis.reduce({feat}, j)
                    T.reads(indptr[vi], indices[indptr[vi] + vk], vals[indptr[vi] + vk], X[vi, vj],
                            Y[indices[indptr[vi] + vk], vj])
                    T.writes(O[indptr[vi] + vk])
                    with T.init():
                        O[indptr[vi] + vk] = T.float32(0)
                    O[indptr[vi] + vk] = O[indptr[vi] + vk] + vals[indptr[vi] + vk] * X[vi, vj] * \\
                        Y[indices[indptr[vi] + vk], vj]
'''


def sparse_prim_func(op: str | Op, matrix: sp.csr_matrix, feat: int):
    """TensorIR of `op` specialized to `matrix`'s shapes (arguments: indptr, indices, vals, dense..., out).

    The kernel reads ``workload_csr(op, matrix)`` (nnz counts SpMM's padding zeros).
    """
    op = get_op(op)
    matrix = workload_csr(op, matrix)
    rows, cols = matrix.shape
    nnz, feat = int(matrix.nnz), int(feat)
    if feat < 1 or nnz < 1:
        raise ShapeError(f"{op.name} workload needs nnz >= 1 and feat >= 1, got nnz={nnz}, feat={feat}")
    dense = ("b_h", "c_h") if op.name == "spmm" else ("x_h", "y_h", "o_h")
    body = (_SPMM_BODY if op.name == "spmm" else _SDDMM_BODY).format(
        rows=rows, cols=cols, nnz=nnz, feat=feat, row=ROW_BLOCK, update=UPDATE_BLOCK)
    source = (f"@T.prim_func(s_tir=True)\n"
              f"def main(indptr_h: T.handle, indices_h: T.handle, vals_h: T.handle, "
              f"{', '.join(f'{d}: T.handle' for d in dense)}):\n"
              f'    T.func_attr({{"global_symbol": "main", "tirx.noalias": True}})\n'
              f'    indptr = T.match_buffer(indptr_h, ({rows + 1},), "int32")\n'
              f'    indices = T.match_buffer(indices_h, ({nnz},), "int32")\n'
              f'    vals = T.match_buffer(vals_h, ({nnz},), "float32")' + body)
    return tvm.script.from_source(source)


def sparse_module(op: str | Op, matrix: sp.csr_matrix, feat: int) -> tvm.IRModule:
    """The workload as an IRModule (pass the same module to tuning and to the database)."""
    return tvm.IRModule({"main": sparse_prim_func(op, matrix, feat)})


def schedule_variant(sch, index: int, variant: Variant, feat: int, workers: int,
                     tiles: tuple[int, int] | None = None) -> None:
    """Apply `variant` (number `index` of the space) to `sch`, drawing I and J (see the module docstring);
    `tiles` = (I, J) fixes both draws to one value each."""
    i_tiles, tiles = ((tiles[0],), (tiles[1],)) if tiles else (tuple(cpu_space.I_TILES), j_tiles(variant, feat))
    variant_rv = sch.sample_categorical(candidates=[int(index)], probs=[1.0])
    # Used by an annotation, so trace simplification keeps the draw that names the variant.
    sch.annotate(sch.get_sblock(ROW_BLOCK), VARIANT_ANNOTATION, variant_rv)
    i_tile = sch.sample_categorical(candidates=list(i_tiles), probs=[1.0 / len(i_tiles)] * len(i_tiles))
    j_tile = sch.sample_categorical(candidates=list(tiles), probs=[1.0 / len(tiles)] * len(tiles))
    (i,) = sch.get_loops(sch.get_sblock(ROW_BLOCK))
    i1, _ = sch.split(i, factors=[None, i_tile])
    if variant.parallel and variant.chunk:
        c1, w, _ = sch.split(i1, factors=[None, int(workers), int(variant.chunk)])
        sch.reorder(w, c1)
        sch.parallel(w)
    elif variant.parallel:
        sch.parallel(i1)
    update = sch.get_sblock(UPDATE_BLOCK)
    k, j = sch.get_loops(update)[-2:]
    j1, j0 = sch.split(j, factors=[None, j_tile])
    loops = {"k0": k, "j1": j1, "j0": j0}
    if variant.inner != NONZERO_MAJOR:
        sch.reorder(*(loops[name] for name in variant.inner))
    if variant.vector > 1:
        jo, jv = sch.split(j0, factors=[None, int(variant.vector)])
        sch.vectorize(jv)
        if variant.unroll:
            sch.unroll(jo)


def schedule_config(op: str | Op, matrix: sp.csr_matrix, feat: int, config: CPUConfig, *, workers: int
                    ) -> tvm.IRModule:
    """The workload on `matrix` scheduled as `config` (one point of the MetaSchedule space), to build and time.

    Raises InvalidConfigError for a config outside the space (column panels, a loop
    order or tile the workload's variants lack for this width).
    """
    variant_list = variants(op, feat)
    for index, variant in enumerate(variant_list):
        if config_from_knobs({"variant": index, "i_tile": config.i_tile, "j_tile": config.j_tile},
                             variant_list) == config and config.j_tile in j_tiles(variant, feat):
            sch = tvm.s_tir.Schedule(sparse_module(op, matrix, feat))
            schedule_variant(sch, index, variant, feat, workers, tiles=(config.i_tile, config.j_tile))
            return sch.mod
    raise InvalidConfigError(f"config {config.to_json()} is outside the MetaSchedule space of "
                             f"{get_op(op).name} at N={feat}")


def _schedule_all(sch, *, op: str, feat: int, workers: int) -> list:
    out = []
    for index, variant in enumerate(variants(op, feat)):
        copy = sch.copy()
        schedule_variant(copy, index, variant, feat, workers)
        out.append(copy)
    return out


def sparse_space(op: str | Op, feat: int, workers: int) -> ms.space_generator.ScheduleFn:
    """ScheduleFn space of the workload: one design space per variant, no postprocessors.

    The default postprocessors include ``DisallowDynamicLoop``, which rejects
    every schedule of a CSR loop; none is needed here.
    """
    op = get_op(op)
    variants(op, feat)  # fail early on an unusable width
    return ms.space_generator.ScheduleFn(
        functools.partial(_schedule_all, op=op.name, feat=int(feat), workers=int(workers)),
        sch_rules=[], postprocs=[], mutator_probs={})


# -- the cost model adapter --------------------------------------------------------------

def record_ms(run_secs) -> float:
    """A MetaSchedule measurement's time in ms: the mean of its repeats (`run_secs`, TVM floats)."""
    return 1e3 * float(np.mean([float(s) for s in run_secs]))


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
    from .model.pretrained import available_pretrained, threaded_platform

    wanted = (get_op(op).name, threaded_platform(METASCHEDULE_PLATFORM, num_threads))
    return METASCHEDULE_PLATFORM if wanted in available_pretrained(root=root) else "cpu"


@derived_object
class CognateModel(ms.cost_model.PyCostModel):
    """MetaSchedule cost model backed by a `CognateCostModel` (a thin adapter).

    Parameters
    ----------
    model : CognateCostModel or None
        The wrapped model; None loads the shipped CPU model of the workload's op and
        thread count (``tuner.load_shipped_model(op, "cpu", threads=...)``) once the
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
        # import this module for build_kernel and alloc_sparse_arguments, and need no intrinsics
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
            from .tuner import load_shipped_model

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
        from .model.cognate import CognateCostModel

        self.model = (type(self.model) if self.model is not None else CognateCostModel).load(path)
        self._scores.clear()


# -- tuning ------------------------------------------------------------------------------

def save_sparse_arguments(op: str | Op, matrix: sp.csr_matrix, feat: int, path: str | os.PathLike, *,
                          seed: int = SEED_DENSE) -> Path:
    """Write the workload's input arrays (CSR and seeded dense operands) for :func:`alloc_sparse_arguments`."""
    op = get_op(op)
    path = Path(path)
    np.savez(path, *_host_inputs(op, matrix, feat, seed))
    return path


def _host_inputs(op: Op, matrix: sp.csr_matrix, feat: int, seed: int) -> list[np.ndarray]:
    csr = workload_csr(op, matrix)
    dense = op.make_dense_inputs(sp.csr_matrix(matrix), int(feat), seed=seed)
    return [csr.indptr.astype(np.int32), csr.indices.astype(np.int32), csr.data.astype(np.float32)] + dense


def device_inputs(op: str | Op, matrix: sp.csr_matrix, feat: int, seed: int = 11, device=None) -> list:
    """The workload's inputs on `device` (the CPU by default): CSR arrays and seeded dense operands, as
    `BuiltKernel` passes them to every kernel of `matrix`."""
    op, device = get_op(op), device or tvm.cpu()
    return [tvm.runtime.tensor(a, device)
            for a in _host_inputs(op, sp.csr_matrix(matrix, dtype=np.float32), feat, seed)]


def alloc_sparse_arguments(device, args_info, alloc_repeat: int, *, path: str) -> list[list]:
    """LocalRunner ``f_alloc_argument``: the workload's inputs from the `.npz` at `path`, output last."""
    arrays = np.load(path)
    host = [arrays[f"arr_{n}"] for n in range(len(arrays.files))]
    shapes = [tuple(int(d) for d in info[2]) for info in args_info]
    if len(shapes) != len(host) + 1:
        raise ShapeError(f"{path}: {len(host)} input arrays where the kernel takes {len(shapes) - 1}")
    for array, shape in zip(host, shapes):
        if array.shape != shape:
            raise ShapeError(f"{path}: array of shape {array.shape} where the kernel takes {shape}")
    return [[tvm.runtime.tensor(a, device) for a in host] + [tvm.runtime.empty(shapes[-1], "float32", device)]
            for _ in range(alloc_repeat)]


def build_kernel(mod, target, _params=None):
    """LocalBuilder ``f_build``: plain ``tvm.tirx.build``.

    MetaSchedule's default build first imports ``tvm.s_tir.tensor_intrin`` in
    every builder process (88 s in a fresh process with TVM's ``inspect.stack``
    calls; ``tvm_intrinsics`` says why); these kernels use no tensor intrinsics.
    """
    return tvm.tirx.build(mod, target=target)


def _set_num_threads(num_threads: int) -> None:
    """Runner worker initializer: size TVM's thread pool before it starts."""
    os.environ["TVM_NUM_THREADS"] = str(int(num_threads))


class BuiltKernel:
    """A scheduled workload built once, on `matrix` with seeded dense operands: its output can be
    checked and it can be timed as often as asked (re-timing rounds reuse one build)."""

    def __init__(self, op: str | Op, mod, matrix: sp.csr_matrix, feat: int, target, *, seed: int = 11,
                 inputs: Sequence | None = None):
        self.op, self.feat, self.seed = get_op(op), int(feat), seed
        self.matrix = sp.csr_matrix(matrix, dtype=np.float32)
        self.lib = tvm.tirx.build(mod, target=target)
        self.dev = tvm.cpu()
        # Kernels of one matrix only read their inputs, so they may share one copy (`device_inputs`):
        # a hundred kernels of a 100k-row matrix, each with its own, held 24 GB.
        self.args = list(inputs) if inputs is not None else device_inputs(self.op, self.matrix, feat, seed)
        self.out_shape = ((self.matrix.shape[0], self.feat) if self.op.name == "spmm"
                          else (int(workload_csr(self.op, self.matrix).nnz),))

    def output(self) -> np.ndarray:
        """One run into a NaN-filled output (an unwritten element stays NaN)."""
        out = tvm.runtime.tensor(np.full(self.out_shape, np.nan, dtype=np.float32), self.dev)
        self.lib["main"](*self.args, out)
        return out.numpy()

    def correct(self) -> bool:
        """True when the output matches scipy's."""
        dense = self.op.make_dense_inputs(self.matrix, self.feat, seed=self.seed)
        return check_output(self.op, self.matrix, dense, self.output())

    def time_ms(self, *, repeat: int = 7, min_repeat_ms: int = 20) -> float:
        """Median time in ms over `repeat` runs of TVM's time_evaluator."""
        out = tvm.runtime.empty(self.out_shape, "float32", self.dev)
        timer = self.lib.time_evaluator("main", self.dev, number=1, repeat=int(repeat),
                                        min_repeat_ms=int(min_repeat_ms))
        return float(np.median(np.asarray(timer(*self.args, out).results)) * 1e3)


def time_side_by_side(kernels: Sequence[BuiltKernel], rounds: int) -> list[list[float]]:
    """Each kernel's time in ms in each of `rounds` rounds that time them all, the order rotated every
    round (`rotated_order`)."""
    samples: list[list[float]] = [[] for _ in kernels]
    for r in range(rounds):
        for n in rotated_order(len(kernels), r):
            samples[n].append(kernels[n].time_ms())
    return samples


def run_schedule(op: str | Op, mod, matrix: sp.csr_matrix, feat: int, target, *, seed: int = 11) -> np.ndarray:
    """Build the scheduled `mod` and run it once on `matrix` with seeded dense operands; returns the output."""
    return BuiltKernel(op, mod, matrix, feat, target, seed=seed).output()


def time_module(op: str | Op, mod, matrix: sp.csr_matrix, feat: int, target, *, repeat: int = 7,
                min_repeat_ms: int = 20, seed: int = 11) -> float:
    """Median time in ms of the (scheduled or default) workload `mod` on `matrix`, with TVM's time_evaluator."""
    return BuiltKernel(op, mod, matrix, feat, target, seed=seed).time_ms(repeat=repeat, min_repeat_ms=min_repeat_ms)


def schedule_is_correct(op: str | Op, mod, matrix: sp.csr_matrix, feat: int, target, *, seed: int = 11) -> bool:
    """True when the scheduled `mod`'s output matches scipy's on `matrix`."""
    return BuiltKernel(op, mod, matrix, feat, target, seed=seed).correct()


@derived_object
class TrialLog(ms.measure_callback.PyMeasureCallback):
    """Measure callback: every measured candidate's config and time, in the order the search measured
    them (the database keeps records sorted by time, so a search's best after its first t trials is
    only known from here)."""

    def __init__(self, variant_list: Sequence[Variant]):
        self.variant_list = list(variant_list)
        self.trials: list[tuple[CPUConfig, float | None]] = []

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        for candidate, built, ran in zip(measure_candidates, builder_results, runner_results):
            config = config_from_knobs(knobs_from_trace(candidate.sch.trace), self.variant_list)
            ok = built.error_msg is None and ran.error_msg is None and ran.run_secs
            self.trials.append((config, record_ms(ran.run_secs) if ok else None))


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
    from .kernels.cpu import cpu_target

    if isinstance(target, str):
        if target != "llvm":
            raise UnknownKindError("MetaSchedule target", target, ["llvm"])
        return cpu_target(num_threads, mcpu)
    if target.kind.name != "llvm":
        raise UnknownKindError("MetaSchedule target", target.kind.name, ["llvm"])
    return target


def builder_and_runner(inputs: str | os.PathLike, num_threads: int) -> tuple:
    """MetaSchedule's LocalBuilder (plain `build_kernel`) and LocalRunner (the workload's real inputs from the
    `.npz` at `inputs`, kernels on `num_threads` threads), as `tune_sparse`'s searches measure."""
    runner = ms.runner.LocalRunner(
        # 3 repeats (each >= 20 ms), their mean the record: with 1, one noisy sample on a shared machine
        # decided a record, and the search's ranking of its own measurements
        evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=3, min_repeat_ms=20),
        f_alloc_argument=functools.partial(alloc_sparse_arguments, path=str(inputs)),
        initializer=functools.partial(_set_num_threads, num_threads))
    builder = ms.builder.LocalBuilder(max_workers=max(1, num_threads), timeout_sec=BUILD_TIMEOUT_S,
                                      f_build=build_kernel)
    return builder, runner


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
        raise RuntimeError(f"MetaSchedule produced no successful record (see the logs in {work_dir})")
    shortlist = _finalists(op, mod, records, matrix, feat, tvm_target, variant_list, finalists)
    if not shortlist.kernels:
        raise RuntimeError(f"none of the {len(records)} MetaSchedule records computes the right output "
                           f"(see the logs in {work_dir})")
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


def reachable_configs(op: str | Op, feat: int) -> list[CPUConfig]:
    """The CPU-space configs that the MetaSchedule schedule of `op` reaches at width `feat`, each once,
    in the order of the variants and their (I, J) draws."""
    op = get_op(op)
    variant_list = variants(op, feat)
    reached = (config_from_knobs({"variant": index, "i_tile": i_tile, "j_tile": j_tile}, variant_list)
               for index, variant in enumerate(variant_list)
               for i_tile in cpu_space.I_TILES for j_tile in j_tiles(variant, feat))
    return list(dict.fromkeys(reached))


def space_coverage(op: str | Op, feat: int) -> dict:
    """How much of the CPU space the MetaSchedule schedule of `op` reaches at width `feat`.

    Returns {"reached": configs the variants and knobs produce, "space": the CPU
    space's size, "plain_csr": its plain-CSR configs}.
    """
    every = CPUSpace(op).configs()
    return {"reached": len(reachable_configs(op, feat)), "space": len(every),
            "plain_csr": sum(c.single_panel for c in every)}
