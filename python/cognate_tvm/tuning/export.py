"""Writing kernels out: the chosen one with its config and report (``--out``), and CUDA's compile-only
ranking (the model's top-k kernels' sources and PTX, for a target that cannot run here)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import scipy.sparse as sp

from .. import space
from ..backends.base import Backend
from ..model.loading import load_shipped_model
from ..ops import Op, get_op
from .options import DEFAULT_TOP_K
from .result import TuneResult


def write_kernel(backend: Backend, op: Op | str, config: space.Config, feat: int, directory: str | os.PathLike,
                 *, stem: str = "kernel") -> dict:
    """Write `config`'s kernel for `backend` under `directory` (`Backend.export_kernel`); returns what was
    written (file names). A target without kernels (a simulator) writes nothing and says so.
    """
    op = get_op(op)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return backend.export_kernel(op, config, feat, directory, stem)


def write_outputs(directory: str | os.PathLike, backend: Backend, op: Op | str, tuned: TuneResult, feat: int,
                  report: dict) -> dict:
    """--out: the chosen kernel, ``config.json`` (the config and how to call the kernel), ``report.json``."""
    op = get_op(op)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files: dict = {"report": "report.json"}
    if tuned.chosen is not None:
        kernel = write_kernel(backend, op, tuned.chosen.config, feat, directory)
        config = {"op": op.name, "target": backend.target, "platform": backend.platform, "feat": feat,
                  "config": tuned.chosen.config.to_dict(), "kernel": kernel}
        (directory / "config.json").write_text(json.dumps(config, indent=1))
        files.update({"config": "config.json", "kernel": kernel})
    report["out"] = {"directory": str(directory), "files": files}
    (directory / "report.json").write_text(json.dumps(report, indent=1))
    return files


def compile_top_k(op: Op | str, matrix: sp.csr_matrix, *, backend: Backend, feat: int, directory,
                  model=None, model_source: str | None = None, pretrained_root=None,
                  top_k: int = DEFAULT_TOP_K) -> dict:
    """Rank with the model and write the top-k kernels (sources, PTX) under `directory`, without timing.

    For a target that cannot run here (CUDA without a GPU). Returns the report
    (also written as ``report.json``).
    """
    op = get_op(op)
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    platform_space = space.create(backend.platform, op.name)
    notes: list[str] = []
    if model is None:
        model, model_source, notes = load_shipped_model(op, backend.platform, root=pretrained_root,
                                                        threads=backend.kernel_threads(),
                                                        hardware=backend.metadata())
    ranked = model.rank(matrix, platform_space.candidates(backend.kernel_threads()), space=platform_space,
                        feat=feat)[:top_k]
    directory = Path(directory)
    kernels = []
    for n, config in enumerate(ranked, start=1):
        try:
            written = write_kernel(backend, op, config, feat, directory, stem=f"top{n}")
            error = written.get("ptx_error")
        except Exception as exc:  # a config that fails to build is a result, not an abort
            written, error = {}, f"{type(exc).__name__}: {exc}"
        kernels.append({"predicted_rank": n, "config": config.to_dict(), "files": written, "error": error})
    report = {"op": op.name, "target": backend.target, "feat": feat, "model": model_source,
              "compile_only": True, "top_k": top_k, "kernels": kernels, "notes": notes,
              "out": {"directory": str(directory)}}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(report, indent=1))
    return report
