"""What the TVMScript bodies of the CUDA kernels (`cuda_tir`, `cuda_tir_chunk`) share: the
declarations of their common arguments, and the lane mask and sum of a row's thread group."""
from __future__ import annotations

from tvm.script import tirx as T

ZERO_THREADS = 128  # threads of a block that zero-fills rows of C


# Argument declarations that several kernels share. Plain functions, called while a prim_func
# is parsed: each T.match_buffer joins that prim_func's buffer map, and the assignment at the
# call site names the buffers; the symbolic sizes stay declared (and named) in each kernel.
def nonzeros(NNZ, indices_h, data_h):
    """indices[NNZ], data[NNZ]: the nonzeros' columns and values (panel order)."""
    return T.match_buffer(indices_h, (NNZ,), "int32"), T.match_buffer(data_h, (NNZ,), "float32")


def row_ranges(Q, rows_h, start_h, end_h):
    """rows[Q], start[Q], end[Q]: entry r covers nonzeros [start[r], end[r]) of row rows[r]."""
    return tuple(T.match_buffer(h, (Q,), "int32") for h in (rows_h, start_h, end_h))


def dense(h, rows, nvec, V):
    """A float32 matrix [rows, nvec * V]: a dense operand, or SpMM's output."""
    return T.match_buffer(h, (rows, nvec * V), "float32")


def group_mask(ty, TX):
    """The lanes of this row's group: TX consecutive lanes starting at (ty * TX) % 32."""
    return T.shift_left(T.Cast("uint32", T.shift_left(T.uint64(1), T.Cast("uint64", TX)) - T.uint64(1)),
                        T.Cast("uint32", (ty * TX) % 32))


@T.macro
def group_sum(red, ty, TX, LOG_TX):
    """red[0] <- the sum of red[0] over the TX lanes of this row's group (butterfly shuffles)."""
    for o in T.unroll(LOG_TX):
        red[0] = red[0] + T.call_extern("float32", "__shfl_xor_sync", group_mask(ty, TX), red[0],
                                        T.shift_right(TX, o + 1), TX)
