"""A checkout stays small: what git tracks, without the datasets and the shipped models, fits in 6 MiB.

Result figures are palette PNGs and bulky per-config tables Parquet (benchmarks/common.py,
tune_eval's sweeps.parquet); this catches a result folder or figure that slips past that.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 6 * 2**20
LEFT_OUT = ("data/", "python/cognate_tvm/pretrained/")  # datasets and shipped models have their own size rules


def _tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout of the project (git ls-files)")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [name for name in out.decode().split("\0") if name and not name.startswith(LEFT_OUT)]


def test_tracked_tree_without_data_and_models_fits_the_limit():
    sizes = {name: (ROOT / name).stat().st_size for name in _tracked_files() if (ROOT / name).is_file()}
    total = sum(sizes.values())
    heaviest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
    assert total <= LIMIT_BYTES, (f"tracked files without {LEFT_OUT} hold {total / 2**20:.2f} MiB, more than "
                                  f"{LIMIT_BYTES / 2**20:.0f} MiB; the heaviest: {heaviest}")
