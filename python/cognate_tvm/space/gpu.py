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
- SDDMM: (k1 blockIdx.y, i1 blockIdx.x, i0 threadIdx.y, k0 row nonzeros,
  j1 per-thread loop over dense chunks, j0 threadIdx.x*vec reduced by warp shuffles)
"""
from __future__ import annotations

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

ORDER_PARALLEL = ("k1", "j1", "i1", "i0", "j0", "k0")
ORDER_SERIAL = ("j1", "i1", "i0", "j0", "k1", "k0")
ORDER_SDDMM = ("k1", "i1", "i0", "k0", "j1", "j0")


@dataclass(frozen=True)
class GPUConfig(Config):
    """One GPU schedule; see the module docstring for the meaning of each field."""

    parts: int
    rows_per_block: int
    tx: int
    vec: int
    bucketing: bool
    atomics: bool

    @property
    def dense_tile(self) -> int:
        """J: dense columns one thread group covers per step."""
        return self.tx * self.vec


class GPUSpace(Space):
    """SparseTIR-style GPU schedules for SpMM or SDDMM (SpMM: 528 configs, SDDMM: 384)."""

    platform = "gpu"
    config_type = GPUConfig
    knob_names = ("log2_tx", "log2_vec", "bucketing", "atomics")

    def configs(self) -> list[GPUConfig]:
        candidates = (GPUConfig(p, i, t, v, b, a) for p, i, t, v, b, a in itertools.product(
            PARTS, ROWS_PER_BLOCK, TX, VEC, (False, True), (False, True)))
        return [c for c in candidates if self.is_valid(c)]

    def baseline(self) -> GPUConfig:
        """A plain CSR row-split kernel: one panel, 4 rows per block, a warp per row, scalar loads."""
        return GPUConfig(parts=1, rows_per_block=4, tx=32, vec=1, bucketing=False, atomics=False)

    def check(self, config: GPUConfig) -> None:
        if not isinstance(config, GPUConfig):
            raise InvalidConfigError(f"{self!r} takes a GPUConfig, got {type(config).__name__}: {config!r}")
        for name, allowed in (("parts", PARTS), ("rows_per_block", ROWS_PER_BLOCK), ("tx", TX),
                              ("vec", VEC)):
            value = getattr(config, name)
            if isinstance(value, bool) or value not in allowed:
                raise InvalidConfigError(f"{name}={value!r} not in {allowed} ({config!r})")
        for name in ("bucketing", "atomics"):
            if not isinstance(getattr(config, name), bool):
                raise InvalidConfigError(f"{name} must be a bool, got {getattr(config, name)!r}")
        if self.op.name == "sddmm":
            if config.atomics:
                raise InvalidConfigError(f"SDDMM writes each output once; atomics=True is invalid ({config!r})")
            return
        if config.atomics and config.parts == 1:
            raise InvalidConfigError(f"atomics need overlapping partitions, but parts=1 ({config!r})")
        if config.bucketing and config.parts > 1 and not config.atomics:
            raise InvalidConfigError(f"bucketing with parts={config.parts} overlaps rows in C and "
                                     f"needs atomics ({config!r})")

    def loop_order(self, config: GPUConfig) -> tuple[str, ...]:
        if self.op.name == "sddmm":
            return ORDER_SDDMM
        return ORDER_SERIAL if config.parts > 1 and not config.atomics else ORDER_PARALLEL

    def shared_coords(self, config: GPUConfig, *, rows: int, cols: int, feat: int) -> SharedCoords:
        """I = rows_per_block, K = ceil(cols / parts), J = min(tx * vec, feat)."""
        self.check(config)
        panel = max(1, math.ceil(cols / config.parts))
        dense = max(1, min(config.dense_tile, feat))
        return SharedCoords(log2_i=math.log2(config.rows_per_block), log2_k=math.log2(panel),
                            log2_j=math.log2(dense), loop_order=self.loop_order(config))

    def platform_knobs(self, config: GPUConfig) -> np.ndarray:
        return np.array([math.log2(config.tx), math.log2(config.vec), float(config.bucketing),
                         float(config.atomics)], dtype=np.float32)
