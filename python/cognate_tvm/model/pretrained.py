"""The cost models shipped as package data: `load_pretrained(op, platform)`.

Each shipped model is a directory ``pretrained/<op>-<platform>/`` inside the
package, written by `CognateCostModel.save` (weights, hyperparameters, format
version) plus a ``MODEL_CARD.md`` (data, split, metrics, the command that
rebuilds it). The CPU models are pre-trained on CPU measurements
(``benchmarks/pretrain.py``); target models are fine-tuned from them.

A model of kernels that run on T > 1 threads ships as ``<op>-<platform>-<T>t``
(`threaded_platform`): the knobs that spread work over cores (`parallel`,
`chunk` on the CPU) and the memory bandwidth they share change which config
wins, so single-thread timings cannot teach them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from ..errors import PretrainedNotFoundError
from ..ops import get_op
from .cognate import META_FILE, CognateCostModel

PRETRAINED_DIR = Path(__file__).resolve().parent.parent / "pretrained"
CARD_FILE = "MODEL_CARD.md"
# What a shipped target model's timings came from, as `Backend.metadata()` names it (e.g. {"target": "cuda",
# "arch": "sm_90", "device": "NVIDIA H200"}): `hardware_notes` compares it with the backend a user tunes for.
TRAINED_ON_FILE = "trained_on.json"


def pretrained_path(op: str, platform: str, *, root: str | os.PathLike | None = None) -> Path:
    """Directory of the shipped model of (`op`, `platform`) (it may not exist)."""
    return Path(root or PRETRAINED_DIR) / f"{get_op(op).name}-{platform}"


def threaded_platform(platform: str, threads: int | None) -> str:
    """The shipped-model platform name of `platform` with kernels on `threads` threads
    (`platform` itself for one thread or no thread setting, else ``<platform>-<T>t``)."""
    return platform if threads is None or int(threads) <= 1 else f"{platform}-{int(threads)}t"


def thread_variants(platform: str, threads: int | None, *,
                    root: str | os.PathLike | None = None) -> list[tuple[str, int]]:
    """(platform name, threads) of the shipped models of `platform`'s thread variants, the closest
    to `threads` first (ties: the fewer threads), the single-thread one last unless it is asked for."""
    counts = {1}
    for _, name in available_pretrained(root=root):
        head, _, tail = name.rpartition("-")
        if head == platform and tail.endswith("t") and tail[:-1].isdigit():
            counts.add(int(tail[:-1]))
    wanted = 1 if threads is None else max(1, int(threads))
    order = sorted(counts, key=lambda t: (wanted > 1 and t == 1, abs(t - wanted), t))
    return [(threaded_platform(platform, t), t) for t in order]


def write_trained_on(path: str | os.PathLike, hardware: dict) -> Path:
    """Record, beside a saved model in `path`, the hardware its timings came from (`TRAINED_ON_FILE`)."""
    out = Path(path) / TRAINED_ON_FILE
    out.write_text(json.dumps(hardware, indent=1, sort_keys=True))
    return out


def hardware_notes(path: str | os.PathLike, hardware: dict, *, op: str) -> list[str]:
    """Notes for each key of the model's `TRAINED_ON_FILE` that `hardware` (the backend's metadata)
    holds with another value: the model ranks configs for hardware it was not trained on."""
    recorded = Path(path) / TRAINED_ON_FILE
    if not recorded.is_file():
        return []
    trained = json.loads(recorded.read_text())
    where = trained.get("device", "other hardware")
    return [f"the shipped {op} model was trained on timings of {where} ({key} {trained[key]}); this backend's "
            f"{key} is {hardware[key]}: its ranking is untested on this hardware"
            for key in sorted(trained) if key in hardware and hardware[key] != trained[key]]


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


def model_card(*, title: str, facts: Sequence[str], table: str, command: str, table_heading: str | None = None,
               rebuild_note: str = "", after: str | None = None) -> str:
    """The ``MODEL_CARD.md`` text of a shipped model: every card has this shape.

    ``# title``, the `facts` as a bullet list (a fact may continue on lines indented by two spaces),
    the metrics `table` (under ``## table_heading`` when given), ``Rebuild: `command``` (then
    `rebuild_note`), and `after` (a further section), each separated by a blank line.
    """
    parts = [f"# {title}", "\n".join(f"- {fact}" for fact in facts)]
    if table_heading is not None:
        parts.append(f"## {table_heading}")
    parts += [table, f"Rebuild: `{command}`{rebuild_note}"]
    text = "\n\n".join(parts)
    return text + ("\n" if after is None else "\n\n" + after)
