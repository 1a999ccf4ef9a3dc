"""Sweep every config of a space on matrices, into a dataset, inside a deadline.

`collect` measures seeded samples of configs and resumes a killed run; a sweep
measures *every* config of each op on each matrix, once, on a machine lent for
minutes (the GPU check, `benchmarks/gpu_check.py`): it looks at the clock between
chunks of configs, skips a matrix predicted not to fit in the time left (and
tries the next, maybe smaller, one), keeps the configs of a matrix it had to cut
short, and writes each matrix's timings to a dataset (`cognate_tvm.data`, the
format of the CPU datasets) as soon as they are measured, with a .tar.gz of it
rewritten after each matrix, so a run killed at any point leaves what it
measured. Matrices are named generator recipes (`named_matrices`), whose
arguments go into the dataset's ``backend`` column.
"""
from __future__ import annotations

import logging
import tarfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from . import space
from .data import save_results
from .errors import CognateError
from .matrix.generators import CorpusEntry

logger = logging.getLogger(__name__)


class MatrixSpecError(CognateError, ValueError):
    """A matrix list that is not ``family:rows:seed[:perm],...``."""


COST_OFFSET_NNZ = 200_000  # a config's fixed cost (launch, Python), in nonzeros' worth of work
SWEEP_CHUNK = 256          # configs timed between two looks at the clock


def named_matrices(spec: str) -> list[CorpusEntry]:
    """`family:rows:seed[:perm],...` -> generator recipes (`CorpusEntry`), named as `generate_corpus` names them."""
    entries = []
    for item in filter(None, (x.strip() for x in spec.split(","))):
        parts = item.split(":")
        if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "perm"):
            raise MatrixSpecError(f"matrix {item!r}: expected family:rows:seed or family:rows:seed:perm")
        family, rows, seed, permuted = parts[0], int(parts[1]), int(parts[2]), len(parts) == 4
        entries.append(CorpusEntry(f"{family}_{rows}_{seed}{'_perm' if permuted else ''}", family, rows, seed,
                                   permuted))
    return entries


class Sweep:
    """Every config of `ops` in the backend's space, briefly timed, matrix after matrix, inside a deadline.

    A matrix whose predicted sweep time (the mean rate seen so far per config and nonzero, plus a
    fixed cost per config) does not fit in the time left is skipped, and the next, maybe smaller,
    one is tried; a sweep that runs out of time mid-matrix keeps the configs it timed. Each
    matrix's timings go to the dataset at `dataset` as soon as they are measured (`metadata`, the
    matrix's generator arguments and how many configs were swept join the backend's own), and
    `archive` (a .tar.gz of the dataset) is rewritten after each matrix. `deadline` is a
    time.perf_counter() value; `backend` times as briefly as the caller wants (e.g. a CUDA
    backend `with_timing(number=2, repeat=1)`).
    """

    def __init__(self, backend, *, ops: Sequence[str], feat: int, seed: int, deadline: float,
                 dataset: Path | None = None, archive: Path | None = None, metadata: dict | None = None):
        self.backend, self.ops = backend, tuple(ops)
        self.feat, self.seed, self.deadline = feat, seed, deadline
        self.dataset, self.archive, self.metadata = dataset, archive, dict(metadata or {})
        self.rates: list[float] = []  # seconds per (config x (nnz + COST_OFFSET_NNZ)) of each matrix swept
        self.skipped: list[dict] = []

    def predicted_s(self, matrix, configs: int) -> float | None:
        """Seconds to sweep `configs` configs of `matrix` at the mean rate so far (None before any)."""
        return float(np.mean(self.rates)) * configs * (matrix.nnz + COST_OFFSET_NNZ) if self.rates else None

    def run(self, corpus) -> tuple[list, bool]:
        """(rows, truncated): one row per matrix swept, whole or in part (`Sweep` says what a row holds)."""
        spaces = {op: space.create(self.backend.platform, op).configs() for op in self.ops}
        total = sum(len(c) for c in spaces.values())
        rows, truncated = [], False
        for entry in corpus:
            matrix = entry.build()
            left, predicted = self.deadline - time.perf_counter(), self.predicted_s(matrix, total)
            if left <= 0 or (predicted is not None and predicted > left):
                self.skipped.append({"name": entry.name, "nnz": int(matrix.nnz), "predicted_s": predicted,
                                     "left_s": left})
                logger.warning("budget: %s skipped (sweep predicted %s s, %.0f s left)", entry.name,
                               None if predicted is None else round(predicted), left)
                truncated = True
                continue
            t0 = time.perf_counter()
            row = {"name": entry.name, "family": entry.family, "shape": list(matrix.shape), "nnz": int(matrix.nnz),
                   "matrix": matrix, "recipe": _recipe(entry), "feat": self.feat, "ops": {}}
            for op in self.ops:
                row["ops"][op] = self.measure_op(op, entry.name, matrix, spaces[op], row["recipe"])
            rows.append(row)
            elapsed = time.perf_counter() - t0
            swept = sum(row["ops"][op]["swept"] for op in self.ops)
            truncated |= swept < total
            self.rates.append(elapsed / max(1, swept) / (matrix.nnz + COST_OFFSET_NNZ))
            self.pack()
            logger.info("sweep %s (%d nnz): %d of %d configs in %.1f s", entry.name, matrix.nnz, swept, total,
                        elapsed)
        return rows, truncated

    def measure_op(self, op: str, name: str, matrix, configs: list, recipe: dict) -> dict:
        """Every config of `op` in chunks, stopping at the deadline; NaN for failed and unswept ones."""
        results = []
        for start in range(0, len(configs), SWEEP_CHUNK):
            if time.perf_counter() > self.deadline:
                logger.warning("budget: %s %s stopped after %d of %d configs", name, op, len(results), len(configs))
                break
            results += self.backend.measure(op, matrix, configs[start:start + SWEEP_CHUNK], self.feat, seed=self.seed)
        times = np.full(len(configs), np.nan)
        times[:len(results)] = [r.time_ms if r.ok else np.nan for r in results]
        if self.dataset is not None and results:
            save_results(self.dataset, self.backend, name, matrix, op, self.feat, results,
                         metadata=dict(self.metadata, matrix_recipe=recipe, swept=f"{len(results)}/{len(configs)}"))
        return {"configs": configs, "times_ms": times, "swept": len(results),
                "errors": sorted({r.error for r in results if r.error})[:5]}

    def pack(self) -> None:
        """Rewrite the dataset's .tar.gz (atomically: a kill leaves the previous one)."""
        if self.dataset is None or self.archive is None:
            return
        tmp = self.archive.with_name(self.archive.name + ".tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(self.dataset, arcname=self.dataset.name)
        tmp.replace(self.archive)


def _recipe(entry) -> dict:
    """The generator arguments that rebuild a corpus entry exactly."""
    return {"generator": "cognate_tvm.matrix.generate", "family": entry.family, "rows": int(entry.rows),
            "seed": int(entry.seed), "permute": bool(entry.permuted)}
