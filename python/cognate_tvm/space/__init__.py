"""Configuration spaces, one file per platform, and a `create` factory."""
from __future__ import annotations

import importlib

from ..errors import UnknownKindError
from .base import LOOPS, Config, SharedCoords, Space, diverse_top

# platform name -> "module:Class", imported on first use.
_SPACES = {
    "cpu": "cognate_tvm.space.cpu:CPUSpace",
    "spade": "cognate_tvm.space.spade:SpadeSpace",
    "gpu": "cognate_tvm.space.gpu:GPUSpace",
}


PLATFORMS = tuple(_SPACES)


def create(platform: str | Space, op: str = "spmm") -> Space:
    """The space of `platform` ("cpu", "spade", "gpu") for `op`; a Space passes through."""
    if isinstance(platform, Space):
        return platform
    if platform not in _SPACES:
        raise UnknownKindError("platform", platform, list(_SPACES))
    module, cls = _SPACES[platform].split(":")
    return getattr(importlib.import_module(module), cls)(op)


__all__ = ["LOOPS", "PLATFORMS", "Config", "SharedCoords", "Space", "create", "diverse_top"]
