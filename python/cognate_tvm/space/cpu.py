"""The CPU (llvm) space: WACO's SuperSchedule adapted to TensorIR.

A config fixes, for SpMM (C = A @ B) and SDDMM (O = A * (X @ Y^T) on A's
pattern), with A sparse M x K and dense width N (`feat`):

- ``i_tile`` (I): rows of A per row tile; the row-tile loop i1 is the one that
  runs in parallel.
- ``k_panel`` / ``k_parts`` (K): the column panels, given either as a width
  (``k_panel`` > 0 columns, WACO's and SPADE's way) or as a number of equal
  parts (``k_parts`` > 1, K = ceil(cols / parts), the GPU's way); ``k_panel = 0``
  with ``k_parts = 1`` is plain CSR (one panel). A width below the column count
  cuts A into column-panel CSR (:func:`cognate_tvm.formats.column_panels`). The
  number of panels is capped at :data:`MAX_PANELS` so the ``[panels, rows + 1]``
  row pointers stay small: on a matrix with more than ``MAX_PANELS * K``
  columns the panel width grows to ``ceil(cols / MAX_PANELS)`` (see
  :meth:`CPUConfig.panel_width`).
- ``j_tile`` (J): dense columns per tile.
- ``loop_order`` (omega): the order of (i1, k1, j1, i0, k0, j0), outermost first,
  one of :data:`PANEL_ORDERS` (column panels) or :data:`CSR_ORDERS` (plain CSR,
  where k1 has one iteration and orders that differ only in where k1 sits are
  the same program, so one representative of each is kept). The orders include
  every order the SPADE and GPU spaces map to, so transfer has CPU data on them.
- CPU-only knobs: ``vector`` (SIMD width of the innermost dense loop, 1 when the
  innermost loop is the sparse one), ``unroll`` (unroll the J / vector chunks of
  a dense tile), ``parallel`` (run row tiles on all cores) and ``chunk`` (0:
  contiguous row-tile ranges per thread; c > 0: threads take chunks of c row
  tiles round-robin, which balances skewed row lengths).
- ``block_rows`` (SpMM): register blocks of R rows (see :data:`BLOCK_ROWS`).
- ``balanced`` (parallel with ``chunk`` = 0): each thread takes one contiguous
  range of row tiles holding an equal share of the nonzeros, cut by a binary
  search on the row pointers in the kernel, instead of an equal share of the
  rows. Round-robin does not balance an R-MAT graph, whose first half of rows
  at every power-of-two scale holds 3/4 of its nonzeros, so chunks of 4 tiles
  leave one of two threads 3/4 of the work. With column panels the share is of
  the panel's nonzeros when the panel loop is outside the row loop, else of all
  panels' together.
- ``stream`` (SpMM): store the output with streaming (non-temporal) stores, which
  skip the read of each output line that an ordinary store makes first. Only
  where the kernel writes each output row once from register accumulators (the
  register-accumulator orders over all panels, and register blocks) in dense
  tiles of at least :data:`STREAM_MIN_TILE` floats (a 64-byte line, so the
  stores fill whole lines). It pays when C does not stay in the cache and costs
  when the caller reads C next while it would have: the matrix decides.

Every config is valid for every dense width: the dense tile is clipped to the
width rounded up to the vector width, and the dense operands are zero-padded to
a multiple of the clipped tile (:meth:`CPUConfig.dense_tile`,
:meth:`CPUConfig.padded_width`); zero columns change neither SpMM's kept
columns nor SDDMM's dot products. Validity depends on the config and the op
(``block_rows`` > 1 is SpMM's alone).

This module imports neither torch nor TVM.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidConfigError
from ..ops import Op
from .base import Config, SharedCoords, Space

# Column panels beyond this count are merged (wider panels), bounding the
# panel-major row pointers at MAX_PANELS * (rows + 1) entries.
MAX_PANELS = 32

# The shared coordinates span what the target platforms map to (docs/cpu_space.md):
# I from 1 (GPU rows per block) to 256 (SPADE row panels), J from 4 (GPU tx * vec)
# to N, K from 2048 columns (SPADE) or cols / 8 (GPU parts) to all columns.
I_TILES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
K_PANELS = (0, 2048, 16384, 131072)  # panel width; 0 = no width (see K_PARTS)
K_PARTS = (1, 2, 4, 8)               # equal column parts when k_panel == 0; 1 = plain CSR
J_TILES = (4, 8, 16, 32, 64, 128)
VECTORS = (4, 8, 16)         # float32 lanes: SSE xmm, AVX2 ymm, AVX-512 zmm
CHUNKS = (0, 4)              # 0 = contiguous ranges; 4 = round-robin chunks of 4 row tiles
BLOCK_ROWS = (1, 2, 4)       # rows per register block (SpMM)
# Accumulator lanes of a register block (block_rows * j_tile): 256 float32 lanes are 16 zmm
# registers, half the AVX-512 file, leaving room for the B row and the values.
MAX_BLOCK_LANES = 256
# Streaming stores need dense tiles of whole 64-byte lines: a partly written line leaves the CPU's
# write-combining buffer as partial writes, slower than ordinary stores.
STREAM_MIN_TILE = 16

# Loop orders over (i1, k1, j1, i0, k0, j0), outermost first. All keep i1 < i0 < k0,
# k1 < k0 (the nonzeros of row i in panel k1) and j1 < j0.
PANEL_ORDERS: tuple[tuple[str, ...], ...] = (
    ("i1", "i0", "k1", "j1", "k0", "j0"),  # row by row; per panel and dense tile, a register accumulator
    ("i1", "i0", "j1", "k1", "k0", "j0"),  # the dense tile's accumulator spans all panels
    ("i1", "k1", "i0", "j1", "k0", "j0"),  # panel-blocked inside a row tile
    ("k1", "i1", "i0", "j1", "k0", "j0"),  # panels outermost: one panel of B shared by all rows
    ("j1", "i1", "i0", "k1", "k0", "j0"),  # dense tile outermost: one sweep over A per tile
    ("i1", "j1", "i0", "k1", "k0", "j0"),  # dense tile between the row-tile loops
    ("i1", "i0", "k1", "k0", "j1", "j0"),  # nonzero-major: each nonzero updates a whole dense row
    ("i1", "i0", "k1", "j1", "j0", "k0"),  # sparse loop innermost (scalar)
    # the orders the target platforms map to (space/spade.py, space/gpu.py):
    ("k1", "i1", "j1", "i0", "k0", "j0"),  # SPADE with barrier: all row tiles sweep a panel together
    ("i1", "k1", "j1", "i0", "k0", "j0"),  # SPADE without barrier: a row tile walks its panels
    ("k1", "j1", "i1", "i0", "j0", "k0"),  # GPU, panels in parallel: one output element per thread
    ("j1", "i1", "i0", "j0", "k1", "k0"),  # GPU, panels serial in the thread
    ("k1", "i1", "i0", "k0", "j1", "j0"),  # GPU SDDMM: per nonzero, a dot over dense chunks
)


def without_k1(order: tuple[str, ...]) -> tuple[str, ...]:
    """`order` without the panel loop k1."""
    return tuple(name for name in order if name != "k1")


# With one panel, k1 has one iteration and orders that differ only in where k1 sits are
# the same program: keep the first of each.
CSR_ORDERS: tuple[tuple[str, ...], ...] = tuple(
    order for n, order in enumerate(PANEL_ORDERS)
    if without_k1(order) not in {without_k1(o) for o in PANEL_ORDERS[:n]})


# The one order of register blocks: per block and dense tile, accumulators over the block's nonzeros.
BLOCKED_ORDER: tuple[str, ...] = PANEL_ORDERS[0]


def _vectorizable(order: tuple[str, ...]) -> bool:
    return order[-1] == "j0"


@dataclass(frozen=True)
class CPUConfig(Config):
    """One point of the CPU space (see the module docstring for each field)."""

    i_tile: int
    k_panel: int
    k_parts: int
    j_tile: int
    loop_order: tuple[str, ...]
    vector: int
    unroll: bool
    parallel: bool
    chunk: int
    block_rows: int = 1
    balanced: bool = False
    stream: bool = False

    @classmethod
    def from_dict(cls, data: dict) -> "CPUConfig":
        """Also takes the dicts of configs stored before `block_rows`, `balanced` and `stream` existed (1:
        unblocked; False: ranges of equal row counts; False: ordinary stores)."""
        defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        return super().from_dict({**defaults, **data})

    def to_dict(self) -> dict:
        """A config without register blocks, balanced ranges or streaming stores keeps the form it had before
        those knobs existed (same JSON, same dataset keys)."""
        data = super().to_dict()
        for name, default in (("block_rows", 1), ("balanced", False), ("stream", False)):
            if data[name] == default:
                del data[name]
        return data

    @property
    def single_panel(self) -> bool:
        """Plain CSR: no column panels at all (the kernel has no k1 loop)."""
        return self.k_panel == 0 and self.k_parts == 1

    def panel_width(self, cols: int) -> int:
        """Column-panel width used on a matrix with `cols` columns (cols = one panel)."""
        cols = max(1, int(cols))
        if self.k_panel == 0:
            return -(-cols // max(1, self.k_parts))
        return min(cols, max(self.k_panel, -(-cols // MAX_PANELS)))

    def dense_tile(self, feat: int) -> int:
        """J actually used for dense width `feat`: clipped to feat rounded up to the vector width."""
        lanes = max(1, self.vector)
        return min(self.j_tile, -(-int(feat) // lanes) * lanes)

    def padded_width(self, feat: int) -> int:
        """Width the dense operands are zero-padded to: a multiple of `dense_tile(feat)`."""
        tile = self.dense_tile(feat)
        return -(-int(feat) // tile) * tile


class CPUSpace(Space):
    """The CPU space of one op; the same configs serve SpMM and SDDMM."""

    platform = "cpu"
    config_type = CPUConfig
    # block_rows, balanced and stream were appended after some shipped models were trained: they rank
    # such a config like its twin without them
    min_knobs = 4
    # One knob vector for both ops, so that a model reads either op's configs: SDDMM's block_rows is 1
    # and its stream False.
    knob_names = ("log2_vector", "unroll", "parallel", "chunk", "log2_block_rows", "balanced", "stream")

    def __init__(self, op: str | Op):
        super().__init__(op)
        self._configs: list[CPUConfig] | None = None
        self.block_rows = BLOCK_ROWS if self.op.name == "spmm" else (1,)
        self.streams = (False, True) if self.op.name == "spmm" else (False,)

    def configs(self) -> list[CPUConfig]:
        if self._configs is None:
            self._configs = list(_enumerate(self.block_rows, self.streams))
        return list(self._configs)

    def candidates(self, threads: int | None = None) -> list[CPUConfig]:
        """The serial configs for one thread, the parallel ones for more (all when `threads` is None).

        The shipped models learn from single-thread timings, where `parallel` and
        `chunk` carry no signal, so they cannot choose those knobs: the thread
        count does. On one thread a parallel kernel is the serial one plus pool
        overhead; on several, a serial kernel leaves cores idle.
        """
        if threads is None:
            return self.configs()
        return [c for c in self.configs() if c.parallel == (threads > 1)]

    def baseline(self) -> CPUConfig:
        """Row-parallel plain CSR: each row's nonzeros update its whole (vectorized) output row.

        The textbook CSR kernel (what a hand-written OpenMP SpMM does), with the
        widest vector and dense tile: one row per parallel iteration, no panels.
        """
        return CPUConfig(i_tile=1, k_panel=0, k_parts=1, j_tile=128, loop_order=PANEL_ORDERS[6], vector=16,
                         unroll=False, parallel=True, chunk=0)

    def check(self, config: CPUConfig) -> None:
        if not isinstance(config, CPUConfig):
            raise InvalidConfigError(f"{self!r} takes a CPUConfig, got {type(config).__name__}")
        order = tuple(config.loop_order)
        rules = [
            (config.i_tile in I_TILES, f"i_tile {config.i_tile} not in {I_TILES}"),
            (config.k_panel in K_PANELS, f"k_panel {config.k_panel} not in {K_PANELS}"),
            (config.k_parts in (K_PARTS if config.k_panel == 0 else (1,)),
             f"k_parts {config.k_parts} must be in {K_PARTS} without a panel width, else 1"),
            (config.j_tile in J_TILES, f"j_tile {config.j_tile} not in {J_TILES}"),
            (order in (CSR_ORDERS if config.single_panel else PANEL_ORDERS),
             f"loop order {order} is not one of the "
             f"{'plain-CSR' if config.single_panel else 'column-panel'} orders"),
            (config.vector in (VECTORS if _vectorizable(order) else (1,)),
             f"vector {config.vector} must be in {VECTORS} when j0 is innermost, else 1 "
             f"(loop order {order})"),
            (config.vector <= config.j_tile,
             f"vector {config.vector} is wider than the dense tile j_tile {config.j_tile}"),
            (not config.unroll or config.j_tile > config.vector > 1,
             f"unroll needs more than one vector per dense tile (j_tile {config.j_tile}, "
             f"vector {config.vector})"),
            (config.chunk in (CHUNKS if config.parallel else (0,)),
             f"chunk {config.chunk} must be in {CHUNKS} with parallel, else 0"),
            (not config.balanced or (config.parallel and config.chunk == 0),
             "balanced ranges need parallel and chunk 0"),
            (config.block_rows in self.block_rows,
             f"block_rows {config.block_rows} not in {self.block_rows} for {self.op.name}"),
            (config.block_rows == 1 or _blockable(config),
             f"block_rows {config.block_rows} needs plain CSR, loop order {BLOCKED_ORDER}, a vector width "
             f"and block_rows * j_tile <= {MAX_BLOCK_LANES}"),
            (config.stream in self.streams, f"stream {config.stream} not in {self.streams} for {self.op.name}"),
            (not config.stream or _streamable(config),
             "stream needs a loop order that writes each output row once from register accumulators "
             f"(j0 innermost after the sparse loops, all column panels inside them) and j_tile >= "
             f"{STREAM_MIN_TILE}"),
        ]
        for ok, message in rules:
            if not ok:
                raise InvalidConfigError(f"invalid CPU config {config.to_json()}: {message}")

    def shared_coords(self, config: CPUConfig, *, rows: int, cols: int, feat: int) -> SharedCoords:
        """The identity on the shared part: log2 of the tile sizes used and the loop order."""
        return SharedCoords(log2_i=math.log2(config.i_tile),
                            log2_k=math.log2(config.panel_width(cols)),
                            log2_j=math.log2(config.dense_tile(feat)),
                            loop_order=tuple(config.loop_order))

    def platform_knobs(self, config: CPUConfig) -> np.ndarray:
        return np.array([math.log2(config.vector), float(config.unroll), float(config.parallel),
                         float(config.chunk), math.log2(config.block_rows), float(config.balanced),
                         float(config.stream)],
                        dtype=np.float32)


def _blockable(config: CPUConfig) -> bool:
    """Whether `config`'s nest can run on register blocks (see the module docstring)."""
    return (config.single_panel and tuple(config.loop_order) == BLOCKED_ORDER
            and config.vector > 1 and config.j_tile * config.block_rows <= MAX_BLOCK_LANES)


def nest_order(config: CPUConfig) -> list[str]:
    """The loops of `config`'s nest, outermost first: its loop order, without k1 when there is one panel
    (k1 then has a single iteration)."""
    return [name for name in config.loop_order if not (config.single_panel and name == "k1")]


def accumulator_start(order: list[str]) -> int | None:
    """Where, in a nest `order`, the run of sparse loops (k1, k0) that ends just outside an innermost j0
    starts: a register accumulator of the dense tile spans that run. None unless the order ends k0, j0."""
    if order[-2:] != ["k0", "j0"]:
        return None
    start = len(order) - 2
    while start > 0 and order[start - 1] in ("k1", "k0"):
        start -= 1
    return start


def writes_output_once(config: CPUConfig) -> bool:
    """Whether `config`'s SpMM nest stores each output element once, from a register accumulator that
    spans all its nonzeros: register blocks, or j0 innermost after a run of sparse loops (k0, and k1 with
    column panels) that holds every panel (the nest generator's register-accumulator case)."""
    if config.block_rows > 1:
        return True
    order = nest_order(config)
    start = accumulator_start(order)
    return start is not None and (config.single_panel or "k1" in order[start:])


def _streamable(config: CPUConfig) -> bool:
    return writes_output_once(config) and config.j_tile >= STREAM_MIN_TILE


def _column_options():
    """(k_panel, k_parts) pairs: plain CSR, panels by width, panels by count."""
    return [(0, parts) for parts in K_PARTS] + [(width, 1) for width in K_PANELS if width]


def _enumerate(block_rows: tuple[int, ...], streams: tuple[bool, ...]):
    """Every valid config in a fixed order: the unblocked ones, then the register-blocked ones, then the
    balanced twins of the plain-CSR contiguous-range ones, then those of the column-panel ones, then the
    streaming-store twins of all those that allow it (each group appended after the configs stored before
    it existed, so those keep their places)."""
    unblocked = list(_unblocked())
    blocked = [dataclasses.replace(config, block_rows=rows) for rows in block_rows[1:] for config in unblocked]
    blocked = [config for config in blocked if _blockable(config)]
    yield from unblocked
    yield from blocked
    contiguous = [config for config in unblocked + blocked if config.parallel and config.chunk == 0]
    balanced = [dataclasses.replace(config, balanced=True)
                # stable: plain CSR first
                for config in sorted(contiguous, key=lambda config: not config.single_panel)]
    yield from balanced
    if True in streams:
        yield from (dataclasses.replace(config, stream=True)
                    for config in unblocked + blocked + balanced if _streamable(config))


def _unblocked():
    """The configs without register blocks, in a fixed order."""
    parallel_options = [(False, 0)] + [(True, c) for c in CHUNKS]
    for k_panel, k_parts in _column_options():
        orders = CSR_ORDERS if (k_panel, k_parts) == (0, 1) else PANEL_ORDERS
        for i_tile, j_tile, order in itertools.product(I_TILES, J_TILES, orders):
            if _vectorizable(order):
                knobs = [(v, u) for v in VECTORS if v <= j_tile for u in (False, True) if not u or j_tile > v]
            else:
                knobs = [(1, False)]
            for (vector, unroll), (parallel, chunk) in itertools.product(knobs, parallel_options):
                yield CPUConfig(i_tile=i_tile, k_panel=k_panel, k_parts=k_parts, j_tile=j_tile,
                                loop_order=order, vector=vector, unroll=unroll, parallel=parallel,
                                chunk=chunk)
