"""Load and save sparse matrices: Matrix Market (.mtx), scipy .npz, edge lists.

Every loaded matrix goes through `as_csr`, which gives the canonical form the
kernels expect (CSR, float32 values, int32 sorted indices, no duplicates) and
rejects NaN/inf values with an error naming the file.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from ..errors import MatrixFormatError

EDGE_LIST_SUFFIXES = (".el", ".edges", ".txt", ".tsv", ".csv")
# The bundled example (an R-MAT graph, 4096 rows): the CLIs' default --matrix.
EXAMPLE_MATRIX = Path(__file__).resolve().parents[1] / "sample_matrices" / "example_powerlaw.mtx.gz"


def as_csr(matrix, *, name: str = "matrix") -> sp.csr_matrix:
    """Canonical CSR: float32 values, int32 sorted indices, duplicates summed, finite."""
    if not sp.issparse(matrix):
        arr = np.asarray(matrix)
        if arr.ndim != 2:
            raise MatrixFormatError(f"{name}: expected a 2-D matrix, got shape {arr.shape}")
        matrix = sp.csr_matrix(arr)
    if matrix.ndim != 2:
        raise MatrixFormatError(f"{name}: expected a 2-D matrix, got {matrix.ndim} dimensions")
    if not np.issubdtype(matrix.dtype, np.number) or np.iscomplexobj(matrix.data):
        raise MatrixFormatError(f"{name}: values must be real numbers, got dtype {matrix.dtype}")
    csr = sp.csr_matrix(matrix, dtype=np.float32, copy=True)
    csr.sum_duplicates()
    csr.sort_indices()
    if not np.all(np.isfinite(csr.data)):
        bad = int(np.count_nonzero(~np.isfinite(csr.data)))
        raise MatrixFormatError(f"{name}: {bad} non-finite value(s) (NaN or inf)")
    if csr.nnz >= 2**31 or max(csr.shape) >= 2**31:
        raise MatrixFormatError(f"{name}: too large for int32 indices ({csr.shape}, nnz={csr.nnz})")
    csr.indptr = csr.indptr.astype(np.int32, copy=False)
    csr.indices = csr.indices.astype(np.int32, copy=False)
    return csr


def load_matrix(path: str | os.PathLike) -> sp.csr_matrix:
    """Load a .mtx, .npz or edge-list file as canonical CSR.

    Raises FileNotFoundError for a missing file and MatrixFormatError for a
    malformed one (the message names the file and the problem).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"matrix file not found: {path}")
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    if suffix in (".mtx", ".mtx.gz"):
        matrix = _load_mtx(path)
    elif suffix == ".npz":
        matrix = _load_npz(path)
    elif suffix in EDGE_LIST_SUFFIXES:
        matrix = _load_edge_list(path)
    else:
        raise MatrixFormatError(f"{path}: unknown matrix file type {suffix!r}; "
                                f"use .mtx, .npz or an edge list ({', '.join(EDGE_LIST_SUFFIXES)})")
    return as_csr(matrix, name=str(path))


def _load_mtx(path: Path):
    try:
        matrix = scipy.io.mmread(path)
    except Exception as exc:  # scipy raises ValueError, IndexError, ... for bad files
        raise MatrixFormatError(f"{path}: malformed Matrix Market file: {exc}") from exc
    if not sp.issparse(matrix):
        matrix = sp.csr_matrix(np.asarray(matrix))
    return matrix


def _load_npz(path: Path):
    try:
        return sp.load_npz(path)
    except Exception as exc:
        raise MatrixFormatError(f"{path}: not a scipy sparse .npz file: {exc}") from exc


def _load_edge_list(path: Path):
    """Rows of `src dst [weight]`, 0-based, '#' or '%' comments; shape from the max index."""
    rows, cols, vals = [], [], []
    with open(path) as handle:
        for lineno, line in enumerate(handle, 1):
            line = line.strip()
            if not line or line[0] in "#%":
                continue
            parts = line.replace(",", " ").split()
            if len(parts) not in (2, 3):
                raise MatrixFormatError(f"{path}:{lineno}: expected 'src dst [weight]', got {line!r}")
            try:
                r, c = int(parts[0]), int(parts[1])
                v = float(parts[2]) if len(parts) == 3 else 1.0
            except ValueError:
                raise MatrixFormatError(f"{path}:{lineno}: non-numeric entry {line!r}") from None
            if r < 0 or c < 0:
                raise MatrixFormatError(f"{path}:{lineno}: negative index in {line!r}")
            rows.append(r), cols.append(c), vals.append(v)
    if not rows:
        raise MatrixFormatError(f"{path}: edge list has no edges")
    shape = (max(rows) + 1, max(cols) + 1)
    return sp.coo_matrix((vals, (rows, cols)), shape=shape)


def save_matrix(matrix, path: str | os.PathLike) -> Path:
    """Write `matrix` as .mtx or .npz (by suffix), atomically: a crash never leaves half a file."""
    path = Path(path)
    csr = as_csr(matrix, name=str(path))
    if path.suffix not in (".mtx", ".npz"):
        raise MatrixFormatError(f"{path}: can only save .mtx or .npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    # A unique sibling name, then an atomic rename: a crash never leaves half a file.
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp{path.suffix}")
    try:
        if path.suffix == ".mtx":
            scipy.io.mmwrite(tmp, csr)
        else:
            sp.save_npz(tmp, csr)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
