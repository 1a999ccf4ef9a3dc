"""The sparse workloads as TensorIR, specialized to one matrix.

M, K, nnz and N are constants, as ``ArgInfo.from_prim_func`` needs. A "row" block per row
and an "update" block over the row's nonzeros (k) and the dense columns (j):

- SpMM: ``C[i, j] += vals[p] * B[indices[p], j]`` (j spatial, k a reduction);
- SDDMM: ``O[p] += vals[p] * X[i, j] * Y[indices[p], j]`` (k spatial, j a reduction).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import tvm

from ..errors import ShapeError
from ..ops import Op, get_op

ROW_BLOCK = "row"
UPDATE_BLOCK = "update"


def kernel_csr(matrix: sp.csr_matrix) -> sp.csr_matrix:
    """`matrix` with an explicit zero (column 0) in each row that has no nonzero.

    SpMM's init (which zeroes an output row) runs at a row's first nonzero, so a
    row without any would never be written; the stored zero makes the kernel
    write it without changing the product. Canonical CSR otherwise.
    """
    matrix = sp.csr_matrix(matrix, dtype=np.float32)
    lengths = np.diff(matrix.indptr)
    empty = np.flatnonzero(lengths == 0)
    if empty.size == 0:
        return matrix
    rows = np.concatenate([np.repeat(np.arange(matrix.shape[0]), lengths), empty])
    cols = np.concatenate([matrix.indices, np.zeros(empty.size, dtype=matrix.indices.dtype)])
    vals = np.concatenate([matrix.data, np.zeros(empty.size, dtype=np.float32)])
    order = np.lexsort((cols, rows))
    indptr = np.concatenate([[0], np.cumsum(np.maximum(lengths, 1))])
    return sp.csr_matrix((vals[order], cols[order], indptr), shape=matrix.shape)  # arrays keep explicit zeros


def workload_csr(op: str | Op, matrix: sp.csr_matrix) -> sp.csr_matrix:
    """The CSR arrays the workload of `op` reads (SpMM: `kernel_csr`; SDDMM: canonical, outputs per nonzero)."""
    return kernel_csr(matrix) if get_op(op).name == "spmm" else sp.csr_matrix(matrix, dtype=np.float32)


_SPMM_BODY = '''
    B = T.match_buffer(b_h, ({cols}, {feat}), "float32")
    C = T.match_buffer(c_h, ({rows}, {feat}), "float32")
    for i in T.serial({rows}):
        with T.sblock("{row}"):
            vi = T.axis.spatial({rows}, i)
            T.reads(indptr[vi:vi + 2], indices[0:{nnz}], vals[0:{nnz}], B[0:{cols}, 0:{feat}])
            T.writes(C[vi, 0:{feat}])
            for k, j in T.grid(indptr[vi + 1] - indptr[vi], {feat}):
                with T.sblock("{update}"):
                    vk = T.axis.reduce(indptr[vi + 1] - indptr[vi], k)
                    vj = T.axis.spatial({feat}, j)
                    T.reads(indptr[vi], indices[indptr[vi] + vk], vals[indptr[vi] + vk],
                            B[indices[indptr[vi] + vk], vj])
                    T.writes(C[vi, vj])
                    with T.init():
                        C[vi, vj] = T.float32(0)
                    C[vi, vj] = C[vi, vj] + vals[indptr[vi] + vk] * B[indices[indptr[vi] + vk], vj]
'''

_SDDMM_BODY = '''
    X = T.match_buffer(x_h, ({rows}, {feat}), "float32")
    Y = T.match_buffer(y_h, ({cols}, {feat}), "float32")
    O = T.match_buffer(o_h, ({nnz},), "float32")
    for i in T.serial({rows}):
        with T.sblock("{row}"):
            vi = T.axis.spatial({rows}, i)
            T.reads(indptr[vi:vi + 2], indices[0:{nnz}], vals[0:{nnz}], X[vi, 0:{feat}], Y[0:{cols}, 0:{feat}])
            T.writes(O[indptr[vi]:indptr[vi + 1]])
            for k, j in T.grid(indptr[vi + 1] - indptr[vi], {feat}):
                with T.sblock("{update}"):
                    vk = T.axis.spatial(indptr[vi + 1] - indptr[vi], k)
                    vj = T.axis.reduce({feat}, j)
                    T.reads(indptr[vi], indices[indptr[vi] + vk], vals[indptr[vi] + vk], X[vi, vj],
                            Y[indices[indptr[vi] + vk], vj])
                    T.writes(O[indptr[vi] + vk])
                    with T.init():
                        O[indptr[vi] + vk] = T.float32(0)
                    O[indptr[vi] + vk] = O[indptr[vi] + vk] + vals[indptr[vi] + vk] * X[vi, vj] * \\
                        Y[indices[indptr[vi] + vk], vj]
'''


def sparse_prim_func(op: str | Op, matrix: sp.csr_matrix, feat: int):
    """TensorIR of `op` specialized to `matrix`'s shapes (arguments: indptr, indices, vals, dense..., out).

    The kernel reads ``workload_csr(op, matrix)`` (nnz counts SpMM's padding zeros).
    """
    op = get_op(op)
    matrix = workload_csr(op, matrix)
    rows, cols = matrix.shape
    nnz, feat = int(matrix.nnz), int(feat)
    if feat < 1 or nnz < 1:
        raise ShapeError(f"{op.name} workload needs nnz >= 1 and feat >= 1, got nnz={nnz}, feat={feat}")
    dense = ("b_h", "c_h") if op.name == "spmm" else ("x_h", "y_h", "o_h")
    body = (_SPMM_BODY if op.name == "spmm" else _SDDMM_BODY).format(
        rows=rows, cols=cols, nnz=nnz, feat=feat, row=ROW_BLOCK, update=UPDATE_BLOCK)
    source = (f"@T.prim_func(s_tir=True)\n"
              f"def main(indptr_h: T.handle, indices_h: T.handle, vals_h: T.handle, "
              f"{', '.join(f'{d}: T.handle' for d in dense)}):\n"
              f'    T.func_attr({{"global_symbol": "main", "tirx.noalias": True}})\n'
              f'    indptr = T.match_buffer(indptr_h, ({rows + 1},), "int32")\n'
              f'    indices = T.match_buffer(indices_h, ({nnz},), "int32")\n'
              f'    vals = T.match_buffer(vals_h, ({nnz},), "float32")' + body)
    return tvm.script.from_source(source)


def sparse_module(op: str | Op, matrix: sp.csr_matrix, feat: int) -> tvm.IRModule:
    """The workload as an IRModule (pass the same module to tuning and to the database)."""
    return tvm.IRModule({"main": sparse_prim_func(op, matrix, feat)})

