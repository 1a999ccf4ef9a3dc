"""Where tuned choices and compiled kernels live on disk, and the store of tuned choices.

A choice is the config `tune` picked for one (sparsity pattern, op, dense width,
target, dtype). It is written as a small JSON file named by a hash of those
fields, next to how long tuning took, so a second run of a program finds it and
measures nothing; the compiled kernels go to the kernel cache
(:class:`cognate_tvm.kernels.cache.KernelCache`) under the same root.

The root is, in order: the ``cache_dir`` argument, the ``COGNATE_TVM_CACHE_DIR``
environment variable, ``~/.cache/cognate_tvm``.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..kernels.cache import kernel_key
from ..space.base import Space

log = logging.getLogger(__name__)

CACHE_ENV = "COGNATE_TVM_CACHE_DIR"
CHOICE_FORMAT = 1


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache root: `cache_dir`, else $COGNATE_TVM_CACHE_DIR, else ~/.cache/cognate_tvm."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "cognate_tvm"


@dataclass(frozen=True)
class ChoiceKey:
    """What a tuned choice depends on."""

    pattern: str   # cognate_tvm.data.matrix_hash of the sparsity pattern
    op: str
    feat: int
    target: str    # the TVM target string (CPU: includes core count and mcpu; CUDA: arch)
    dtype: str

    def fields(self) -> dict:
        return {"pattern": self.pattern, "op": self.op, "feat": self.feat, "target": self.target,
                "dtype": self.dtype, "format": CHOICE_FORMAT}

    def digest(self) -> str:
        return kernel_key(self.fields())


@dataclass(frozen=True)
class Choice:
    """A tuned config and what tuning it cost."""

    config: object
    tuning_s: float
    measured: int             # target measurements tuning made (when it ran, if read from the store)
    chosen_ms: float | None   # the chosen config's time as tuning measured it
    baseline_ms: float | None
    source: str               # "tuned", "cache" or "baseline" (tuning switched off)


class ChoiceStore:
    """Tuned choices as JSON files under ``<root>/choices``; None keeps them in memory only."""

    def __init__(self, root: Path | None):
        self.directory = None if root is None else Path(root) / "choices"
        self._memory: dict[str, dict] = {}

    def path(self, key: ChoiceKey) -> Path | None:
        return None if self.directory is None else self.directory / f"{key.digest()}.json"

    def load(self, key: ChoiceKey, space: Space) -> Choice | None:
        """The stored choice of `key` (source "cache"), or None when there is none or it is unreadable."""
        record = self._memory.get(key.digest())
        path = self.path(key)
        if record is None and path is not None and path.is_file():
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                log.warning("ignoring unreadable tuned choice %s: %s", path, exc)
                return None
        if record is None or record.get("key") != key.fields():
            return None
        try:
            config = space.config_from_dict(record["config"])
            space.check(config)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("ignoring stored choice %s: %s", path, exc)
            return None
        return Choice(config, float(record["tuning_s"]), int(record.get("measured", 0)), record.get("chosen_ms"),
                      record.get("baseline_ms"), "cache")

    def save(self, key: ChoiceKey, choice: Choice) -> None:
        """Keep `choice` in memory and write it atomically (a reader never sees half a file)."""
        record = {"key": key.fields(), "config": choice.config.to_dict(), "tuning_s": choice.tuning_s,
                  "measured": choice.measured, "chosen_ms": choice.chosen_ms, "baseline_ms": choice.baseline_ms}
        self._memory[key.digest()] = record
        path = self.path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".json", dir=path.parent)
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle, indent=1)
        os.replace(tmp, path)
