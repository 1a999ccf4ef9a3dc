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
