"""The GPU (`cuda`) configuration space: SparseTIR-style SpMM / SDDMM schedules.

A config fixes how the kernel of `cognate_tvm.kernels.cuda` walks the matrix:

- `parts`: column partitions; the matrix is cut into `parts` column panels of
  K = ceil(ncols / parts) columns (`cognate_tvm.formats.column_panels`), which
  keeps the dense rows touched by one panel in L2 while it is processed.
- `rows_per_block` (I): sparse rows per thread block (`threadIdx.y`).
- `tx`: threads along the dense dimension (`threadIdx.x`), each owning `vec`
  consecutive dense columns loaded as one vector (`float2`/`float4`), so a
  thread group covers J = tx * vec dense columns per step.
- `bucketing`: rows (per panel) with at most 32 nonzeros go to padded ELL
  buckets of widths 1, 2, 4, ..., 32 (SparseTIR's hyb format), one kernel per
  bucket with a fully unrolled row; longer rows stay in CSR.
- `atomics` (SpMM only): panels run in parallel (`blockIdx.z`) and add into C
  with `atomicAdd`; without it, a thread walks its row's panels one after the
  other and stores once. Where partitions overlap in C (parts > 1 with
  bucketing) atomics are required; with one panel they are pointless and not
  part of the space. SDDMM writes every output nonzero exactly once (panels run
  in parallel on `blockIdx.y`), so it never uses atomics.

Chunked schedules (`chunk` > 0; bucketing and atomics off) balance skewed rows:

- `chunk`: every (panel, row) is cut into chunks of at most `chunk` nonzeros,
  and a thread group works one chunk (merge-path style row splitting), so a
  hub row is spread over many thread groups. A row covered by one chunk is
  stored; a row covered by several (long rows, or rows in several panels) is
  zeroed by a first small kernel and its chunks add into C with `atomicAdd`.
  All chunks of all panels form one table, panel by panel, so panels run in
  parallel (SDDMM writes each nonzero once and never needs atomics).
- `swizzle`: the chunks of each panel are ordered by length, longest first
  (Sputnik's row swizzle), so the blocks resident at the same time get
  similar work and the long ones start first.
- `cache`: coalesced row caching (GE-SpMM). SpMM: the TX lanes of a group
  load TX consecutive column indices and values of their chunk at once and
  pass them to each other with warp shuffles, instead of every lane loading
  every index. SDDMM: the row's X slice is held in registers across all
  nonzeros of the chunk, not re-read per nonzero.
- `cols_per_thread` (CPT): `vec`-wide vectors per thread, strided by TX, so a
  loaded nonzero is reused CPT times and CPT vector loads are in flight; a
  thread group covers J = tx * vec * CPT dense columns.

Old config dicts (without these four fields) load with their defaults
(`chunk=0, swizzle=False, cache=False, cols_per_thread=1`) and mean the same
kernel as before.

Any dense width `feat` works with every config: the dense operands are viewed
as rows of nvec = ceil(feat / vec) vectors (padded with zero columns on the
host when vec does not divide feat, which the usual widths 32..512 never
need); `blockIdx.y` (SpMM) or a per-thread loop (SDDMM) covers all vectors, and
a guard `vector < nvec` masks the tail, so vector loads stay aligned and whole.

Mapping to the shared loops (i1, k1, j1, i0, k0, j0), outermost first; the GPU
has no separate k1 loop when parts == 1, so k1 is then a size-1 dummy loop
placed outermost:
- SpMM, panels parallel or a single panel:
  (k1 blockIdx.z, j1 blockIdx.y, i1 blockIdx.x, i0 threadIdx.y, j0 threadIdx.x*vec, k0 row nonzeros)
- SpMM, panels serial in the thread (parts > 1, no atomics):
  (j1, i1, i0, j0, k1 panel loop, k0)
- Chunked SpMM: (k1, j1 blockIdx.y, i1 blockIdx.x, i0 threadIdx.y,
  j0 threadIdx.x*vec*CPT, k0 chunk nonzeros), the order of parallel panels
  (the panels' chunks share blockIdx.x, panel by panel); chunked SDDMM:
  (k1, i1 blockIdx.x, i0 threadIdx.y, j1 loop over TX*CPT-vector slices of X,
  k0 chunk nonzeros, j0 threadIdx.x*vec*CPT reduced by shuffles). I counts
  chunks per block; the chunk length, swizzle and cache are platform knobs.
- SDDMM: (k1 blockIdx.y, i1 blockIdx.x, i0 threadIdx.y, k0 row nonzeros,
  j1 per-thread loop over dense chunks, j0 threadIdx.x*vec reduced by warp shuffles)
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidConfigError
from .base import Config, SharedCoords, Space

PARTS = (1, 2, 4, 8)
ROWS_PER_BLOCK = (1, 2, 4, 8)
TX = (4, 8, 16, 32)
VEC = (1, 2, 4)
# Rows with at most this many nonzeros (per panel) are bucketed; a power of two.
ELL_MAX_WIDTH = 32
ELL_WIDTHS = tuple(1 << b for b in range(int(math.log2(ELL_MAX_WIDTH)) + 1))
# Chunked schedules: a smaller grid of knobs (the plain ones above stay as they were).
CHUNK = (32, 128)
CHUNK_ROWS_PER_BLOCK = (8, 16)
CHUNK_VEC = (4,)
COLS_PER_THREAD = (1, 2, 4)
# (tx, cols_per_thread) of chunked configs: a group covers 32..128 dense columns (vec 4), and
# the narrow groups hold more vectors per thread (several rows per warp, more loads in flight).
CHUNK_LANES = ((8, 1), (16, 1), (32, 1), (8, 2), (16, 2), (8, 4))
CHUNKED_FIELDS = ("chunk", "swizzle", "cache", "cols_per_thread")

ORDER_PARALLEL = ("k1", "j1", "i1", "i0", "j0", "k0")
ORDER_SERIAL = ("j1", "i1", "i0", "j0", "k1", "k0")
ORDER_SDDMM = ("k1", "i1", "i0", "k0", "j1", "j0")
ORDER_SDDMM_CHUNKED = ("k1", "i1", "i0", "j1", "k0", "j0")


def _check_values(config: "GPUConfig", rules, where: str = "") -> None:
    for name, allowed in rules:
        value = getattr(config, name)
        if isinstance(value, bool) or value not in allowed:
            raise InvalidConfigError(f"{name}={value!r} not in {allowed}{where} ({config!r})")


@dataclass(frozen=True)
class GPUConfig(Config):
    """One GPU schedule; see the module docstring for the meaning of each field."""

    parts: int
    rows_per_block: int
    tx: int
    vec: int
    bucketing: bool
    atomics: bool
    chunk: int = 0
    swizzle: bool = False
    cache: bool = False
    cols_per_thread: int = 1

    @classmethod
    def from_dict(cls, data: dict) -> "GPUConfig":
        """Also takes the dicts of configs stored before the chunked fields existed (their defaults)."""
        defaults = {f.name: f.default for f in dataclasses.fields(cls)
                    if f.default is not dataclasses.MISSING}
        return super().from_dict({**defaults, **data})

    def to_dict(self) -> dict:
        """A plain config (chunk = 0) keeps the six-field form it always had."""
        data = super().to_dict()
        if not self.chunked:
            for name in CHUNKED_FIELDS:
                del data[name]
        return data

    @property
    def dense_tile(self) -> int:
        """J: dense columns one thread group covers per step."""
        return self.tx * self.vec * self.cols_per_thread

    @property
    def chunked(self) -> bool:
        return self.chunk > 0


class GPUSpace(Space):
    """GPU schedules for SpMM or SDDMM (SpMM: 528 plain + 384 chunked configs, SDDMM: 384 + 384)."""

    platform = "gpu"
    config_type = GPUConfig
    knob_names = ("log2_tx", "log2_vec", "bucketing", "atomics", "log2_chunk", "swizzle", "cache",
                  "log2_cols_per_thread")

    def configs(self) -> list[GPUConfig]:
        plain = (GPUConfig(p, i, t, v, b, a) for p, i, t, v, b, a in itertools.product(
            PARTS, ROWS_PER_BLOCK, TX, VEC, (False, True), (False, True)))
        chunked = (GPUConfig(p, i, t, v, False, False, c, s, h, w)
                   for p, i, (t, w), v, c, s, h in itertools.product(
                       PARTS, CHUNK_ROWS_PER_BLOCK, CHUNK_LANES, CHUNK_VEC, CHUNK, (False, True),
                       (False, True)))
        return [c for c in itertools.chain(plain, chunked) if self.is_valid(c)]

    def baseline(self) -> GPUConfig:
        """A plain CSR row-split kernel: one panel, 4 rows per block, a warp per row, scalar loads."""
        return GPUConfig(parts=1, rows_per_block=4, tx=32, vec=1, bucketing=False, atomics=False)

    def check(self, config: GPUConfig) -> None:
        if not isinstance(config, GPUConfig):
            raise InvalidConfigError(f"{self!r} takes a GPUConfig, got {type(config).__name__}: {config!r}")
        for name in ("bucketing", "atomics", "swizzle", "cache"):
            if not isinstance(getattr(config, name), bool):
                raise InvalidConfigError(f"{name} must be a bool, got {getattr(config, name)!r}")
        if not isinstance(config.chunk, int) or isinstance(config.chunk, bool):
            raise InvalidConfigError(f"chunk must be an int, got {config.chunk!r}")
        if config.chunked:
            self._check_chunked(config)
            return
        _check_values(config, (("parts", PARTS), ("rows_per_block", ROWS_PER_BLOCK), ("tx", TX),
                               ("vec", VEC)))
        if config.swizzle or config.cache or config.cols_per_thread != 1 or config.chunk != 0:
            raise InvalidConfigError(f"swizzle, cache and cols_per_thread > 1 need chunk > 0 ({config!r})")
        if self.op.name == "sddmm":
            if config.atomics:
                raise InvalidConfigError(f"SDDMM writes each output once; atomics=True is invalid ({config!r})")
            return
        if config.atomics and config.parts == 1:
            raise InvalidConfigError(f"atomics need overlapping partitions, but parts=1 ({config!r})")
        if config.bucketing and config.parts > 1 and not config.atomics:
            raise InvalidConfigError(f"bucketing with parts={config.parts} overlaps rows in C and "
                                     f"needs atomics ({config!r})")

    @staticmethod
    def _check_chunked(config: GPUConfig) -> None:
        _check_values(config, (("chunk", CHUNK), ("parts", PARTS), ("rows_per_block", CHUNK_ROWS_PER_BLOCK),
                               ("vec", CHUNK_VEC), ("cols_per_thread", COLS_PER_THREAD)), " for chunk > 0")
        if (config.tx, config.cols_per_thread) not in CHUNK_LANES:
            raise InvalidConfigError(f"(tx, cols_per_thread)={(config.tx, config.cols_per_thread)} not in "
                                     f"{CHUNK_LANES} for chunk > 0 ({config!r})")
        if config.bucketing or config.atomics:
            raise InvalidConfigError(f"chunk > 0 has its own layout and combining: bucketing and atomics "
                                     f"must be False ({config!r})")

    def loop_order(self, config: GPUConfig) -> tuple[str, ...]:
        if config.chunked:
            return ORDER_SDDMM_CHUNKED if self.op.name == "sddmm" else ORDER_PARALLEL
        if self.op.name == "sddmm":
            return ORDER_SDDMM
        return ORDER_SERIAL if config.parts > 1 and not config.atomics else ORDER_PARALLEL

    def shared_coords(self, config: GPUConfig, *, rows: int, cols: int, feat: int) -> SharedCoords:
        """I = rows_per_block, K = ceil(cols / parts), J = min(tx * vec * cols_per_thread, feat)."""
        self.check(config)
        panel = max(1, math.ceil(cols / config.parts))
        dense = max(1, min(config.dense_tile, feat))
        return SharedCoords(log2_i=math.log2(config.rows_per_block), log2_k=math.log2(panel),
                            log2_j=math.log2(dense), loop_order=self.loop_order(config))

    def platform_knobs(self, config: GPUConfig) -> np.ndarray:
        """The plain knobs, then log2 chunk (0 when rows are not chunked), swizzle, cache, log2 CPT."""
        return np.array([math.log2(config.tx), math.log2(config.vec), float(config.bucketing),
                         float(config.atomics), math.log2(config.chunk) if config.chunked else 0.0,
                         float(config.swizzle), float(config.cache), math.log2(config.cols_per_thread)],
                        dtype=np.float32)
