"""TVMScript (TensorIR) bodies of the CUDA SpMM / SDDMM kernel variants of the csr and hyb layouts.

Each builder takes the variant's `combine` mode and returns a PrimFunc whose
loops are bound to blockIdx/threadIdx; the ELL bucket widths are baked in,
shapes are symbolic. Argument layouts (built by `cuda_prep`):

spmm csr:   indptr[P, M+1], indices[NNZ], data[NNZ], B[K, nvec*V], C[M, nvec*V], nvec, I
spmm hyb:   ell_rows[R], ell_cols[E], ell_vals[E], rest_rows[Q], rest_start[Q], rest_end[Q],
            indices[NNZ], data[NNZ], B, C, n_0..n_5 (rows per bucket), q (rest rows), nvec, I
sddmm csr:  indptr[P, M+1], indices[NNZ], data[NNZ], pos[NNZ], X[M, nvec*V], Y[K, nvec*V],
            O[NO], nvec, I
sddmm hyb:  ell_rows, ell_cols, ell_vals, ell_pos[E], rest_rows, rest_start, rest_end,
            indices, data, pos, X, Y, O, n_0..n_5, q, nvec, I

The chunk layout's builders are in `cuda_tir_chunk`, what both share in `cuda_tir_common`.

`pos` maps a nonzero of the (panel-ordered) arrays to its place in A's CSR
order; `ell_pos` is the same for bucket slots, -1 for padding. Kernels whose
grid depends on a bucket size are skipped on the host when that size is 0.

Every signature ends with `nvec, I` (dense vectors per row, rows per block);
I stays a runtime scalar (the `threadIdx.y` extent, set at launch). Each
builder is parsed once per (op, layout, combine) with the key's constants as
scalar parameters TX, V (and LOG_TX = log2 TX for SDDMM), which `specialize`
then replaces by the key's values: parsing a hyb variant takes ~0.3 s,
specializing it well under a millisecond.
"""
from __future__ import annotations

from tvm.script import tirx as T

from ..space.gpu import ELL_WIDTHS
from .cuda_tir_common import ZERO_THREADS, dense, group_sum, nonzeros, row_ranges

if len(ELL_WIDTHS) != 6:  # the hyb signatures list one row count (n0..n5) per bucket
    raise ImportError(f"cuda_tir is written for 6 ELL buckets, ELL_WIDTHS has {len(ELL_WIDTHS)}")


# An argument declaration of the hyb kernels, called while a prim_func is parsed like those of
# `cuda_tir_common`.
def _ell(R, E, rows_h, cols_h, vals_h):
    """ell_rows[R], ell_cols[E], ell_vals[E]: the bucketed rows and their slots' columns, values."""
    return (T.match_buffer(rows_h, (R,), "int32"), T.match_buffer(cols_h, (E,), "int32"),
            T.match_buffer(vals_h, (E,), "float32"))


def _ell_buckets(bucket, counts, *args):
    """bucket(W, n, r0, e0, *args) for each ELL bucket in order: its width, its row count, and
    where its rows (in ell_rows) and slots (in ell_cols, ell_vals) start. Called while a prim_func
    is parsed, so each bucket's macro lands in the kernel body one after the other."""
    r0, e0 = 0, 0
    for W, n in zip(ELL_WIDTHS, counts):
        bucket(W, n, r0, e0, *args)
        r0, e0 = r0 + n, e0 + n * W


def _spmm_macros(atomic: bool):
    """Macros shared by the SpMM variants: accumulate rows into acc, then store/add into C."""

    @T.macro
    def zero_fill(C, M, F):
        for bx in T.thread_binding(M, thread="blockIdx.x"):
            for t in T.thread_binding(ZERO_THREADS, thread="threadIdx.x"):
                for k in range((F + ZERO_THREADS - 1) // ZERO_THREADS):
                    if k * ZERO_THREADS + t < F:
                        C[bx, k * ZERO_THREADS + t] = T.float32(0)

    @T.macro
    def write(C, acc, row, vc, V):
        if atomic:
            for e in T.unroll(V):
                T.evaluate(T.call_extern("float32", "atomicAdd", T.address_of(C[row, vc * V + e]),
                                         acc[e]))
        else:
            for e in T.vectorized(V):
                C[row, vc * V + e] = acc[e]

    @T.macro
    def row_groups(n, gather, nvec, I, TX, V, *args):
        """gather(acc, r, vc, *args) for rows r < n, I rows a block: lane (r, vc) sums vector vc
        of its row's output in acc, zeroed first."""
        for bx in T.thread_binding((n + I - 1) // I, thread="blockIdx.x"):
            for by in T.thread_binding((nvec + TX - 1) // TX, thread="blockIdx.y"):
                for ty in T.thread_binding(I, thread="threadIdx.y"):
                    for tx in T.thread_binding(TX, thread="threadIdx.x"):
                        acc = T.alloc_buffer((V,), "float32", scope="local")
                        r = T.meta_var(bx * I + ty)
                        vc = T.meta_var(by * TX + tx)
                        if r < n and vc < nvec:
                            for e in T.vectorized(V):
                                acc[e] = T.float32(0)
                            gather(acc, r, vc, *args)

    @T.macro
    def add_nonzeros(acc, lo, hi, indices, data, B, vc, V):
        for n in range(lo, hi):
            for e in T.vectorized(V):
                acc[e] = acc[e] + data[n] * B[indices[n], vc * V + e]

    @T.macro
    def ell_row(acc, r, vc, W, r0, e0, ell_rows, ell_cols, ell_vals, B, C, V):
        for s in T.unroll(W):
            for e in T.vectorized(V):
                acc[e] = acc[e] + ell_vals[e0 + r * W + s] * B[ell_cols[e0 + r * W + s], vc * V + e]
        write(C, acc, ell_rows[r0 + r], vc, V)

    @T.macro
    def ell_bucket(W, n, r0, e0, ell_rows, ell_cols, ell_vals, B, C, nvec, I, TX, V):
        if n > 0:
            row_groups(n, ell_row, nvec, I, TX, V, W, r0, e0, ell_rows, ell_cols, ell_vals, B, C, V)

    return zero_fill, write, row_groups, add_nonzeros, ell_bucket


def spmm_csr(combine: str):
    atomic = combine == "atomic"
    zero_fill, write, row_groups, add_nonzeros, _ = _spmm_macros(atomic)

    @T.macro
    def csr_row(acc, row, vc, panel, indptr, indices, data, B, C, P, V):
        """Row `row` of one panel (`panel`), or with panel None of all P panels, into C."""
        if panel is None:
            for p in range(P):
                add_nonzeros(acc, indptr[p, row], indptr[p, row + 1], indices, data, B, vc, V)
        else:
            add_nonzeros(acc, indptr[panel, row], indptr[panel, row + 1], indices, data, B, vc, V)
        write(C, acc, row, vc, V)

    @T.prim_func
    def spmm(indptr_h: T.handle, indices_h: T.handle, data_h: T.handle, b_h: T.handle,
             c_h: T.handle, nvec: T.int32, I: T.int32, TX: T.int32, V: T.int32):
        T.func_attr({"tirx.noalias": True})
        P, M, NNZ, K = T.int32(), T.int32(), T.int32(), T.int32()
        indptr = T.match_buffer(indptr_h, (P, M + 1), "int32")
        indices, data = nonzeros(NNZ, indices_h, data_h)
        B, C = dense(b_h, K, nvec, V), dense(c_h, M, nvec, V)
        if atomic:  # one panel a blockIdx.z, each adding its share of a row into C
            zero_fill(C, M, nvec * V)
            for bz in T.thread_binding(P, thread="blockIdx.z"):
                row_groups(M, csr_row, nvec, I, TX, V, bz, indptr, indices, data, B, C, P, V)
        else:
            row_groups(M, csr_row, nvec, I, TX, V, None, indptr, indices, data, B, C, P, V)
    return spmm


def spmm_hyb(combine: str):
    zero_fill, write, row_groups, add_nonzeros, ell_bucket = _spmm_macros(combine == "atomic")

    @T.macro
    def rest_row(acc, r, vc, rest_rows, rest_start, rest_end, indices, data, B, C, V):
        add_nonzeros(acc, rest_start[r], rest_end[r], indices, data, B, vc, V)
        write(C, acc, rest_rows[r], vc, V)

    @T.prim_func
    def spmm(rows_h: T.handle, cols_h: T.handle, vals_h: T.handle, rrow_h: T.handle,
             rlo_h: T.handle, rhi_h: T.handle, indices_h: T.handle, data_h: T.handle,
             b_h: T.handle, c_h: T.handle, n0: T.int32, n1: T.int32, n2: T.int32, n3: T.int32,
             n4: T.int32, n5: T.int32, q: T.int32, nvec: T.int32, I: T.int32, TX: T.int32,
             V: T.int32):
        T.func_attr({"tirx.noalias": True})
        R, E, Q, NNZ, M, K = T.int32(), T.int32(), T.int32(), T.int32(), T.int32(), T.int32()
        ell_rows, ell_cols, ell_vals = _ell(R, E, rows_h, cols_h, vals_h)
        rest_rows, rest_start, rest_end = row_ranges(Q, rrow_h, rlo_h, rhi_h)
        indices, data = nonzeros(NNZ, indices_h, data_h)
        B, C = dense(b_h, K, nvec, V), dense(c_h, M, nvec, V)
        zero_fill(C, M, nvec * V)
        _ell_buckets(ell_bucket, (n0, n1, n2, n3, n4, n5), ell_rows, ell_cols, ell_vals, B, C,
                     nvec, I, TX, V)
        if q > 0:
            row_groups(q, rest_row, nvec, I, TX, V, rest_rows, rest_start, rest_end, indices, data,
                       B, C, V)
    return spmm


def _sddmm_macros():

    @T.macro
    def dot(X, Y, row, col, nvec, tx, ty, accv, red, TX, V, LOG_TX):
        """red[0] <- X[row] . Y[col], summed over the TX lanes of this row's group."""
        for e in T.vectorized(V):
            accv[e] = T.float32(0)
        for k in range((nvec + TX - 1) // TX):
            if k * TX + tx < nvec:
                for e in T.vectorized(V):
                    accv[e] = accv[e] + X[row, (k * TX + tx) * V + e] * Y[col, (k * TX + tx) * V + e]
        red[0] = T.float32(0)
        for e in T.unroll(V):
            red[0] = red[0] + accv[e]
        group_sum(red, ty, TX, LOG_TX)

    @T.macro
    def row_lanes(bx, n, gather, I, TX, V, *args):
        """gather(r, tx, ty, accv, red, *args) for the rows r < n of block bx, TX lanes a row."""
        for ty in T.thread_binding(I, thread="threadIdx.y"):
            for tx in T.thread_binding(TX, thread="threadIdx.x"):
                accv = T.alloc_buffer((V,), "float32", scope="local")
                red = T.alloc_buffer((1,), "float32", scope="local")
                r = T.meta_var(bx * I + ty)
                if r < n:
                    gather(r, tx, ty, accv, red, *args)

    @T.macro
    def row_groups(n, gather, I, TX, V, *args):
        """row_lanes over the rows r < n, I rows a block."""
        for bx in T.thread_binding((n + I - 1) // I, thread="blockIdx.x"):
            row_lanes(bx, n, gather, I, TX, V, *args)

    @T.macro
    def nonzero_dots(row, lo, hi, indices, data, pos, X, Y, O, nvec, tx, ty, accv, red, TX, V,
                     LOG_TX):
        """O[pos[n]] <- data[n] * (X[row] . Y[indices[n]]) for the nonzeros n in [lo, hi)."""
        for n in range(lo, hi):
            dot(X, Y, row, indices[n], nvec, tx, ty, accv, red, TX, V, LOG_TX)
            if tx == 0:
                O[pos[n]] = data[n] * red[0]

    @T.macro
    def ell_row(r, tx, ty, accv, red, W, r0, e0, ell_rows, ell_cols, ell_vals, ell_pos, X, Y, O,
                nvec, TX, V, LOG_TX):
        for s in range(W):
            if ell_pos[e0 + r * W + s] >= 0:
                dot(X, Y, ell_rows[r0 + r], ell_cols[e0 + r * W + s], nvec, tx, ty, accv, red, TX, V,
                    LOG_TX)
                if tx == 0:
                    O[ell_pos[e0 + r * W + s]] = ell_vals[e0 + r * W + s] * red[0]

    @T.macro
    def ell_bucket(W, n, r0, e0, ell_rows, ell_cols, ell_vals, ell_pos, X, Y, O, nvec, I, TX, V,
                   LOG_TX):
        if n > 0:
            row_groups(n, ell_row, I, TX, V, W, r0, e0, ell_rows, ell_cols, ell_vals, ell_pos, X, Y,
                       O, nvec, TX, V, LOG_TX)

    return row_lanes, row_groups, nonzero_dots, ell_bucket


def sddmm_csr(combine: str):
    row_lanes, _, nonzero_dots, _ = _sddmm_macros()

    @T.macro
    def panel_row(row, tx, ty, accv, red, bp, indptr, indices, data, pos, X, Y, O, nvec, TX, V,
                  LOG_TX):
        nonzero_dots(row, indptr[bp, row], indptr[bp, row + 1], indices, data, pos, X, Y, O, nvec,
                     tx, ty, accv, red, TX, V, LOG_TX)

    @T.prim_func
    def sddmm(indptr_h: T.handle, indices_h: T.handle, data_h: T.handle, pos_h: T.handle,
              x_h: T.handle, y_h: T.handle, o_h: T.handle, nvec: T.int32, I: T.int32,
              TX: T.int32, V: T.int32, LOG_TX: T.int32):
        T.func_attr({"tirx.noalias": True})
        P, M, NNZ, K, NO = T.int32(), T.int32(), T.int32(), T.int32(), T.int32()
        indptr = T.match_buffer(indptr_h, (P, M + 1), "int32")
        indices, data = nonzeros(NNZ, indices_h, data_h)
        pos = T.match_buffer(pos_h, (NNZ,), "int32")
        X, Y = dense(x_h, M, nvec, V), dense(y_h, K, nvec, V)
        O = T.match_buffer(o_h, (NO,), "float32")
        for bx in T.thread_binding((M + I - 1) // I, thread="blockIdx.x"):
            for bp in T.thread_binding(P, thread="blockIdx.y"):
                row_lanes(bx, M, panel_row, I, TX, V, bp, indptr, indices, data, pos, X, Y, O, nvec,
                          TX, V, LOG_TX)
    return sddmm


def sddmm_hyb(combine: str):
    _, row_groups, nonzero_dots, ell_bucket = _sddmm_macros()

    @T.macro
    def rest_row(r, tx, ty, accv, red, rest_rows, rest_start, rest_end, indices, data, pos, X, Y,
                 O, nvec, TX, V, LOG_TX):
        nonzero_dots(rest_rows[r], rest_start[r], rest_end[r], indices, data, pos, X, Y, O, nvec,
                     tx, ty, accv, red, TX, V, LOG_TX)

    @T.prim_func
    def sddmm(rows_h: T.handle, cols_h: T.handle, vals_h: T.handle, epos_h: T.handle,
              rrow_h: T.handle, rlo_h: T.handle, rhi_h: T.handle, indices_h: T.handle,
              data_h: T.handle, pos_h: T.handle, x_h: T.handle, y_h: T.handle, o_h: T.handle,
              n0: T.int32, n1: T.int32, n2: T.int32, n3: T.int32, n4: T.int32, n5: T.int32,
              q: T.int32, nvec: T.int32, I: T.int32, TX: T.int32, V: T.int32,
              LOG_TX: T.int32):
        T.func_attr({"tirx.noalias": True})
        R, E, Q, NNZ, M, K, NO = (T.int32(), T.int32(), T.int32(), T.int32(), T.int32(),
                                  T.int32(), T.int32())
        ell_rows, ell_cols, ell_vals = _ell(R, E, rows_h, cols_h, vals_h)
        ell_pos = T.match_buffer(epos_h, (E,), "int32")
        rest_rows, rest_start, rest_end = row_ranges(Q, rrow_h, rlo_h, rhi_h)
        indices, data = nonzeros(NNZ, indices_h, data_h)
        pos = T.match_buffer(pos_h, (NNZ,), "int32")
        X, Y = dense(x_h, M, nvec, V), dense(y_h, K, nvec, V)
        O = T.match_buffer(o_h, (NO,), "float32")
        _ell_buckets(ell_bucket, (n0, n1, n2, n3, n4, n5), ell_rows, ell_cols, ell_vals, ell_pos,
                     X, Y, O, nvec, I, TX, V, LOG_TX)
        if q > 0:
            row_groups(q, rest_row, I, TX, V, rest_rows, rest_start, rest_end, indices, data, pos,
                       X, Y, O, nvec, TX, V, LOG_TX)
    return sddmm
