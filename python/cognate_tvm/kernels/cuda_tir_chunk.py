"""TVMScript (TensorIR) bodies of the CUDA SpMM / SDDMM kernel variants of the chunk layout.

Argument layouts (built by `cuda_prep`):

spmm chunk: chunk_rows[Q], chunk_start[Q], chunk_end[Q], zero_rows[Z], indices, data, B, C,
            q, z, nvec, I
sddmm chunk: chunk_rows, chunk_start, chunk_end, indices, data, pos, X, Y, O, q, nvec, I

Chunk tables (`cuda_prep.chunk_table`): chunk r covers nonzeros
[chunk_start[r], chunk_end[r]) of row chunk_rows[r]; in SpMM a negative entry
-1 - row marks a row that several chunks add into (zeroed first, over
zero_rows, then combined with atomicAdd), a non-negative one a row that the
chunk alone stores. The chunk builders take CPT (vectors per thread) as a
further constant and a Python flag `cache` (row caching) that picks the body;
otherwise they follow the conventions of the csr and hyb builders (`cuda_tir`).
"""
from __future__ import annotations

from tvm.script import tirx as T

from .cuda_tir_common import ZERO_THREADS, dense, group_mask, group_sum, nonzeros, row_ranges


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
        chunk_rows, chunk_start, chunk_end = row_ranges(Q, crow_h, clo_h, chi_h)
        zero_rows = T.match_buffer(zrow_h, (Z,), "int32")
        indices, data = nonzeros(NNZ, indices_h, data_h)
        B, C = dense(b_h, K, nvec, V), dense(c_h, M, nvec, V)
        if z > 0:  # rows that several chunks add into start from zero
            for bx in bind(z, "blockIdx.x"):
                for t in bind(ZERO_THREADS, "threadIdx.x"):
                    for k in range((nvec * V + ZERO_THREADS - 1) // ZERO_THREADS):
                        if k * ZERO_THREADS + t < nvec * V:
                            C[zero_rows[bx], k * ZERO_THREADS + t] = T.float32(0)
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
        chunk_rows, chunk_start, chunk_end = row_ranges(Q, crow_h, clo_h, chi_h)
        indices, data = nonzeros(NNZ, indices_h, data_h)
        pos = T.match_buffer(pos_h, (NNZ,), "int32")
        X, Y = dense(x_h, M, nvec, V), dense(y_h, K, nvec, V)
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
