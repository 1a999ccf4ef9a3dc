"""Full sweeps recorded elsewhere (every config of a space timed on each matrix) as a dataset.

A GPU host that ran ``benchmarks/gpu_check.py`` leaves a sweep JSON::

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
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .data import COLUMNS, _check_meta, _part_name, _write_part, matrix_hash
from .errors import ShapeError
from .matrix.generators import CorpusEntry, generate_corpus
from .space import create as create_space

logger = logging.getLogger(__name__)

NO_TIME = "no time recorded in the sweep"
GENERATOR_KEYS = ("matrices", "seed", "min_rows", "max_rows")
RECIPE_GENERATOR = "cognate_tvm.matrix.generate"  # a matrix_recipe rebuilt by `generate(family, rows, seed)`


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
    recipe (a sweep written by `cognate_tvm.sweep`: ``matrix_recipe``, the arguments of `generate`)."""
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
