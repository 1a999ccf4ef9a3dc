"""The MetaSchedule design space of the sparse workloads, and its map onto the CPU space.

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
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Sequence

import scipy.sparse as sp
import tvm
from tvm.s_tir import meta_schedule as ms

from ..errors import InvalidConfigError, ShapeError
from ..ops import Op, get_op
from ..space import cpu as cpu_space
from ..space.cpu import CPUConfig, CPUSpace
from .workload import ROW_BLOCK, UPDATE_BLOCK, sparse_module

# The sampled knobs, in the order the space draws them (and the trace records them).
KNOB_ORDER: tuple[str, ...] = ("variant", "i_tile", "j_tile")
VARIANT_ANNOTATION = "cognate_variant"
# The update block's loop orders that schedule primitives reach, as the CPU space names them (k1 has one
# iteration in plain CSR): what follows i1, i0.
NONZERO_MAJOR = ("k0", "j1", "j0")
TILE_MAJOR = ("j1", "k0", "j0")
SPARSE_INNERMOST = ("j1", "j0", "k0")
# SDDMM's dense loop is a reduction: TVM vectorizes no reduction loop, and rfactor cannot follow the
# data-dependent nonzero index, so only the scalar order maps onto a CPU-space config.
ORDERS = {"spmm": (NONZERO_MAJOR, TILE_MAJOR, SPARSE_INNERMOST), "sddmm": (SPARSE_INNERMOST,)}


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
            if cpu_space.without_k1(order) == want:
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
