"""Shared fixtures: small matrices with the shapes every kernel must handle."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm.matrix import as_csr, generate


def _with_empty_rows() -> sp.csr_matrix:
    rng = np.random.default_rng(1)
    dense = rng.standard_normal((37, 41)) * (rng.random((37, 41)) < 0.15)
    dense[[0, 5, 6, 7, 36]] = 0.0  # first, consecutive and last rows empty
    return as_csr(dense, name="empty_rows")


def _single_nonzero() -> sp.csr_matrix:
    return as_csr(sp.csr_matrix(([2.5], ([3], [4])), shape=(9, 7)), name="single_nonzero")


def _tall() -> sp.csr_matrix:
    return as_csr(sp.random_array((300, 45), density=0.05, rng=np.random.default_rng(2)), name="tall")


def _wide() -> sp.csr_matrix:
    return as_csr(sp.random_array((40, 700), density=0.03, rng=np.random.default_rng(3)), name="wide")


SMALL_MATRICES = {
    "empty_rows": _with_empty_rows,
    "single_nonzero": _single_nonzero,
    "tall": _tall,
    "wide": _wide,
    "powerlaw": lambda: generate("rmat", 600, seed=4),
    "banded": lambda: generate("banded", 500, seed=5),
}


def skewed_matrices() -> dict[str, sp.csr_matrix]:
    """Matrices whose rows split unevenly: most nonzeros in the first rows, trailing empty rows, no
    nonzeros at all."""
    rng = np.random.default_rng(0)
    heavy_first = sp.random(300, 120, density=0.02, format="csr", random_state=1, dtype=np.float32).tolil()
    heavy_first[:3, :] = rng.standard_normal((3, 120))  # three dense rows: most of the nonzeros
    trailing_empty = sp.random(200, 90, density=0.05, format="lil", random_state=2, dtype=np.float32)
    trailing_empty[150:, :] = 0
    return {"heavy_first_rows": sp.csr_matrix(heavy_first), "trailing_empty": sp.csr_matrix(trailing_empty),
            "all_empty": sp.csr_matrix((50, 40), dtype=np.float32)}


def wrong_outputs(backend, op, configs) -> list:
    """(matrix, config, error) of every config whose output differs from scipy's on the edge-case and
    skewed matrices."""
    matrices = {name: build() for name, build in SMALL_MATRICES.items()} | skewed_matrices()
    return [(name, result.config.to_json(), result.error) for name, matrix in matrices.items()
            for result in backend.measure(op, matrix, configs, 20, check=True, seed=1) if result.correct is not True]


@pytest.fixture(params=sorted(SMALL_MATRICES))
def small_matrix(request) -> sp.csr_matrix:
    """Each of the matrices every kernel must get right."""
    return SMALL_MATRICES[request.param]()


@pytest.fixture
def small_matrices() -> dict[str, sp.csr_matrix]:
    return {name: build() for name, build in SMALL_MATRICES.items()}


@pytest.fixture(scope="module")
def gb():
    """scripts/gpu_bundle.py as a module (registered in sys.modules while the tests use it: its
    dataclasses need that)."""
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "gpu_bundle", Path(__file__).resolve().parent.parent / "scripts" / "gpu_bundle.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_bundle"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_bundle", None)
