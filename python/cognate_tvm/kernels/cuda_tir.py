"""TVMScript (TensorIR) bodies of the CUDA SpMM / SDDMM kernel variants.

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
spmm chunk: chunk_rows[Q], chunk_start[Q], chunk_end[Q], zero_rows[Z], indices, data, B, C,
            q, z, nvec, I
sddmm chunk: chunk_rows, chunk_start, chunk_end, indices, data, pos, X, Y, O, q, nvec, I

Chunk tables (`cuda_prep.chunk_table`): chunk r covers nonzeros
[chunk_start[r], chunk_end[r]) of row chunk_rows[r]; in SpMM a negative entry
-1 - row marks a row that several chunks add into (zeroed first, over
zero_rows, then combined with atomicAdd), a non-negative one a row that the
chunk alone stores. The chunk builders take CPT (vectors per thread) as a
further constant and a Python flag `cache` (row caching) that picks the body.

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

_ZERO_THREADS = 128  # threads of a block that zero-fills rows of C

if len(ELL_WIDTHS) != 6:  # the hyb signatures list one row count (n0..n5) per bucket
    raise ImportError(f"cuda_tir is written for 6 ELL buckets, ELL_WIDTHS has {len(ELL_WIDTHS)}")


# Argument declarations that several kernels share. Plain functions, called while a prim_func
# is parsed: each T.match_buffer joins that prim_func's buffer map, and the assignment at the
# call site names the buffers; the symbolic sizes stay declared (and named) in each kernel.
def _nonzeros(NNZ, indices_h, data_h):
    """indices[NNZ], data[NNZ]: the nonzeros' columns and values (panel order)."""
    return T.match_buffer(indices_h, (NNZ,), "int32"), T.match_buffer(data_h, (NNZ,), "float32")


def _ell(R, E, rows_h, cols_h, vals_h):
    """ell_rows[R], ell_cols[E], ell_vals[E]: the bucketed rows and their slots' columns, values."""
    return (T.match_buffer(rows_h, (R,), "int32"), T.match_buffer(cols_h, (E,), "int32"),
            T.match_buffer(vals_h, (E,), "float32"))


def _row_ranges(Q, rows_h, start_h, end_h):
    """rows[Q], start[Q], end[Q]: entry r covers nonzeros [start[r], end[r]) of row rows[r]."""
    return tuple(T.match_buffer(h, (Q,), "int32") for h in (rows_h, start_h, end_h))


def _dense(h, rows, nvec, V):
    """A float32 matrix [rows, nvec * V]: a dense operand, or SpMM's output."""
    return T.match_buffer(h, (rows, nvec * V), "float32")


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
            for t in T.thread_binding(_ZERO_THREADS, thread="threadIdx.x"):
                for k in range((F + _ZERO_THREADS - 1) // _ZERO_THREADS):
                    if k * _ZERO_THREADS + t < F:
                        C[bx, k * _ZERO_THREADS + t] = T.float32(0)

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
        indices, data = _nonzeros(NNZ, indices_h, data_h)
        B, C = _dense(b_h, K, nvec, V), _dense(c_h, M, nvec, V)
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
        rest_rows, rest_start, rest_end = _row_ranges(Q, rrow_h, rlo_h, rhi_h)
        indices, data = _nonzeros(NNZ, indices_h, data_h)
        B, C = _dense(b_h, K, nvec, V), _dense(c_h, M, nvec, V)
        zero_fill(C, M, nvec * V)
        _ell_buckets(ell_bucket, (n0, n1, n2, n3, n4, n5), ell_rows, ell_cols, ell_vals, B, C,
                     nvec, I, TX, V)
        if q > 0:
            row_groups(q, rest_row, nvec, I, TX, V, rest_rows, rest_start, rest_end, indices, data,
                       B, C, V)
    return spmm


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
        indices, data = _nonzeros(NNZ, indices_h, data_h)
        pos = T.match_buffer(pos_h, (NNZ,), "int32")
        X, Y = _dense(x_h, M, nvec, V), _dense(y_h, K, nvec, V)
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
        rest_rows, rest_start, rest_end = _row_ranges(Q, rrow_h, rlo_h, rhi_h)
        indices, data = _nonzeros(NNZ, indices_h, data_h)
        pos = T.match_buffer(pos_h, (NNZ,), "int32")
        X, Y = _dense(x_h, M, nvec, V), _dense(y_h, K, nvec, V)
        O = T.match_buffer(o_h, (NO,), "float32")
        _ell_buckets(ell_bucket, (n0, n1, n2, n3, n4, n5), ell_rows, ell_cols, ell_vals, ell_pos,
                     X, Y, O, nvec, I, TX, V, LOG_TX)
        if q > 0:
            row_groups(q, rest_row, I, TX, V, rest_rows, rest_start, rest_end, indices, data, pos,
                       X, Y, O, nvec, TX, V, LOG_TX)
    return sddmm


def _lanes(serial: bool):
    """Thread loops, lane exchange and atomic add: CUDA's, or with `serial` plain loops for one lane
    per group (TX = 1: a shuffle returns the lane's own value), which lower for llvm and run on a CPU."""

    def bind(extent, thread):
        return T.serial(extent) if serial else T.thread_binding(extent, thread=thread)

    def shfl(dtype, mask, value, lane, width):
        return value if serial else T.call_extern(dtype, "__shfl_sync", mask, value, lane, width)

    @T.macro
    def add_into(C, row, col, value):
        if serial:
            C[row, col] = C[row, col] + value
        else:
            T.evaluate(T.call_extern("float32", "atomicAdd", T.address_of(C[row, col]), value))

    return bind, shfl, add_into


def _chunk_spmm_macros(cache: bool, shfl):
    """The chunk walk of SpMM: plain (every lane loads every index) or row-cached (shuffles)."""

    @T.macro
    def fma(acc, B, col, val, vbase, nvec, TX, V, CPT):
        for u in T.unroll(CPT):
            if vbase + u * TX < nvec:
                for e in T.vectorized(V):
                    acc[u * V + e] = acc[u * V + e] + val * B[col, (vbase + u * TX) * V + e]

    @T.macro
    def walk(acc, lo, hi, indices, data, B, vbase, nvec, tx, ty, TX, V, CPT):
        if cache:  # TX lanes load TX consecutive nonzeros at once and pass them around
            mine_c = T.alloc_buffer((1,), "int32", scope="local")
            mine_v = T.alloc_buffer((1,), "float32", scope="local")
            col = T.alloc_buffer((1,), "int32", scope="local")
            val = T.alloc_buffer((1,), "float32", scope="local")
            for t0 in range((hi - lo + TX - 1) // TX):
                if lo + t0 * TX + tx < hi:
                    mine_c[0] = indices[lo + t0 * TX + tx]
                    mine_v[0] = data[lo + t0 * TX + tx]
                else:
                    mine_c[0] = 0
                    mine_v[0] = T.float32(0)
                for j in T.unroll(TX):
                    if lo + t0 * TX + j < hi:  # the same for every lane of the group
                        col[0] = shfl("int32", group_mask(ty, TX), mine_c[0], j, TX)
                        val[0] = shfl("float32", group_mask(ty, TX), mine_v[0], j, TX)
                        fma(acc, B, col[0], val[0], vbase, nvec, TX, V, CPT)
        else:
            for n in range(lo, hi):
                fma(acc, B, indices[n], data[n], vbase, nvec, TX, V, CPT)

    return walk


def spmm_chunk(combine: str, cache: bool, serial: bool = False):
    bind, shfl, add_into = _lanes(serial)
    walk = _chunk_spmm_macros(cache, shfl)

    @T.prim_func
    def spmm(crow_h: T.handle, clo_h: T.handle, chi_h: T.handle, zrow_h: T.handle, indices_h: T.handle,
             data_h: T.handle, b_h: T.handle, c_h: T.handle, q: T.int32, z: T.int32, nvec: T.int32,
             I: T.int32, TX: T.int32, V: T.int32, CPT: T.int32):
        T.func_attr({"tirx.noalias": True})
        Q, Z, NNZ, M, K = T.int32(), T.int32(), T.int32(), T.int32(), T.int32()
        chunk_rows, chunk_start, chunk_end = _row_ranges(Q, crow_h, clo_h, chi_h)
        zero_rows = T.match_buffer(zrow_h, (Z,), "int32")
        indices, data = _nonzeros(NNZ, indices_h, data_h)
        B, C = _dense(b_h, K, nvec, V), _dense(c_h, M, nvec, V)
        if z > 0:  # rows that several chunks add into start from zero
            for bx in bind(z, "blockIdx.x"):
                for t in bind(_ZERO_THREADS, "threadIdx.x"):
                    for k in range((nvec * V + _ZERO_THREADS - 1) // _ZERO_THREADS):
                        if k * _ZERO_THREADS + t < nvec * V:
                            C[zero_rows[bx], k * _ZERO_THREADS + t] = T.float32(0)
        if q > 0:
            for bx in bind((q + I - 1) // I, "blockIdx.x"):
                for by in bind((nvec + TX * CPT - 1) // (TX * CPT), "blockIdx.y"):
                    for ty in bind(I, "threadIdx.y"):
                        for tx in bind(TX, "threadIdx.x"):
                            acc = T.alloc_buffer((CPT * V,), "float32", scope="local")
                            r = T.meta_var(bx * I + ty)
                            vbase = T.meta_var(by * TX * CPT + tx)
                            if r < q:
                                for u in T.unroll(CPT):
                                    for e in T.vectorized(V):
                                        acc[u * V + e] = T.float32(0)
                                walk(acc, chunk_start[r], chunk_end[r], indices, data, B, vbase, nvec,
                                     tx, ty, TX, V, CPT)
                                for u in T.unroll(CPT):
                                    if vbase + u * TX < nvec:
                                        if chunk_rows[r] >= 0:
                                            for e in T.vectorized(V):
                                                C[chunk_rows[r], (vbase + u * TX) * V + e] = acc[u * V + e]
                                        else:
                                            for e in T.unroll(V):
                                                add_into(C, -1 - chunk_rows[r], (vbase + u * TX) * V + e,
                                                         acc[u * V + e])
    return spmm


def sddmm_chunk(combine: str, cache: bool, serial: bool = False):
    """Each chunk's row slice of X (TX * CPT vectors at a time) is read once into registers when
    `cache`, else from memory at every nonzero; a group-wide shuffle sum gives each dot product."""
    bind, _, _ = _lanes(serial)

    @T.macro
    def dot_part(part, xr, X, Y, row, col, vbase, nvec, TX, V, CPT):
        for e in T.vectorized(V):
            part[e] = T.float32(0)
        for u in T.unroll(CPT):
            if vbase + u * TX < nvec:
                for e in T.vectorized(V):
                    if cache:
                        part[e] = part[e] + xr[u * V + e] * Y[col, (vbase + u * TX) * V + e]
                    else:
                        part[e] = part[e] + X[row, (vbase + u * TX) * V + e] * Y[col, (vbase + u * TX) * V + e]

    @T.prim_func
    def sddmm(crow_h: T.handle, clo_h: T.handle, chi_h: T.handle, indices_h: T.handle, data_h: T.handle,
              pos_h: T.handle, x_h: T.handle, y_h: T.handle, o_h: T.handle, q: T.int32, nvec: T.int32,
              I: T.int32, TX: T.int32, V: T.int32, LOG_TX: T.int32, CPT: T.int32):
        T.func_attr({"tirx.noalias": True})
        Q, NNZ, M, K, NO = T.int32(), T.int32(), T.int32(), T.int32(), T.int32()
        chunk_rows, chunk_start, chunk_end = _row_ranges(Q, crow_h, clo_h, chi_h)
        indices, data = _nonzeros(NNZ, indices_h, data_h)
        pos = T.match_buffer(pos_h, (NNZ,), "int32")
        X, Y = _dense(x_h, M, nvec, V), _dense(y_h, K, nvec, V)
        O = T.match_buffer(o_h, (NO,), "float32")
        if q > 0:
            for bx in bind((q + I - 1) // I, "blockIdx.x"):
                for ty in bind(I, "threadIdx.y"):
                    for tx in bind(TX, "threadIdx.x"):
                        xr = T.alloc_buffer((CPT * V,), "float32", scope="local")
                        part = T.alloc_buffer((V,), "float32", scope="local")
                        red = T.alloc_buffer((1,), "float32", scope="local")
                        r = T.meta_var(bx * I + ty)
                        if r < q:
                            for kk in range((nvec + TX * CPT - 1) // (TX * CPT)):
                                if cache:
                                    for u in T.unroll(CPT):
                                        if kk * TX * CPT + u * TX + tx < nvec:
                                            for e in T.vectorized(V):
                                                xr[u * V + e] = X[chunk_rows[r], (kk * TX * CPT + u * TX + tx) * V + e]
                                for n in range(chunk_start[r], chunk_end[r]):
                                    dot_part(part, xr, X, Y, chunk_rows[r], indices[n], kk * TX * CPT + tx, nvec,
                                             TX, V, CPT)
                                    red[0] = T.float32(0)
                                    for e in T.unroll(V):
                                        red[0] = red[0] + part[e]
                                    group_sum(red, ty, TX, LOG_TX)
                                    if tx == 0:
                                        if kk == 0:
                                            O[pos[n]] = data[n] * red[0]
                                        else:
                                            O[pos[n]] = O[pos[n]] + data[n] * red[0]
    return sddmm
