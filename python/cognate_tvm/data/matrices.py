"""The matrices a dataset names: identified by their pattern's hash, built from their source.

A source is a CSR matrix, or a recipe with ``.build()`` (e.g. a `CorpusEntry`); a dataset
records each matrix's pattern hash, so a rebuilt matrix is checked against the one timed.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..errors import DatasetMismatchError


def matrix_hash(matrix: sp.csr_matrix) -> str:
    """Content hash of a sparsity pattern (shape, indptr, indices; values are ignored)."""
    csr = sp.csr_matrix(matrix)
    digest = hashlib.sha1()
    digest.update(np.asarray(csr.shape, dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(csr.indptr, dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(csr.indices, dtype=np.int32).tobytes())
    return digest.hexdigest()


def build_matrix(item) -> sp.csr_matrix:
    """The matrix of a source: `item` built, or `item` itself when it is no recipe."""
    return item.build() if hasattr(item, "build") else item


def checked_build(name: str, item, recorded: pd.Series) -> sp.csr_matrix:
    """The matrix `item` builds, checked against the pattern hash the dataset recorded for `name`."""
    matrix = build_matrix(item)
    hashes = {h for h in recorded.dropna().unique() if h}
    if hashes and matrix_hash(matrix) not in hashes:
        raise DatasetMismatchError(
            f"matrix {name!r} builds a pattern ({matrix.shape[0]}x{matrix.shape[1]}, {matrix.nnz} nonzeros, hash "
            f"{matrix_hash(matrix)[:12]}) other than the one the dataset timed (hash {sorted(hashes)[0][:12]}): "
            "the corpus changed since the data was collected, or the matrix builds differently on this CPU "
            "(a reverse Cuthill-McKee numbering follows numpy's sort, which depends on the CPU's vector "
            "extensions); collect it again on this machine, or leave it out (`groups_from_frame(on_mismatch=...)`, "
            "`benchmarks/pretrain.py --skip-mismatched`)")
    return matrix
