"""Host-side preparation of the CUDA kernels' arguments, and a numpy model of the kernels.

`prepare_sparse` turns a canonical CSR matrix into the sparse arrays a config's
kernel variant reads (column panels of ceil(ncols / parts) columns; for hyb,
ELL buckets of each panel's short rows plus the CSR remainder), `pad_dense`
gives the dense operands the [rows, nvec * vec] shape the kernels expect, and
`kernel_args` lays everything out in the PrimFunc's parameter order (see
`cognate_tvm.kernels.cuda_tir`, `cuda_tir_chunk`). Preparation is per (matrix, parts, bucketing)
and is not part of a kernel's timed run, like any format conversion.

`emulate` executes the same prepared arrays with numpy exactly as the kernels
index them (bucket offsets from the counts, panel loops, position scatter), so
the layouts can be checked on a machine without a GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..formats import column_panels, ell_buckets
from ..ops import Op, get_op
from ..space.gpu import ELL_WIDTHS, GPUConfig


@dataclass(frozen=True)
class SparseArgs:
    """Sparse kernel arguments of one (op, matrix, parts, bucketing): arrays and scalars."""

    op: str
    bucketing: bool
    shape: tuple[int, int]
    nnz: int
    arrays: tuple[np.ndarray, ...]  # kernel order, each with >= 1 element
    scalars: tuple[int, ...]        # hyb: rows per bucket n_0..n_5 and remainder rows q; chunk: q (, z)
    names: tuple[str, ...]          # parameter names of arrays, then of scalars
    chunked: bool = False           # the chunk-table layout of configs with chunk > 0


def _nonempty(array: np.ndarray) -> np.ndarray:
    """A zero-size array becomes one element: the kernels never read it, but TVM wants data."""
    array = np.ascontiguousarray(array)
    return array if array.size else np.zeros(1, dtype=array.dtype)


def panel_width(cols: int, parts: int) -> int:
    """K: columns per panel for `parts` column partitions."""
    return max(1, math.ceil(cols / parts))


def panel_positions(matrix: sp.csr_matrix, width: int) -> np.ndarray:
    """int32 [nnz]: for each nonzero of the panel layout, its position in `matrix`'s CSR order."""
    rows = np.repeat(np.arange(matrix.shape[0], dtype=np.int64), np.diff(matrix.indptr))
    order = np.lexsort((np.arange(matrix.nnz), rows, matrix.indices // width))
    return order.astype(np.int32)


@dataclass(frozen=True)
class ChunkTable:
    """Row chunks of a column-panel CSR: chunk r is nonzeros [start[r], end[r]) of row rows[r].

    `rows[r]` is -1 - row when that row is covered by several chunks (they add
    into it, after `zero_rows` are zeroed), else the row itself.
    """

    rows: np.ndarray       # int32 [Q]
    start: np.ndarray      # int32 [Q]
    end: np.ndarray        # int32 [Q]
    zero_rows: np.ndarray  # int32 [Z], ascending


def chunk_table(indptr: np.ndarray, chunk: int, *, swizzle: bool, empty_rows: bool) -> ChunkTable:
    """Cut every (panel, row) segment of panel indptr [P, M+1] into chunks of at most `chunk` nonzeros.

    Chunks come panel by panel, and within a panel by row (or, with `swizzle`,
    longest first, ties in row order). With `empty_rows`, each row without a
    nonzero gets one empty chunk at the end (so that it is stored as zeros).
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    indptr = np.asarray(indptr, dtype=np.int64).reshape(-1, np.shape(indptr)[-1])
    rows = indptr.shape[1] - 1
    lo, hi = indptr[:, :-1].ravel(), indptr[:, 1:].ravel()
    pieces = -(-(hi - lo) // chunk)
    seg = np.repeat(np.arange(lo.size), pieces)
    start = lo[seg] + (np.arange(seg.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)) * chunk
    end = np.minimum(start + chunk, hi[seg])
    row = seg % max(rows, 1)
    if swizzle:  # lexsort is stable: equal lengths keep their row order
        order = np.lexsort((-(end - start), seg // max(rows, 1)))
        start, end, row = start[order], end[order], row[order]
    per_row = np.bincount(row, minlength=rows)
    if empty_rows:
        empty = np.flatnonzero(per_row == 0)
        row = np.concatenate([row, empty])
        start = np.concatenate([start, np.zeros(empty.size, np.int64)])
        end = np.concatenate([end, np.zeros(empty.size, np.int64)])
    split = per_row > 1
    encoded = np.where(split[row], -1 - row, row) if row.size else row
    return ChunkTable(encoded.astype(np.int32), start.astype(np.int32), end.astype(np.int32),
                      np.flatnonzero(split).astype(np.int32))


def layout_key(config: GPUConfig) -> tuple:
    """What `prepare_sparse` depends on: configs with equal keys share their prepared arrays."""
    return (config.parts, config.bucketing, config.chunk, config.swizzle)


def _prepare_chunked(op: Op, matrix: sp.csr_matrix, panels, pos, config: GPUConfig) -> SparseArgs:
    spmm = op.name == "spmm"
    table = chunk_table(panels.indptr, config.chunk, swizzle=config.swizzle, empty_rows=spmm)
    if spmm:
        arrays = [table.rows, table.start, table.end, table.zero_rows, panels.indices, panels.data]
        names = ("chunk_rows", "chunk_start", "chunk_end", "zero_rows", "indices", "data", "q", "z")
        scalars = (int(table.rows.size), int(table.zero_rows.size))
    else:  # every nonzero written once: the sign is not needed
        arrays = [np.where(table.rows < 0, -1 - table.rows, table.rows).astype(np.int32), table.start,
                  table.end, panels.indices, panels.data, pos]
        names = ("chunk_rows", "chunk_start", "chunk_end", "indices", "data", "pos", "q")
        scalars = (int(table.rows.size),)
    return SparseArgs(op.name, False, tuple(matrix.shape), matrix.nnz, tuple(_nonempty(a) for a in arrays),
                      scalars, names, chunked=True)


def prepare_sparse(op: str | Op, matrix: sp.csr_matrix, config: GPUConfig) -> SparseArgs:
    """The sparse arrays `config`'s kernel reads for canonical CSR `matrix`."""
    op = get_op(op)
    panels = column_panels(matrix, panel_width(matrix.shape[1], config.parts))
    sddmm = op.name == "sddmm"
    pos = panel_positions(matrix, panels.width) if sddmm else None
    if config.chunked:
        return _prepare_chunked(op, matrix, panels, pos, config)
    if not config.bucketing:
        arrays = [panels.indptr, panels.indices, panels.data] + ([pos] if sddmm else [])
        names = ("indptr", "indices", "data") + (("pos",) if sddmm else ())
        return SparseArgs(op.name, False, tuple(matrix.shape), matrix.nnz,
                          tuple(_nonempty(a) for a in arrays), (), names)
    ell = ell_buckets(panels, num_buckets=len(ELL_WIDTHS))
    arrays = [ell.rows, ell.cols, ell.vals]
    if sddmm:  # bucket slots point at A's CSR order, padding stays -1
        arrays.append(np.where(ell.pos >= 0, pos[np.maximum(ell.pos, 0)], -1).astype(np.int32))
    arrays += [ell.rest_rows, ell.rest_start, ell.rest_end, panels.indices, panels.data]
    if sddmm:
        arrays.append(pos)
    scalars = tuple(int(c) for c in ell.counts) + (int(ell.rest_rows.size),)
    names = (("ell_rows", "ell_cols", "ell_vals") + (("ell_pos",) if sddmm else ())
             + ("rest_rows", "rest_start", "rest_end", "indices", "data") + (("pos",) if sddmm else ())
             + tuple(f"n{b}" for b in range(len(ell.counts))) + ("q",))
    return SparseArgs(op.name, True, tuple(matrix.shape), matrix.nnz,
                      tuple(_nonempty(a) for a in arrays), scalars, names)


def vector_count(feat: int, vec: int) -> int:
    """nvec: vec-wide vectors per dense row."""
    return -(-feat // vec)


def pad_dense(dense: list[np.ndarray], vec: int) -> tuple[list[np.ndarray], int]:
    """Dense operands as contiguous float32 [rows, nvec * vec] (zero columns appended) and nvec."""
    feat = dense[0].shape[1]
    nvec = vector_count(feat, vec)
    padded = []
    for d in dense:
        d = np.ascontiguousarray(d, dtype=np.float32)
        if nvec * vec != feat:
            d = np.concatenate([d, np.zeros((d.shape[0], nvec * vec - feat), np.float32)], axis=1)
        padded.append(d)
    return padded, nvec


def empty_output(sparse: SparseArgs, nvec: int, vec: int) -> np.ndarray:
    """The kernel's output buffer: C [M, nvec * vec] (SpMM) or O [max(nnz, 1)] (SDDMM)."""
    if sparse.op == "spmm":
        return np.zeros((sparse.shape[0], nvec * vec), np.float32)
    return np.zeros(max(sparse.nnz, 1), np.float32)


def kernel_args(sparse: SparseArgs, dense: list, output, nvec: int, rows_per_block: int) -> list:
    """Arguments in PrimFunc order; `dense`/`output` may be numpy or device tensors."""
    return [*sparse.arrays, *dense, output, *sparse.scalars, nvec, rows_per_block]


def arg_names(sparse: SparseArgs) -> list[str]:
    """The PrimFunc parameter names `kernel_args` fills, in the same order."""
    arrays, scalars = sparse.names[:len(sparse.arrays)], sparse.names[len(sparse.arrays):]
    dense = ["B", "C"] if sparse.op == "spmm" else ["X", "Y", "O"]
    return [*arrays, *dense, *scalars, "nvec", "I"]


def finish_output(op: str | Op, output: np.ndarray, matrix: sp.csr_matrix, feat: int) -> np.ndarray:
    """Strip the padding of a kernel's output: C[:, :feat] or O[:nnz]."""
    if get_op(op).name == "spmm":
        return output[:, :feat]
    return output[:matrix.nnz]


def emulate(op: str | Op, matrix: sp.csr_matrix, config: GPUConfig, dense: list[np.ndarray]
            ) -> np.ndarray:
    """Run `config`'s kernel logic in numpy on the prepared arrays (float64 sums)."""
    op = get_op(op)
    sparse = prepare_sparse(op, matrix, config)
    padded, nvec = pad_dense(dense, config.vec)
    rows = sparse.shape[0]
    out = np.zeros((rows, padded[0].shape[1]) if op.name == "spmm" else max(sparse.nnz, 1))

    def accumulate(row: int, cols: np.ndarray, vals: np.ndarray, where: np.ndarray | None) -> None:
        if op.name == "spmm":
            out[row] += vals.astype(np.float64) @ padded[0][cols]
        else:
            dots = padded[1][cols].astype(np.float64) @ padded[0][row].astype(np.float64)
            out[where] = vals * dots

    if sparse.chunked:
        return finish_output(op, _emulate_chunks(op, sparse, padded), matrix, dense[0].shape[1])
    if not sparse.bucketing:
        indptr, indices, data = sparse.arrays[:3]
        pos = sparse.arrays[3] if op.name == "sddmm" else None
        for panel in indptr:
            for i in range(rows):
                lo, hi = panel[i], panel[i + 1]
                accumulate(i, indices[lo:hi], data[lo:hi], None if pos is None else pos[lo:hi])
    else:
        ell_rows, ell_cols, ell_vals = sparse.arrays[:3]
        ell_pos = sparse.arrays[3] if op.name == "sddmm" else None
        rest = sparse.arrays[4:10] if op.name == "sddmm" else sparse.arrays[3:8]
        rest_rows, rest_start, rest_end, indices, data = rest[:5]
        pos = rest[5] if op.name == "sddmm" else None
        counts, q = sparse.scalars[:-1], sparse.scalars[-1]
        r0 = e0 = 0
        for width, n in zip(ELL_WIDTHS, counts):
            for r in range(n):
                slots = slice(e0 + r * width, e0 + (r + 1) * width)
                if ell_pos is None:
                    accumulate(ell_rows[r0 + r], ell_cols[slots], ell_vals[slots], None)
                else:
                    real = ell_pos[slots] >= 0
                    accumulate(ell_rows[r0 + r], ell_cols[slots][real], ell_vals[slots][real],
                               ell_pos[slots][real])
            r0, e0 = r0 + n, e0 + n * width
        for r in range(q):
            lo, hi = rest_start[r], rest_end[r]
            accumulate(rest_rows[r], indices[lo:hi], data[lo:hi], None if pos is None else pos[lo:hi])
    return finish_output(op, out.astype(np.float32), matrix, dense[0].shape[1])


def _emulate_chunks(op: Op, sparse: SparseArgs, padded: list[np.ndarray]) -> np.ndarray:
    """The chunk kernels on a NaN-filled output: stores, zeroing of split rows, then atomic adds."""
    rows, start, end = sparse.arrays[:3]
    q = sparse.scalars[0]
    if op.name == "spmm":
        zero_rows, indices, data = sparse.arrays[3:6]
        out = np.full((sparse.shape[0], padded[0].shape[1]), np.nan)
        out[zero_rows[:sparse.scalars[1]]] = 0.0
        for r in range(q):
            lo, hi = start[r], end[r]
            acc = data[lo:hi].astype(np.float64) @ padded[0][indices[lo:hi]]
            if rows[r] >= 0:
                out[rows[r]] = acc
            else:
                out[-1 - rows[r]] += acc
        return out.astype(np.float32)
    indices, data, pos = sparse.arrays[3:6]
    out = np.full(max(sparse.nnz, 1), np.nan)
    for r in range(q):
        lo, hi = start[r], end[r]
        dots = padded[1][indices[lo:hi]].astype(np.float64) @ padded[0][rows[r]].astype(np.float64)
        out[pos[lo:hi]] = data[lo:hi] * dots
    return out.astype(np.float32)
