"""Choosing a config per (pattern, op, dense width) once, and keeping its kernel ready.

`TunedKernels` is what a :class:`~cognate_tvm.torch.SparseMatrix` asks for a
kernel. The first time a (pattern, op, dense width) is needed on a device, it
looks for a stored choice (:mod:`cognate_tvm.torch.cache`); without one it runs
:func:`cognate_tvm.tuning.tune` with the shipped model and tune's defaults
(baseline + the model's top-k, finalists re-timed, the winner's output checked)
and stores the choice. Then it builds (or loads) the config's kernel and keeps
its runner in memory, so later calls prepare nothing.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from ..data import matrix_hash
from ..errors import CognateError
from .cache import Choice, ChoiceKey, ChoiceStore, cache_root
from .runners import Platform, Runner, create_platform

log = logging.getLogger(__name__)



class Pattern:
    """A CSR sparsity pattern (values are not part of it), its hash, and its transpose."""

    def __init__(self, matrix: sp.csr_matrix):
        self.csr = sp.csr_matrix((np.ones(matrix.nnz, dtype=np.float32), matrix.indices, matrix.indptr),
                                 shape=matrix.shape)
        self._digest: str | None = None
        self._transpose: tuple[Pattern, np.ndarray] | None = None
        self._row_ids: dict[torch.device, torch.Tensor] = {}
        self._orders: dict[torch.device, torch.Tensor] = {}
        self._csr: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.csr.shape)

    @property
    def nnz(self) -> int:
        return int(self.csr.nnz)

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = matrix_hash(self.csr)
        return self._digest

    def transpose(self) -> tuple["Pattern", np.ndarray]:
        """(pattern of Aᵀ, perm): Aᵀ's values in its CSR order are A's values[perm]."""
        if self._transpose is None:
            position = sp.csr_matrix((np.arange(self.nnz, dtype=np.int64), self.csr.indices, self.csr.indptr),
                                     shape=self.shape)
            transposed = position.T.tocsr()
            transposed.sort_indices()
            self._transpose = (Pattern(transposed), np.asarray(transposed.data, dtype=np.int64))
        return self._transpose

    def transpose_order(self, device: torch.device) -> torch.Tensor:
        """The transpose's perm as an int64 tensor on `device`."""
        if device not in self._orders:
            self._orders[device] = torch.from_numpy(self.transpose()[1]).to(device)
        return self._orders[device]

    def csr_tensors(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(indptr, indices) as int32 tensors on `device`."""
        if device not in self._csr:
            self._csr[device] = tuple(torch.from_numpy(a.astype(np.int32)).to(device)
                                      for a in (self.csr.indptr, self.csr.indices))
        return self._csr[device]

    def row_ids(self, device: torch.device) -> torch.Tensor:
        """int64 [nnz]: the row of each nonzero, on `device`."""
        if device not in self._row_ids:
            rows = np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.csr.indptr))
            self._row_ids[device] = torch.from_numpy(rows).to(device)
        return self._row_ids[device]


class TuningFailedError(CognateError, RuntimeError):
    """Tuning found no config that ran correctly on a matrix."""


class TunedKernels:
    """The tuned kernels of one device, shared by every matrix on it.

    Parameters
    ----------
    device
        "cpu" or a CUDA device.
    num_threads
        CPU only: cores the kernels run on (default: torch's thread count).
    arch
        CUDA only: "sm_80" or "sm_90" (default: from the GPU).
    cache_dir
        Root of the tuned choices and compiled kernels (default: $COGNATE_TVM_CACHE_DIR, else
        ~/.cache/cognate_tvm; see :mod:`cognate_tvm.torch.cache`).
    tune
        False: no measuring at all, every kernel is the space's baseline config.
    dtype
        CPU only: element type the kernels read the dense operands in, "float32" (default) or
        "bfloat16" (the float32 tensors are rounded on each call; products accumulate and results
        are returned in float32, gradients included).
    tune_options
        Fields of :class:`cognate_tvm.tuning.TuneOptions` (e.g. ``top_k``, ``budget``).
    """

    def __init__(self, device: str | torch.device = "cpu", *, num_threads: int | None = None,
                 arch: str | None = None, cache_dir: str | os.PathLike | None = None, tune: bool = True,
                 tune_options: dict | None = None, dtype: str = "float32"):
        self.root = cache_root(cache_dir)
        self.dtype = dtype
        self.platform: Platform = create_platform(torch.device(device), num_threads=num_threads, arch=arch,
                                                  kernel_dir=Path(self.root) / "kernels", dtype=dtype)
        self.device = self.platform.device
        self.tune_enabled = bool(tune)
        self.tune_options = dict(tune_options or {})
        self.store = ChoiceStore(self.root)
        self.history: list[dict] = []  # one entry per (pattern, op, feat) made ready
        self._runners: dict[tuple[str, str, int], Runner] = {}

    def __deepcopy__(self, memo):
        # A device's kernels are shared like the device itself: a deep copy of a model that holds
        # them (copy.deepcopy of an nn.Module) uses the same ones; compiled modules cannot be copied.
        return self

    def key(self, op: str, pattern: Pattern, feat: int) -> ChoiceKey:
        return ChoiceKey(pattern.digest, op, int(feat), self.platform.target_name(), self.dtype)

    def runner(self, op: str, pattern: Pattern, feat: int) -> Runner:
        """The ready kernel of (`op`, `pattern`, `feat`): chosen and built on first use."""
        slot = (pattern.digest, op, int(feat))
        runner = self._runners.get(slot)
        if runner is None:
            choice = self.choose(op, pattern, feat)
            start = time.perf_counter()
            runner = self.platform.runner(op, pattern.csr, choice.config, feat)
            self.history.append({"op": op, "feat": int(feat), "shape": list(pattern.shape), "nnz": pattern.nnz,
                                 "source": choice.source, "tuning_s": choice.tuning_s,
                                 "measured": choice.measured, "prepare_s": time.perf_counter() - start,
                                 "config": choice.config.to_dict()})
            self._runners[slot] = runner
        return runner

    def choose(self, op: str, pattern: Pattern, feat: int) -> Choice:
        """The stored choice, else a fresh one from `tune` (stored), else the baseline when tuning is off."""
        space = self.platform.space(op)
        if not self.tune_enabled:
            return Choice(space.baseline(), 0.0, 0, None, None, "baseline")
        key = self.key(op, pattern, feat)
        stored = self.store.load(key, space)
        if stored is not None:
            return stored
        choice = self._tune(op, pattern, feat)
        self.store.save(key, choice)
        return choice

    def _tune(self, op: str, pattern: Pattern, feat: int) -> Choice:
        from .. import tuning

        log.info("tuning %s on a %dx%d pattern (%d nonzeros), dense width %d, for %s", op, *pattern.shape,
                 pattern.nnz, feat, self.platform.target_name())
        start = time.perf_counter()
        # A kernel is first asked for inside an autograd Function's forward, where grad mode is off;
        # tune's search fine-tunes the cost model with autograd.
        with torch.enable_grad():
            tuned = tuning.tune(op, pattern.csr, backend=self.platform.backend, feat=int(feat),
                                options=tuning.TuneOptions(**self.tune_options))
        elapsed = time.perf_counter() - start
        if tuned.chosen is None:
            raise TuningFailedError(f"no {op} config ran correctly on the {pattern.shape[0]}x{pattern.shape[1]} "
                                    f"pattern {pattern.digest[:12]} (dense width {feat}): {tuned.notes}")
        for note in tuned.notes:
            log.info("tune: %s", note)
        return Choice(tuned.chosen.config, elapsed, len(tuned.measured), tuning.chosen_time_ms(tuned),
                      tuned.baseline.time_ms, "tuned")

    def tuning_seconds(self) -> float:
        """Seconds spent tuning by this object (choices read from disk cost none)."""
        return float(sum(h["tuning_s"] for h in self.history if h["source"] == "tuned"))
