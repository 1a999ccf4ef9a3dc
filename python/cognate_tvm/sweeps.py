"""Full sweeps: every config of a space timed on each matrix, as a dataset.

Running one (`Sweep`). `collect` measures seeded samples of configs and resumes a killed run; a
sweep measures *every* config of each op on each matrix, once, within a time budget (the
GPU check, `benchmarks/gpu_check.py`): it looks at the clock between chunks of configs, skips a
matrix predicted not to fit in the time left (and tries the next, maybe smaller, one), keeps the
configs of a matrix it had to cut short, and writes each matrix's timings to a dataset
(`cognate_tvm.data`, the format of the CPU datasets) as soon as they are measured, with a .tar.gz
of it rewritten after each matrix, so a run killed at any point leaves what it measured. Matrices
are named generator recipes (`named_matrices`), whose arguments go into the dataset's ``backend``
column.

Importing one recorded elsewhere (`sweep_frames`). A GPU host that ran ``benchmarks/gpu_check.py``
leaves a sweep JSON::

    {"args": {"matrices", "seed", "min_rows", "max_rows", "feat"},
     "rows": [{"name", "family", "shape", "nnz",
               "spmm": {"configs": [config dicts], "times_ms": [float | null]},
               "sddmm": {...}}]}

The matrices are `cognate_tvm.matrix.generate_corpus` entries of the arguments in
``args``, so `sweep_frames` rebuilds each one (checking its shape and nonzeros
against the JSON) to hash its pattern, and writes the timings in the columns of
`cognate_tvm.data.COLUMNS`: one Parquet part per (matrix, op), the dataset format
every trainer reads. A config without a time (null) is a failed row with an error,
as a collection records one. The ``backend`` column says where and how the times
were taken (device, versions, timing method, the generator arguments); the caller
supplies what the JSON does not hold.
"""
from __future__ import annotations

import json
import logging
import os
import tarfile
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .data import COLUMNS, matrix_hash, save_results
from .data.store import _check_meta, _part_name, _write_part
from .errors import CognateError, ShapeError
from .matrix.generators import CorpusEntry, generate_corpus
from .space import create as create_space

logger = logging.getLogger(__name__)

COST_OFFSET_NNZ = 200_000  # a config's fixed cost (launch, Python), in nonzeros' worth of work
SWEEP_CHUNK = 256          # configs timed between two looks at the clock
NO_TIME = "no time recorded in the sweep"
GENERATOR_KEYS = ("matrices", "seed", "min_rows", "max_rows")
RECIPE_GENERATOR = "cognate_tvm.matrix.generate"  # a matrix_recipe rebuilt by `generate(family, rows, seed)`


class MatrixSpecError(CognateError, ValueError):
    """A matrix list that is not ``family:rows:seed[:perm],...``."""


# -- running a sweep -------------------------------------------------------------------------------
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
        spaces = {op: create_space(self.backend.platform, op).configs() for op in self.ops}
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
    return {"generator": RECIPE_GENERATOR, "family": entry.family, "rows": int(entry.rows),
            "seed": int(entry.seed), "permute": bool(entry.permuted)}


# -- importing a sweep recorded elsewhere ---------------------------------------------------------
def corpus_of(args: Mapping) -> dict:
    """{name: CorpusEntry} of the generator arguments of a sweep (``generate_corpus(n, seed, min_rows, max_rows)``)."""
    missing = [key for key in GENERATOR_KEYS if key not in args]
    if missing:
        raise ValueError(f"sweep args lack the generator arguments {missing}: {dict(args)!r}")
    entries = generate_corpus(int(args["matrices"]), seed=int(args["seed"]), min_rows=int(args["min_rows"]),
                              max_rows=int(args["max_rows"]))
    return {entry.name: entry for entry in entries}


def _op_frame(row: dict, op: str, matrix, *, platform: str, target: str, feat: int, backend: str,
              timestamp: str) -> pd.DataFrame:
    """The rows of one matrix and op: configs parsed (and checked) by the platform's space."""
    sweep = row[op]
    configs, times = sweep["configs"], sweep["times_ms"]
    if len(configs) != len(times):
        raise ShapeError(f"{row['name']} {op}: {len(configs)} configs but {len(times)} times")
    space = create_space(platform, op)
    ok = [t is not None and np.isfinite(float(t)) for t in times]
    frame = pd.DataFrame({
        "matrix": row["name"], "matrix_hash": matrix_hash(matrix), "rows": int(matrix.shape[0]),
        "cols": int(matrix.shape[1]), "nnz": int(matrix.nnz), "op": op, "platform": platform, "target": target,
        "feat": int(feat), "config": [space.config_from_dict(c).to_json() for c in configs],
        "time_ms": [float(t) if good else np.nan for t, good in zip(times, ok)],
        "error": [None if good else NO_TIME for good in ok], "correct": None,
        "extra": json.dumps({"family": row.get("family")}), "backend": backend, "timestamp": timestamp,
    }, columns=list(COLUMNS))
    frame["error"] = frame["error"].astype(object)
    frame["correct"] = frame["correct"].astype(object)
    return frame


def sweep_frames(sweep: Mapping, *, platform: str, target: str, metadata: Mapping, timestamp: str,
                 ops: Sequence[str] = ("spmm", "sddmm")) -> dict[tuple[str, str], pd.DataFrame]:
    """{(matrix, op): frame of `COLUMNS`} of a sweep JSON (see the module docstring).

    `metadata` is stored (with the sweep's generator arguments and dense width) in
    every row's ``backend`` column; `timestamp` (ISO 8601) is when it was measured.
    ShapeError when a rebuilt matrix differs from the shape or nonzeros the sweep recorded.
    """
    args = sweep["args"]
    corpus = corpus_of(args)
    feat = int(args["feat"])
    generator = {"function": "cognate_tvm.matrix.generate_corpus",
                 "count": int(args["matrices"]), "seed": int(args["seed"]),
                 "min_rows": int(args["min_rows"]), "max_rows": int(args["max_rows"])}
    backend = json.dumps({**metadata, "platform": platform, "target": target, "feat": feat,
                          "generator": generator}, sort_keys=True, default=str)
    frames = {}
    for row in sweep["rows"]:
        if row["name"] not in corpus:
            raise KeyError(f"matrix {row['name']!r} is not in generate_corpus({generator})")
        matrix = corpus[row["name"]].build()
        if list(matrix.shape) != list(row["shape"]) or int(matrix.nnz) != int(row["nnz"]):
            raise ShapeError(f"{row['name']}: rebuilt {matrix.shape} with {matrix.nnz} nonzeros, the sweep "
                             f"recorded {tuple(row['shape'])} with {row['nnz']}")
        for op in ops:
            if op in row:
                frames[(row["name"], op)] = _op_frame(row, op, matrix, platform=platform, target=target, feat=feat,
                                                      backend=backend, timestamp=timestamp)
        logger.info("sweep: %s rebuilt (%d nonzeros)", row["name"], matrix.nnz)
    return frames


def write_sweep(frames: Mapping[tuple[str, str], pd.DataFrame], out: Mapping[str, str | os.PathLike], *,
                platform: str) -> dict[str, int]:
    """Write each (matrix, op) frame as a part of the dataset ``out[op]``; {op: rows written}."""
    written: dict[str, int] = {}
    for (name, op), frame in frames.items():
        if op not in out:
            continue
        path = Path(out[op])
        _check_meta(path, create=True)
        feat = int(frame["feat"].iloc[0])
        _write_part(path / _part_name(name, op, feat, platform), frame)
        written[op] = written.get(op, 0) + len(frame)
    return written


def frame_corpus(frame: pd.DataFrame) -> dict:
    """{name: CorpusEntry} that rebuilds every matrix of a sweep dataset, from what its ``backend`` column
    records: the corpus generator's arguments (an imported sweep, `sweep_frames`) or the matrix's own
    recipe (a sweep run by `Sweep`: ``matrix_recipe``, the arguments of `generate`)."""
    corpus = {}
    for name, text in frame[["matrix", "backend"]].drop_duplicates().itertuples(index=False):
        backend = json.loads(text)
        if "generator" in backend:
            generator = backend["generator"]
            corpus.update(corpus_of({"matrices": generator["count"], **generator}))
        elif backend.get("matrix_recipe", {}).get("generator") == RECIPE_GENERATOR:
            recipe = backend["matrix_recipe"]
            corpus[name] = CorpusEntry(name, recipe["family"], int(recipe["rows"]), int(recipe["seed"]),
                                       bool(recipe.get("permute", False)))
        else:
            raise ValueError(f"a dataset row's backend metadata holds no generator arguments: {text[:200]}")
    return corpus


def load_sweep_groups(path: str | os.PathLike, *, op: str, platform: str = "gpu") -> list:
    """The groups (`cognate_tvm.data.Group`, failed configs dropped) of an imported sweep dataset, each
    matrix rebuilt from its generator arguments."""
    from .data import groups_from_frame, load_frame

    frame = load_frame(path)
    frame = frame[(frame["op"] == op) & (frame["platform"] == platform)]
    if frame.empty:
        raise ValueError(f"{path}: no {op} rows of platform {platform!r}")
    return groups_from_frame(frame, space=create_space(platform, op), matrices=frame_corpus(frame), op=op)
