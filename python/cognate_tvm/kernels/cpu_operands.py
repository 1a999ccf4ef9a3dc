"""The operands of the CPU kernels (:mod:`cognate_tvm.kernels.cpu`): the sparse layouts, the dense
element types, and the one place that puts them into the kernels' argument order.

Kernel arguments, in order: ``m, ncols, nnz, npanels`` (int32), then
``indptr`` (int32 ``[npanels * (m + 1)]``, panel-major), ``indices`` (int32
``[nnz]``), ``vals`` (float32 ``[nnz]``), then for SDDMM with column panels
``perm`` (int32 ``[nnz]``: panel-order nonzero -> its position in A), then the
dense operands zero-padded to ``config.padded_width(feat)`` columns (in bfloat16,
most kernels read them as pairs packed in int32 words: :func:`paired_lanes`), then the
output (SpMM: ``C[m, width]``; SDDMM: ``O[nnz]`` in A's nonzero order).
With register blocks of R rows (``config.block_rows``) the sparse arrays are
the row-block form (:func:`cognate_tvm.formats.row_blocks`): ``nnz`` counts
its slots, ``indptr`` has ``ceil(m / R) + 1`` entries and ``vals`` R per slot.

Arrays in an argument list may be numpy arrays, TVM tensors or torch tensors (passed through
DLPack): the backends measure with the first two, :mod:`cognate_tvm.torch` runs with the last.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from ..formats import column_panels, row_blocks
from ..ops import Op, get_op
from ..space.cpu import CPUConfig

# Element types of the dense operands; accumulation and output are float32 for both.
DENSE_DTYPES = ("float32", "bfloat16")


def check_dense_dtype(dtype: str) -> str:
    """`dtype` when it is one of DENSE_DTYPES, else a ValueError naming them."""
    if dtype not in DENSE_DTYPES:
        raise ValueError(f"dense dtype {dtype!r} is not one of {DENSE_DTYPES}")
    return dtype


def panel_permutation(matrix: sp.csr_matrix, width: int) -> np.ndarray:
    """int32 [nnz]: the position in `matrix` of each nonzero of its column-panel form.

    Matches :func:`cognate_tvm.formats.column_panels` (panel-major, row-major
    within a panel, original order within a row).
    """
    rows = np.repeat(np.arange(matrix.shape[0], dtype=np.int64), np.diff(matrix.indptr))
    panel = matrix.indices.astype(np.int64) // max(1, int(width))
    return np.lexsort((rows, panel)).astype(np.int32)


@dataclass(frozen=True)
class SparseOperand:
    """The format a config needs: (column-panel or row-block) CSR arrays, for SDDMM with column panels the
    permutation, and for row blocks where each stored value comes from (`formats.RowBlockCSR.pos`)."""

    npanels: int
    indptr: np.ndarray
    indices: np.ndarray
    vals: np.ndarray
    perm: np.ndarray | None
    block_pos: np.ndarray | None = None


def prepare_sparse(op: str | Op, matrix: sp.csr_matrix, config: CPUConfig) -> SparseOperand:
    """Convert canonical CSR `matrix` into the layout `config`'s kernel reads."""
    op = get_op(op)
    rows, cols = matrix.shape
    if config.block_rows > 1:
        blocks = row_blocks(matrix, config.block_rows)
        return SparseOperand(1, blocks.indptr, blocks.indices, blocks.data, None, blocks.pos)
    if config.single_panel:
        return SparseOperand(1, np.ascontiguousarray(matrix.indptr, dtype=np.int32),
                             np.ascontiguousarray(matrix.indices, dtype=np.int32),
                             np.ascontiguousarray(matrix.data, dtype=np.float32), None)
    width = config.panel_width(cols)
    panels = column_panels(matrix, width)
    perm = panel_permutation(matrix, width) if op.name == "sddmm" else None
    return SparseOperand(panels.panels, np.ascontiguousarray(panels.indptr.reshape(-1)),
                         panels.indices, panels.data, perm)


def paired_lanes(op: str | Op, config: CPUConfig, feat: int, dtype: str) -> int:
    """The lane count P of the paired bfloat16 layout that `config`'s kernel reads, 0 for plain elements.

    Widening bfloat16 one element per lane costs a zero-extending shuffle (vpmovzxwd) and a shift per
    vector. A 32-bit word that holds two bfloat16 values gives two float32 vectors with a shift (the
    low half) and a mask (the high half): two plain integer ops for two vectors, no shuffle. On a
    compute-bound FEM matrix that makes the bfloat16 kernel 1.5x faster. It needs the dense tile to
    hold an even number of vector chunks: chunks 2q and 2q + 1 of a tile come from one vector of words.
    The scalar kernels (sparse loop innermost) read plain elements.
    """
    if check_dense_dtype(dtype) != "bfloat16" or config.loop_order[-1] != "j0" or config.vector <= 1:
        return 0
    chunks = config.dense_tile(feat) // config.vector
    return config.vector if chunks % 2 == 0 else 0


def pair_columns(dense: np.ndarray, lanes: int) -> np.ndarray:
    """The paired layout of bfloat16 `dense` [rows, width]: int32 words [rows, width / 2], where word
    g * P + p holds column g * 2P + p in its low half and column g * 2P + P + p in its high half
    (P = `lanes`; little-endian, as on x86 and ARM)."""
    rows, width = dense.shape
    groups = dense.reshape(rows, width // (2 * lanes), 2, lanes).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(groups).view(np.int32).reshape(rows, width // 2)


def pad_dense(dense: np.ndarray, width: int, dtype: str = "float32", pair: int = 0) -> np.ndarray:
    """C-contiguous copy of `dense` in `dtype` (bfloat16: rounded to nearest even) with zero columns up
    to `width`; with `pair` = P > 0, in the paired layout of P lanes (:func:`pair_columns`). An operand
    already in that layout is returned as it is."""
    element = dense_numpy_dtype(dtype)
    dense = np.asarray(dense)
    if pair and dense.dtype == np.int32 and dense.shape[1] * 2 == width:
        return np.ascontiguousarray(dense)
    if dense.shape[1] == width:
        out = np.ascontiguousarray(dense, dtype=element)
    else:
        out = np.zeros((dense.shape[0], width), dtype=element)
        out[:, :dense.shape[1]] = dense.astype(element)
    return pair_columns(out, pair) if pair else out


def dense_numpy_dtype(dtype: str) -> np.dtype:
    """The numpy element type of dense operands of `dtype` (bfloat16 is ml_dtypes' type)."""
    if check_dense_dtype(dtype) == "float32":
        return np.dtype(np.float32)
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def pack_arguments(shape: tuple[int, int], npanels: int, indptr: Any, indices: Any, vals: Any, perm: Any,
                   dense: Sequence[Any], out: Any) -> list:
    """The kernel's arguments in order (module docstring): sizes, sparse arrays, dense operands, output.

    `perm` is None where the kernel takes none (SpMM; SDDMM without column panels); nnz is
    the length of `indices` (register blocks count slots).
    """
    args = [int(shape[0]), int(shape[1]), int(indices.shape[0]), int(npanels), indptr, indices, vals]
    if perm is not None:
        args.append(perm)
    return args + list(dense) + [out]


def kernel_arguments(op: str | Op, matrix: sp.csr_matrix, config: CPUConfig, feat: int,
                     dense: list[np.ndarray], sparse: SparseOperand | None = None, *,
                     dtype: str = "float32") -> list:
    """The numpy/int arguments of the kernel, output last.

    The output starts as NaN, so an element that a kernel fails to write fails the check.
    Dense operands already in the kernel's layout (`dtype`, padded, paired) are passed as they are.
    """
    op = get_op(op)
    sparse = sparse or prepare_sparse(op, matrix, config)
    width = config.padded_width(feat)
    out_shape = (int(matrix.nnz),) if op.name == "sddmm" else (matrix.shape[0], width)
    perm = sparse.perm if op.name == "sddmm" else None
    return pack_arguments(matrix.shape, sparse.npanels, sparse.indptr, sparse.indices, sparse.vals, perm,
                          [pad_dense(d, width, dtype, paired_lanes(op, config, feat, dtype)) for d in dense],
                          np.full(out_shape, np.nan, dtype=np.float32))


def unpad_output(op: str | Op, output: np.ndarray, feat: int) -> np.ndarray:
    """The kernel output without its padding columns."""
    return output if get_op(op).name == "sddmm" else output[:, :feat]
