"""COGNATE inside TVM MetaSchedule: a cost-model adapter and a sparse (CSR SpMM) workload.

`CognateModel` is a thin `PyCostModel` adapter: it decodes each MetaSchedule
candidate's sampled knobs into a :class:`~cognate_tvm.space.cpu.CPUConfig`,
asks the wrapped :class:`~cognate_tvm.model.cognate.CognateCostModel` for
scores, and hands measured times back to the wrapped model's ``finetune``.
Everything it knows about costs lives in ``model/``.

The workload (:func:`spmm_prim_func`) is C = A @ B with A in CSR, written as
TensorIR specialized to one matrix (M, K, nnz and the dense width N are
constants, as ``ArgInfo.from_prim_func`` needs) with a "row" block per row and a
reduction "update" block over the row's nonzeros and the dense columns.
:func:`spmm_space` schedules it with one fixed instruction sequence whose
factors come from three ``sample_categorical`` draws, in :data:`KNOB_ORDER`:

1. ``i_tile`` (I, from :data:`~cognate_tvm.space.cpu.I_TILES`): the row loop is
   split into (i1, i0) with i0 of extent I; i1 runs in parallel.
2. ``j_tile`` (J, the tiles of :data:`~cognate_tvm.space.cpu.J_TILES` that divide N):
   the dense loop is split into (j1, j0) with j0 of extent J.
3. ``vector`` (V, the widths of :data:`~cognate_tvm.space.cpu.VECTORS` that divide N):
   j0 is split into (jo, jv) and jv is vectorized.

The loop nest is then (i1 parallel, i0, k0, j1, jo, jv): each nonzero of a row
updates the row's whole output, one dense tile at a time. Its CPU-space config
(:func:`config_from_knobs`) is therefore ``CPUConfig(i_tile=I, k_panel=0,
j_tile=J, loop_order=("i1", "i0", "k1", "k0", "j1", "j0"), vector=V,
unroll=False, parallel=True, chunk=0)`` — plain CSR, the space's nonzero-major
order, no unrolling, contiguous parallel row tiles — which goes through the
model's usual mapper (shared coordinates log2 I, log2 K = log2 cols, log2 J and
the order; knobs log2 V, unroll, parallel, chunk). Because J divides N,
``CPUConfig.dense_tile(N) == J``, so the model sees exactly the tile that runs.

Real CSR arrays must reach the runner (random index arrays read out of bounds):
:func:`tune_spmm_metaschedule` writes them to an ``.npz`` file and the
``LocalRunner``'s ``f_alloc_argument`` is :func:`alloc_csr_arguments` bound to
that path (an importable module-level function, so the runner's worker
process unpickles it by reference).
"""
from __future__ import annotations

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

from .data import Group
from .errors import InvalidConfigError, ShapeError
from .space.base import Space
from .space.cpu import CPUConfig, I_TILES, J_TILES, PANEL_ORDERS, VECTORS

log = logging.getLogger(__name__)

# The sampled knobs, in the order the space draws them (and the trace records them).
KNOB_ORDER: tuple[str, ...] = ("i_tile", "j_tile", "vector")
# The loop order of the scheduled nest (plain CSR: k1 has one iteration).
NEST_ORDER: tuple[str, ...] = PANEL_ORDERS[6]
ROW_BLOCK = "row"
UPDATE_BLOCK = "update"
SEED_B = 7  # seed of the dense operand B fed to the runner


# -- the workload ---------------------------------------------------------------------

def knob_candidates(feat: int) -> dict[str, tuple[int, ...]]:
    """The values each knob may take for dense width `feat` (J and V must divide it)."""
    feat = int(feat)
    vectors = tuple(v for v in VECTORS if feat % v == 0)
    tiles = tuple(j for j in J_TILES if feat % j == 0)
    if not vectors or not tiles:
        raise ShapeError(f"dense width {feat} must be a multiple of one of the vector widths {VECTORS} "
                         f"and one of the dense tiles {J_TILES}")
    return {"i_tile": tuple(I_TILES), "j_tile": tiles, "vector": vectors}


def kernel_csr(matrix: sp.csr_matrix) -> sp.csr_matrix:
    """`matrix` with an explicit zero (column 0) in each row that has no nonzero.

    The update block's init (which zeroes an output row) runs at a row's first
    nonzero, so a row without any would never be written; the stored zero makes
    the kernel write it without changing the product. A matrix with no empty
    row is returned as canonical CSR unchanged.
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
    # Built from arrays (not COO) so the explicit zeros are kept.
    return sp.csr_matrix((vals[order], cols[order], indptr), shape=matrix.shape)


def spmm_prim_func(matrix: sp.csr_matrix, feat: int):
    """TensorIR CSR SpMM ``C[M, feat] = A @ B`` specialized to `matrix`'s shapes.

    The kernel reads ``kernel_csr(matrix)`` (nnz counts its padding zeros).
    Arguments in order: ``indptr`` (int32 [M + 1]), ``indices`` (int32 [nnz]),
    ``vals`` (float32 [nnz]), ``B`` (float32 [K, feat]), ``C`` (float32 [M, feat]).
    """
    matrix = kernel_csr(matrix)
    rows, cols = matrix.shape
    nnz, feat = int(matrix.nnz), int(feat)
    if feat < 1 or nnz < 1:
        raise ShapeError(f"SpMM workload needs nnz >= 1 and feat >= 1, got nnz={nnz}, feat={feat}")
    source = f'''
@T.prim_func(s_tir=True)
def main(indptr_h: T.handle, indices_h: T.handle, vals_h: T.handle, b_h: T.handle, c_h: T.handle):
    T.func_attr({{"global_symbol": "main", "tirx.noalias": True}})
    indptr = T.match_buffer(indptr_h, ({rows + 1},), "int32")
    indices = T.match_buffer(indices_h, ({nnz},), "int32")
    vals = T.match_buffer(vals_h, ({nnz},), "float32")
    B = T.match_buffer(b_h, ({cols}, {feat}), "float32")
    C = T.match_buffer(c_h, ({rows}, {feat}), "float32")
    for i in T.serial({rows}):
        with T.sblock("{ROW_BLOCK}"):
            vi = T.axis.spatial({rows}, i)
            T.reads(indptr[vi:vi + 2], indices[0:{nnz}], vals[0:{nnz}], B[0:{cols}, 0:{feat}])
            T.writes(C[vi, 0:{feat}])
            for k, j in T.grid(indptr[vi + 1] - indptr[vi], {feat}):
                with T.sblock("{UPDATE_BLOCK}"):
                    vk = T.axis.reduce(indptr[vi + 1] - indptr[vi], k)
                    vj = T.axis.spatial({feat}, j)
                    T.reads(indptr[vi], indices[indptr[vi] + vk], vals[indptr[vi] + vk],
                            B[indices[indptr[vi] + vk], vj])
                    T.writes(C[vi, vj])
                    with T.init():
                        C[vi, vj] = T.float32(0)
                    C[vi, vj] = C[vi, vj] + vals[indptr[vi] + vk] * B[indices[indptr[vi] + vk], vj]
'''
    return tvm.script.from_source(source)


def spmm_module(matrix: sp.csr_matrix, feat: int) -> tvm.IRModule:
    """The workload as an IRModule (pass the same module to tuning and to the database)."""
    return tvm.IRModule({"main": spmm_prim_func(matrix, feat)})


def schedule_spmm(sch, feat: int) -> None:
    """Apply the sampled schedule to `sch` (one fixed instruction sequence; see module docstring)."""
    candidates = knob_candidates(feat)
    draws = {}
    for name in KNOB_ORDER:
        values = candidates[name]
        draws[name] = sch.sample_categorical(candidates=list(values), probs=[1.0 / len(values)] * len(values))
    row = sch.get_sblock(ROW_BLOCK)
    (i,) = sch.get_loops(row)
    i1, _ = sch.split(i, factors=[None, draws["i_tile"]])
    sch.parallel(i1)
    update = sch.get_sblock(UPDATE_BLOCK)
    j = sch.get_loops(update)[-1]
    _, j0 = sch.split(j, factors=[None, draws["j_tile"]])
    _, jv = sch.split(j0, factors=[None, draws["vector"]])
    sch.vectorize(jv)


def spmm_space(feat: int) -> ms.space_generator.ScheduleFn:
    """ScheduleFn space generator of the workload, without postprocessors.

    The default postprocessors include ``DisallowDynamicLoop``, which rejects
    every schedule of a CSR loop; none is needed here.
    """
    knob_candidates(feat)  # fail early on an unusable width
    return ms.space_generator.ScheduleFn(functools.partial(schedule_spmm, feat=int(feat)),
                                         sch_rules=[], postprocs=[], mutator_probs={})


# -- decoding traces ------------------------------------------------------------------

def knobs_from_trace(trace) -> dict[str, int]:
    """The sampled knob values of a schedule trace, named by :data:`KNOB_ORDER`."""
    values = [int(inst.attrs[0][int(trace.decisions[inst])]) for inst in trace.insts
              if inst.kind.name == "SampleCategorical"]
    if len(values) != len(KNOB_ORDER):
        raise InvalidConfigError(f"trace has {len(values)} SampleCategorical decisions {values}, "
                                 f"expected {len(KNOB_ORDER)} ({', '.join(KNOB_ORDER)})")
    return dict(zip(KNOB_ORDER, values))


def config_from_knobs(knobs: dict[str, int]) -> CPUConfig:
    """The CPU-space config of the scheduled nest (mapping in the module docstring)."""
    return CPUConfig(i_tile=int(knobs["i_tile"]), k_panel=0, j_tile=int(knobs["j_tile"]), loop_order=NEST_ORDER,
                     vector=int(knobs["vector"]), unroll=False, parallel=True, chunk=0)


def config_from_trace(trace) -> CPUConfig:
    return config_from_knobs(knobs_from_trace(trace))


# -- the cost model adapter --------------------------------------------------------------

@derived_object
class CognateModel(ms.cost_model.PyCostModel):
    """MetaSchedule cost model backed by a `CognateCostModel` (a thin adapter).

    Parameters
    ----------
    model : CognateCostModel
        The wrapped model (or any object with its predict, finetune, save and
        classmethod load).
    space : Space
        The CPU space the decoded configs belong to (its `check` validates them).
    matrix : scipy.sparse.csr_matrix
        The sparse operand being tuned.
    feat : int
        Dense width N.
    finetune_after : int
        Fine-tune once this many new successful measurements have arrived;
        0 disables fine-tuning.
    finetune_epochs : int or None
        Epochs of each fine-tune (default: the model's own setting).
    """

    def __init__(self, *, model, space: Space, matrix: sp.csr_matrix, feat: int, finetune_after: int = 8,
                 finetune_epochs: int | None = None):
        if space.config_type is not CPUConfig:
            raise InvalidConfigError(f"CognateModel decodes CPU configs; {space!r} holds "
                                     f"{space.config_type.__name__}")
        if finetune_after < 0:
            raise ValueError(f"finetune_after must be >= 0, got {finetune_after}")
        self.model, self.space, self.matrix, self.feat = model, space, matrix, int(feat)
        self.finetune_after = int(finetune_after)
        self.finetune_epochs = finetune_epochs
        self.records: list[tuple[CPUConfig, float]] = []  # (config, time in ms)
        self.pending = 0
        self.finetunes = 0
        self._scores: dict[CPUConfig, float] = {}

    def decode(self, candidates: Sequence) -> list[CPUConfig]:
        configs = [config_from_trace(c.sch.trace) for c in candidates]
        for config in configs:
            self.space.check(config)
        return configs

    def predict(self, context, candidates) -> np.ndarray:
        """-score of each candidate (higher = predicted faster), float64."""
        configs = self.decode(candidates)
        todo = list(dict.fromkeys(c for c in configs if c not in self._scores))
        if todo:
            scores = self.model.predict(self.matrix, todo, space=self.space, feat=self.feat)
            self._scores.update(zip(todo, (float(s) for s in scores)))
        return np.array([-self._scores[c] for c in configs], dtype=np.float64)

    def update(self, context, candidates, results) -> None:
        """Record (config, time) of each successful run; fine-tune when enough are new."""
        for config, result in zip(self.decode(candidates), results):
            if result.error_msg is not None or not result.run_secs:
                log.info("skipping failed run of %s: %s", config.to_json(), result.error_msg)
                continue
            secs = [float(s) for s in result.run_secs]
            self.records.append((config, 1e3 * float(np.mean(secs))))
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
        self.model.save(path)

    def load(self, path: str) -> None:
        self.model = type(self.model).load(path)
        self._scores.clear()


# -- tuning ------------------------------------------------------------------------------

def save_csr_arguments(matrix: sp.csr_matrix, feat: int, path: str | os.PathLike, *, seed: int = SEED_B) -> Path:
    """Write the CSR arrays and a seeded dense B (K x feat) for :func:`alloc_csr_arguments`."""
    path = Path(path)
    matrix = kernel_csr(matrix)
    rng = np.random.default_rng(seed)
    np.savez(path, indptr=matrix.indptr.astype(np.int32), indices=matrix.indices.astype(np.int32),
             vals=matrix.data.astype(np.float32),
             b=rng.standard_normal((matrix.shape[1], int(feat))).astype(np.float32))
    return path


def alloc_csr_arguments(device, args_info, alloc_repeat: int, *, path: str) -> list[list]:
    """LocalRunner ``f_alloc_argument``: the workload's arguments from the `.npz` at `path`."""
    arrays = np.load(path)
    shapes = [tuple(int(d) for d in info[2]) for info in args_info]
    out_shape = shapes[-1]
    host = [arrays["indptr"], arrays["indices"], arrays["vals"], arrays["b"]]
    for array, shape in zip(host, shapes):
        if array.shape != shape:
            raise ShapeError(f"{path}: array of shape {array.shape} where the kernel takes {shape}")
    return [[tvm.runtime.tensor(a, device) for a in host] + [tvm.runtime.empty(out_shape, "float32", device)]
            for _ in range(alloc_repeat)]


def _set_num_threads(num_threads: int) -> None:
    """Runner worker initializer: size TVM's thread pool before it starts."""
    os.environ["TVM_NUM_THREADS"] = str(int(num_threads))


@dataclass
class MetaScheduleResult:
    """The best record of a tuning run."""

    config: CPUConfig
    time_ms: float
    knobs: dict[str, int]
    schedule: object   # s_tir.Schedule with the best trace applied
    records: int       # how many records the database holds for the workload


def tune_spmm_metaschedule(matrix: sp.csr_matrix, feat: int, *, cost_model, max_trials: int,
                           work_dir: str | os.PathLike, num_threads: int, seed: int = 1,
                           mcpu: str | None = None) -> MetaScheduleResult:
    """Tune the CSR SpMM workload of `matrix` with MetaSchedule; return its best record.

    Parameters
    ----------
    cost_model : ms CostModel or str
        E.g. a :class:`CognateModel`, or "random".
    max_trials : int
        Measured schedules in total (batches of 8).
    work_dir : path
        MetaSchedule's logs and database, and the runner's input file.
    num_threads : int
        Cores of the target and threads of the measured kernels.
    seed : int
        Seed of the search (>= 1).
    """
    from .kernels.cpu import cpu_target

    if max_trials < 1:
        raise ValueError(f"max_trials must be >= 1, got {max_trials}")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    matrix = sp.csr_matrix(matrix)
    inputs = save_csr_arguments(matrix, feat, work_dir / "spmm_inputs.npz")
    mod = spmm_module(matrix, feat)
    target = cpu_target(num_threads, mcpu)
    runner = ms.runner.LocalRunner(
        evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=20),
        f_alloc_argument=functools.partial(alloc_csr_arguments, path=str(inputs)),
        initializer=functools.partial(_set_num_threads, num_threads))
    builder = ms.builder.LocalBuilder(max_workers=max(1, int(num_threads)))
    db = ms.tune_tir(mod, target, str(work_dir), max_trials, num_trials_per_iter=8, builder=builder,
                     runner=runner, cost_model=cost_model, space=spmm_space(feat), seed=seed,
                     num_tuning_cores=max(1, int(num_threads)))
    workload = db.commit_workload(mod)
    top = db.get_top_k(workload, 1)
    if not top:
        raise RuntimeError(f"MetaSchedule produced no successful record (see the logs in {work_dir})")
    best = top[0]
    sch = tvm.s_tir.Schedule(mod)
    best.trace.apply_to_schedule(sch, remove_postproc=False)
    knobs = knobs_from_trace(best.trace)
    time_ms = 1e3 * float(np.mean([float(s) for s in best.run_secs]))
    return MetaScheduleResult(config=config_from_knobs(knobs), time_ms=time_ms, knobs=knobs, schedule=sch,
                              records=len(db.get_all_tuning_records()))
