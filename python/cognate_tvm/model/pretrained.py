"""The cost models shipped as package data: `load_pretrained(op, platform)`.

Each shipped model is a directory ``pretrained/<op>-<platform>/`` inside the
package, written by `CognateCostModel.save` (weights, hyperparameters, format
version) plus a ``MODEL_CARD.md`` (data, split, metrics, the command that
rebuilds it). The CPU models are pre-trained on CPU measurements
(``benchmarks/pretrain.py``); target models are fine-tuned from them.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import PretrainedNotFoundError
from ..ops import get_op
from .cognate import META_FILE, CognateCostModel

PRETRAINED_DIR = Path(__file__).resolve().parent.parent / "pretrained"
CARD_FILE = "MODEL_CARD.md"


def pretrained_path(op: str, platform: str, *, root: str | os.PathLike | None = None) -> Path:
    """Directory of the shipped model of (`op`, `platform`) (it may not exist)."""
    return Path(root or PRETRAINED_DIR) / f"{get_op(op).name}-{platform}"


def available_pretrained(*, root: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """(op, platform) pairs that ship, sorted."""
    base = Path(root or PRETRAINED_DIR)
    if not base.is_dir():
        return []
    pairs = [tuple(d.name.split("-", 1)) for d in base.iterdir() if (d / META_FILE).is_file() and "-" in d.name]
    return sorted(pairs)


def load_pretrained(op: str, platform: str, *, root: str | os.PathLike | None = None,
                    num_threads: int | None = None) -> CognateCostModel:
    """The shipped model of `op` on `platform` ("cpu", "spade", ...).

    Raises PretrainedNotFoundError naming the pairs that do ship, and
    ModelVersionError for a model saved by another format version.
    """
    path = pretrained_path(op, platform, root=root)
    if not (path / META_FILE).is_file():
        shipped = ", ".join(f"{o}/{p}" for o, p in available_pretrained(root=root)) or "none"
        raise PretrainedNotFoundError(f"no shipped model for op {get_op(op).name!r} on platform {platform!r} "
                                      f"(looked in {path}); shipped: {shipped}")
    return CognateCostModel.load(path, num_threads=num_threads)
