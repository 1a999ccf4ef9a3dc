"""Thin wrapper over the C++ SPADE-like performance model (src/spade, docs/spade_model.md).

`simulate` runs the model on a matrix for a list of SPADE configs and returns
one `SimResult` per config; `HardwareParams` holds the machine being modelled.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol, Sequence

import scipy.sparse as sp

from . import _spade
from .errors import InvalidConfigError
from .matrix import as_csr
from .ops import Op, get_op

# Version of the model's equations; bumped whenever a change alters cycles.
MODEL_VERSION = 2
# Largest block-sampling factor of the cache models used by default (1 = exact).
DEFAULT_SAMPLING = 8


@dataclass(frozen=True)
class HardwareParams:
    """The modelled machine; defaults and their sources: docs/spade_model.md."""

    pes: int = 224
    pes_per_core: int = 4
    clock_ghz: float = 2.0
    vector_width: int = 16
    l2_bytes: int = 1 << 20
    l2_assoc: int = 16
    l2_output_share: float = 0.5
    llc_bytes: int = 32 << 20
    llc_assoc: int = 16
    line_bytes: int = 64
    dram_gbps: float = 200.0
    dram_latency_ns: float = 90.0
    l2_latency_cycles: float = 14.0
    llc_latency_cycles: float = 50.0
    mlp: int = 8
    stream_mlp: int = 32
    barrier_cycles: float = 2000.0
    tile_cycles: float = 40.0
    row_cycles: float = 1.0
    nnz_cycles: float = 1.0

    def __post_init__(self):
        positive = ("pes", "pes_per_core", "clock_ghz", "vector_width", "l2_assoc", "llc_assoc",
                    "dram_gbps", "mlp", "stream_mlp")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidConfigError(f"hardware parameter {f.name}={value!r} is not a number")
            if value < 0 or (f.name in positive and value <= 0):
                raise InvalidConfigError(f"hardware parameter {f.name}={value!r} must be "
                                         f"{'> 0' if f.name in positive else '>= 0'}")
        if self.l2_output_share > 1:
            raise InvalidConfigError(f"hardware parameter l2_output_share={self.l2_output_share} must be <= 1")
        if self.line_bytes < 4:
            raise InvalidConfigError(f"hardware parameter line_bytes={self.line_bytes} must be >= 4")
        for name in ("l2_bytes", "llc_bytes"):
            if getattr(self, name) < self.line_bytes:
                raise InvalidConfigError(f"hardware parameter {name}={getattr(self, name)} is smaller "
                                         f"than one line ({self.line_bytes} bytes)")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "HardwareParams":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise InvalidConfigError(f"unknown hardware parameter(s) {sorted(unknown)}; "
                                     f"valid: {sorted(names)}")
        return cls(**data)

    def cycles_to_ms(self, cycles: float) -> float:
        return cycles / (self.clock_ghz * 1e6)


class _SpadeLike(Protocol):
    row_panel: int
    col_panel: int
    split: int
    barrier: bool
    bypass: bool


@dataclass(frozen=True)
class SimResult:
    """The model's answer for one config: cycles and breakdown, or an error."""

    cycles: float | None
    breakdown: dict
    error: str | None = None


BREAKDOWN_KEYS = ("compute", "memory_stall", "sync", "dram_bytes", "llc_hit_rate", "l2_hit_rate",
                  "imbalance", "bandwidth_bound_fraction", "macs", "passes", "phases")


def simulate(matrix: sp.spmatrix, op: str | Op, feat: int, configs: Sequence[_SpadeLike], *,
             hardware: HardwareParams | None = None, threads: int = 1,
             sampling: int = DEFAULT_SAMPLING) -> list[SimResult]:
    """Simulate every config of `op` on `matrix` with dense width `feat`.

    Parameters
    ----------
    matrix : scipy sparse matrix (made canonical CSR first).
    op : "spmm", "sddmm" or an Op.
    feat : dense width N (>= 1).
    configs : objects with row_panel, col_panel, split, barrier, bypass.
    hardware : the modelled machine (default HardwareParams()).
    threads : C++ threads over configs; the results do not depend on it.
    sampling : largest block-sampling factor of the cache models, a power of two
        (1 = every access through the LRU models; docs/spade_model.md).

    Returns
    -------
    One SimResult per config, in order; a config that cannot run on this input
    (split > feat) gets `error` set instead of cycles.
    """
    op = get_op(op)
    hardware = hardware or HardwareParams()
    if int(feat) < 1:
        raise InvalidConfigError(f"feat must be >= 1, got {feat}")
    if sampling < 1 or sampling & (sampling - 1):
        raise InvalidConfigError(f"sampling must be a power of two >= 1, got {sampling}")
    csr = as_csr(matrix)
    tuples = []
    for c in configs:
        for name in ("row_panel", "col_panel", "split"):
            if int(getattr(c, name)) < 1:
                raise InvalidConfigError(f"{name}={getattr(c, name)!r} must be >= 1 in {c!r}")
        tuples.append((int(c.row_panel), int(c.col_panel), int(c.split), bool(c.barrier), bool(c.bypass)))
    raw = _spade.simulate(csr.indptr, csr.indices, csr.shape[0], csr.shape[1], op.name, int(feat),
                          tuples, hardware.to_dict(), max(1, int(threads)), int(sampling))
    out = []
    for r in raw:
        if "error" in r:
            out.append(SimResult(None, {}, r["error"]))
        else:
            out.append(SimResult(float(r["cycles"]), {k: r[k] for k in BREAKDOWN_KEYS}))
    return out
