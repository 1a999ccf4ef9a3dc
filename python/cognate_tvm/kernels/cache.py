"""A two-level cache of compiled TVM kernels: in memory, and as shared libraries on disk.

A kernel is identified by everything its code depends on (for the sparse
kernels: op, config, dense width, target and TVM version — never the matrix),
hashed into a key. The first `get` of a key builds the kernel and exports it
with `export_library` into the cache directory; a later process loads the
library instead of compiling again.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "cognate_tvm" / "kernels"


def kernel_key(fields: dict) -> str:
    """Stable hex key of a JSON-serialisable description of a kernel."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class KernelCache:
    """Builds each kernel once; keeps the loaded modules in memory and the libraries on disk.

    Parameters
    ----------
    directory
        Where exported libraries live (created on first write); None keeps the
        cache in memory only.
    """

    def __init__(self, directory: str | os.PathLike | None = DEFAULT_CACHE_DIR):
        self.directory = None if directory is None else Path(directory)
        self._modules: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.hits = {"memory": 0, "disk": 0, "built": 0}

    def path(self, key: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{key}.so"

    def get(self, key: str, build: Callable[[], Any]) -> Any:
        """The module of `key`: from memory, else loaded from disk, else `build()` and exported."""
        with self._lock:
            module = self._modules.get(key)
            if module is not None:
                self.hits["memory"] += 1
                return module
        path = self.path(key)
        module = None
        if path is not None and path.is_file():
            module = self._load(path)
            if module is not None:
                self.hits["disk"] += 1
        if module is None:
            module = build()
            self.hits["built"] += 1
            if path is not None:
                self._export(module, path)
        with self._lock:
            self._modules[key] = module
        return module

    def clear_memory(self) -> None:
        """Forget the loaded modules (the disk cache stays)."""
        with self._lock:
            self._modules.clear()

    @staticmethod
    def _load(path: Path):
        import tvm

        try:
            return tvm.runtime.load_module(str(path))
        except Exception as exc:  # a truncated or foreign file: rebuild it
            log.warning("ignoring unreadable cached kernel %s: %s", path, exc)
            return None

    @staticmethod
    def _export(module, path: Path) -> None:
        """Write atomically, so a concurrent reader never sees half a library."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
        os.close(fd)
        try:
            module.export_library(tmp)
            os.replace(tmp, path)
        except Exception as exc:
            log.warning("could not cache kernel at %s: %s", path, exc)
            if os.path.exists(tmp):
                os.unlink(tmp)
