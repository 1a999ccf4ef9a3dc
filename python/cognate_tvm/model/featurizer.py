"""Matrix embedding: a multi-scale sparse convolution over the nonzero pattern (WACO-style).

Pipeline for one matrix:

1. `pattern_of`: the (row, col) coordinates of the nonzeros. A pattern with
   more than `max_points` points is binned: coordinates are halved (2x2 cells
   merged) as often as needed for at most `max_points` distinct cells to
   remain (the level is found with occupancy bitmaps, cheaply); each point carries
   the number of nonzeros it holds, so memory stays bounded whatever the
   matrix's size. The input feature of a point is log2(1 + count) (1.0 when
   nothing was merged).
2. A submanifold 3x3 convolution stem, then stages of (stride-2 2x2
   convolution, submanifold 3x3 convolution), ReLU after each; the features are
   averaged over the points at every scale (global average pooling).
3. The pooled vectors, concatenated with an MLP over (log2 rows, log2 cols,
   log2 nnz, binning level) and, with `FeaturizerConfig.locality`, the matrix's
   `locality_profile`, are projected to `out_dim` (128) dimensions.

Two interchangeable convolution backends compute the same numbers:

- ``"torch"`` (pure PyTorch, always available): points hashed to int64 keys
  ``(row << 32) | col`` kept sorted; the neighbour pairs of every kernel offset
  are found with `torch.searchsorted`; each offset is one gather
  (`index_select`), one matmul and one in-place scatter (`index_add_`); the
  stride-2 coordinates are `unique(coords // 2)`.
- ``"torchsparse"`` (MIT HAN lab's library; ``"auto"`` uses it when it is
  importable and the featurizer's weights are on a CUDA device, since its
  strided convolutions are GPU-only):
  written against torchsparse 2.1 (coordinates ``[batch, x, y, z]`` with x =
  row, y = col, z = 0; kernels (3, 3, 1) and (2, 2, 1)); the same weight
  tensors are reordered into its kernel-offset order. It could not be run
  here (not installable on this CPU-only machine); its test skips.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import logging
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from ..errors import UnknownKindError
from ..matrix.stats import LOCALITY_WIDTH, locality_profile
from .config import FeaturizerConfig

logger = logging.getLogger(__name__)

SHIFT = 32  # key = (row << SHIFT) | col
SUB_OFFSETS = tuple(itertools.product((-1, 0, 1), repeat=2))  # (dr, dc), dr outer: weight[(dr+1)*3+dc+1]
DOWN_OFFSETS = tuple(itertools.product((0, 1), repeat=2))     # child = 2*parent + (dr, dc)
N_STATS = 4
BITMAP_CELLS = 1 << 23  # binning: levels whose grid has at most this many cells are counted with a bitmap


@dataclass(frozen=True)
class SparsePattern:
    """The (possibly binned) nonzero pattern: the featurizer's input, independent of its weights."""

    coords: torch.Tensor   # int64 [n, 2], distinct, sorted by key
    counts: torch.Tensor   # float32 [n], nonzeros merged into each point
    level: int             # 2x2 binnings applied (0 = exact coordinates)
    rows: int
    cols: int
    nnz: int
    locality: torch.Tensor | None = None  # float32 [LOCALITY_WIDTH], from the unbinned matrix, if asked for

    @property
    def points(self) -> int:
        return int(self.coords.shape[0])

    def stats(self, *, locality: bool = False) -> torch.Tensor:
        base = torch.tensor([np.log2(1 + self.rows), np.log2(1 + self.cols), np.log2(1 + self.nnz),
                              float(self.level)], dtype=torch.float32)
        if not locality:
            return base
        if self.locality is None:
            raise ValueError("this pattern was made without its locality profile (pattern_of(locality=True))")
        return torch.cat([base, self.locality])

    def features(self) -> torch.Tensor:
        return torch.log2(1.0 + self.counts).unsqueeze(1)


def _keys(coords: torch.Tensor) -> torch.Tensor:
    return (coords[:, 0] << SHIFT) | coords[:, 1]


def _coords(keys: torch.Tensor) -> torch.Tensor:
    return torch.stack([keys >> SHIFT, keys & ((1 << SHIFT) - 1)], dim=1)


def _grid(rows: int, cols: int, level: int) -> tuple[int, int]:
    step = 1 << level
    return -(-max(rows, 1) // step), -(-max(cols, 1) // step)


def _merge(keys: torch.Tensor, counts: torch.Tensor, shift: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bin points by `shift` levels (coordinates >> shift), summing their counts (sort-based)."""
    coords = _coords(keys) >> shift if shift else _coords(keys)
    merged, inverse = torch.unique(_keys(coords), sorted=True, return_inverse=True)
    return merged, torch.zeros(merged.shape[0]).index_add_(0, inverse, counts)


def pattern_of(matrix: sp.csr_matrix, *, max_points: int, locality: bool = False) -> SparsePattern:
    """The nonzero pattern of `matrix`, binned 2x2 at a time until it has <= `max_points` points.

    The level chosen is the smallest that fits (the point count only falls as the
    level grows). A level-L cell holds at most 4^L nonzeros, so no level below
    ceil(log4(nnz / max_points)) can fit; a level whose grid has at most
    `max_points` cells always fits. Levels in between are counted with an occupancy
    bitmap when their grid has at most `BITMAP_CELLS` cells (no sorting), else by
    sorting the cell keys. `locality` adds the matrix's `locality_profile`.
    """
    binned = _binned(matrix, max_points)
    if locality:
        binned = dataclasses.replace(binned, locality=torch.from_numpy(locality_profile(matrix)))
    return binned


def _binned(matrix: sp.csr_matrix, max_points: int) -> SparsePattern:
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points}")
    csr = sp.csr_matrix(matrix)
    if not csr.has_canonical_format:
        csr = csr.copy()
        csr.sum_duplicates()
    rows, cols = csr.shape
    nnz = int(csr.nnz)
    r = np.repeat(np.arange(rows, dtype=np.int64), np.diff(csr.indptr))
    c = csr.indices.astype(np.int64)

    def cells(level: int) -> int:
        grid_r, grid_c = _grid(rows, cols, level)
        return grid_r * grid_c

    def cell_ids(level: int) -> tuple[np.ndarray, int]:
        grid_c = _grid(rows, cols, level)[1]
        return (r >> level) * grid_c + (c >> level), grid_c

    def occupied(level: int) -> int:
        bitmap = np.zeros(cells(level), dtype=bool)
        bitmap[cell_ids(level)[0]] = True
        return int(np.count_nonzero(bitmap))

    def all_keys() -> torch.Tensor:
        return (torch.from_numpy(r) << SHIFT) | torch.from_numpy(c)

    if nnz <= max_points:  # canonical CSR order is key order, without duplicates
        return SparsePattern(coords=_coords(all_keys()), counts=torch.ones(nnz), level=0, rows=rows,
                             cols=cols, nnz=nnz)
    lowest = max(1, int(np.ceil(np.log(nnz / max_points) / np.log(4.0))))
    level = lowest
    while cells(level) > max_points:
        level += 1  # this level fits whatever the pattern
    while level > lowest and cells(level - 1) <= BITMAP_CELLS and occupied(level - 1) <= max_points:
        level -= 1
    if level > lowest and cells(level - 1) > BITMAP_CELLS:
        # finer levels too large for a bitmap: bin by sorting, from the lowest possible level up
        keys, counts = _merge(all_keys(), torch.ones(nnz), lowest)
        found = lowest
        while keys.shape[0] > max_points and found < level:
            keys, counts = _merge(keys, counts, 1)
            found += 1
        level = found
    elif cells(level) <= BITMAP_CELLS:
        ids, grid_c = cell_ids(level)
        per_cell = np.bincount(ids, minlength=cells(level))
        occupied_cells = np.flatnonzero(per_cell)  # row-major order = key order
        keys = (torch.from_numpy(occupied_cells // grid_c) << SHIFT) | torch.from_numpy(occupied_cells % grid_c)
        counts = torch.from_numpy(per_cell[occupied_cells].astype(np.float32))
    else:
        keys, counts = _merge(all_keys(), torch.ones(nnz), level)
    return SparsePattern(coords=_coords(keys), counts=counts, level=level, rows=rows, cols=cols, nnz=nnz)


# -- pure-PyTorch sparse convolution -------------------------------------------------------------
@dataclass
class _Pairs:
    """Per kernel offset: (output index, input index) pairs."""

    out_idx: list[torch.Tensor]
    in_idx: list[torch.Tensor]


def submanifold_pairs(keys: torch.Tensor) -> _Pairs:
    """Neighbour pairs of a 3x3 submanifold conv over sorted `keys`."""
    coords = _coords(keys)
    n = keys.shape[0]
    out_all = torch.arange(n)
    outs, ins = [], []
    for dr, dc in SUB_OFFSETS:
        if dr == 0 and dc == 0:
            outs.append(out_all), ins.append(out_all)
            continue
        r, c = coords[:, 0] + dr, coords[:, 1] + dc
        valid = (r >= 0) & (c >= 0)
        nkeys = (r.clamp(min=0) << SHIFT) | c.clamp(min=0)
        pos = torch.searchsorted(keys, nkeys).clamp(max=max(n - 1, 0))
        found = valid & (keys[pos] == nkeys) if n else valid
        outs.append(out_all[found]), ins.append(pos[found])
    return _Pairs(outs, ins)


def downsample(keys: torch.Tensor) -> tuple[torch.Tensor, _Pairs]:
    """Keys of the stride-2 grid and the (parent, child) pairs of each 2x2 offset."""
    coords = _coords(keys)
    parent_keys, inverse = torch.unique(_keys(coords >> 1), sorted=True, return_inverse=True)
    offset = (coords[:, 0] & 1) * 2 + (coords[:, 1] & 1)
    child = torch.arange(keys.shape[0])
    outs, ins = [], []
    for k in range(len(DOWN_OFFSETS)):
        mask = offset == k
        outs.append(inverse[mask]), ins.append(child[mask])
    return parent_keys, _Pairs(outs, ins)


class SparseConv(nn.Module):
    """Sparse convolution with weights [offsets, in, out]; pairs decide the geometry."""

    def __init__(self, in_channels: int, out_channels: int, offsets: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(offsets, in_channels, out_channels))
        self.bias = nn.Parameter(torch.zeros(out_channels))
        bound = 1.0 / np.sqrt(in_channels * offsets)
        nn.init.uniform_(self.weight, -bound * np.sqrt(3), bound * np.sqrt(3))

    def forward(self, x: torch.Tensor, pairs: _Pairs, n_out: int) -> torch.Tensor:
        out = x.new_zeros((n_out, self.weight.shape[2]))
        for k, (o, i) in enumerate(zip(pairs.out_idx, pairs.in_idx)):
            if o.numel() == 0:
                continue
            if o.numel() == x.shape[0] == n_out and i is o:
                out = out + x @ self.weight[k]
            else:
                out.index_add_(0, o, x.index_select(0, i) @ self.weight[k])
        return out + self.bias


def _mean(x: torch.Tensor) -> torch.Tensor:
    """Average over points; zeros for an empty pattern."""
    return x.mean(0) if x.shape[0] else x.new_zeros(x.shape[1])


class _TorchRunner:
    """Runs the conv stack with the pure-PyTorch geometry."""

    def __call__(self, net: "SparseConvFeaturizer", pattern: SparsePattern) -> list[torch.Tensor]:
        keys = _keys(pattern.coords)
        x = pattern.features()
        pooled = []
        sub = submanifold_pairs(keys)
        x = torch.relu(net.stem(x, sub, keys.shape[0]))
        pooled.append(_mean(x))
        for down_conv, sub_conv in zip(net.down, net.sub):
            keys, down_pairs = downsample(keys)
            x = torch.relu(down_conv(x, down_pairs, keys.shape[0]))
            x = torch.relu(sub_conv(x, submanifold_pairs(keys), keys.shape[0]))
            pooled.append(_mean(x))
        return pooled


class _TorchSparseRunner:
    """Runs the same stack with torchsparse 2.1 (GPU); weights reordered to its offset order.

    torchsparse enumerates odd kernels with x fastest (offset index = (dy+1)*3 + (dx+1)) and
    even kernels with x slowest (index = dx*2 + dy). With x = row, y = col this means the
    3x3 offset grid is transposed and the 2x2 grid is unchanged.
    """

    def __init__(self):
        import torchsparse  # noqa: F401  (imported for availability; used below)
        import torchsparse.nn.functional as tsf

        self._ts = torchsparse
        self._f = tsf
        self._sub_order = torch.tensor([(dr + 1) * 3 + (dc + 1) for dc, dr in SUB_OFFSETS])

    def _conv(self, conv: SparseConv, x, kernel: tuple[int, int, int], stride: int, reorder):
        weight = conv.weight if reorder is None else conv.weight.index_select(0, reorder.to(x.feats.device))
        return self._f.conv3d(x, weight, kernel, bias=conv.bias, stride=(stride, stride, 1))

    def __call__(self, net: "SparseConvFeaturizer", pattern: SparsePattern) -> list[torch.Tensor]:
        device = net.stem.weight.device
        coords = torch.zeros((pattern.points, 4), dtype=torch.int32)
        coords[:, 1:3] = pattern.coords.to(torch.int32)
        x = self._ts.SparseTensor(feats=pattern.features().to(device), coords=coords.to(device))
        pooled = []

        def relu(t):
            t.feats = torch.relu(t.feats)
            return t

        x = relu(self._conv(net.stem, x, (3, 3, 1), 1, self._sub_order))
        pooled.append(x.feats.mean(0))
        for down_conv, sub_conv in zip(net.down, net.sub):
            x = relu(self._conv(down_conv, x, (2, 2, 1), 2, None))
            x = relu(self._conv(sub_conv, x, (3, 3, 1), 1, self._sub_order))
            pooled.append(x.feats.mean(0))
        return pooled


def torchsparse_usable() -> bool:
    """torchsparse is importable and a CUDA device exists (its strided convs are GPU-only)."""
    return importlib.util.find_spec("torchsparse") is not None and torch.cuda.is_available()


def resolve_backend(name: str, *, on_cuda: bool) -> str:
    """The backend that `name` means for a featurizer whose weights are (not) on a CUDA device."""
    if name == "auto":
        return "torchsparse" if on_cuda and torchsparse_usable() else "torch"
    if name not in ("torch", "torchsparse"):
        raise UnknownKindError("featurizer backend", name, ["auto", "torch", "torchsparse"])
    return name


class SparseConvFeaturizer(nn.Module):
    """Sparse matrix -> 128-d embedding s_M (see the module docstring)."""

    def __init__(self, config: FeaturizerConfig = FeaturizerConfig()):
        super().__init__()
        self.config = config
        resolve_backend(config.backend, on_cuda=False)  # validates the name
        self.stem = SparseConv(1, config.stem_channels, len(SUB_OFFSETS))
        channels = [config.stem_channels, *config.stage_channels]
        self.down = nn.ModuleList(SparseConv(a, b, len(DOWN_OFFSETS)) for a, b in zip(channels, channels[1:]))
        self.sub = nn.ModuleList(SparseConv(b, b, len(SUB_OFFSETS)) for b in channels[1:])
        n_stats = N_STATS + (LOCALITY_WIDTH if config.locality else 0)
        self.stats_mlp = nn.Sequential(nn.Linear(n_stats, config.stats_hidden), nn.ReLU(),
                                       nn.Linear(config.stats_hidden, config.stats_hidden), nn.ReLU())
        self.project = nn.Sequential(nn.Linear(sum(channels) + config.stats_hidden, config.out_dim), nn.ReLU(),
                                     nn.Linear(config.out_dim, config.out_dim))
        self._runner = None

    @property
    def out_dim(self) -> int:
        return self.config.out_dim

    @property
    def backend(self) -> str:
        """The convolution backend in use: decided by the config and where the weights are."""
        return resolve_backend(self.config.backend, on_cuda=self.stem.weight.is_cuda)

    def _get_runner(self):
        backend = self.backend
        if self._runner is None or self._runner[0] != backend:
            self._runner = (backend, _TorchSparseRunner() if backend == "torchsparse" else _TorchRunner())
        return self._runner[1]

    def pattern(self, matrix: sp.csr_matrix) -> SparsePattern:
        return pattern_of(matrix, max_points=self.config.max_points, locality=self.config.locality)

    def pooled(self, pattern: SparsePattern) -> list[torch.Tensor]:
        """Average-pooled features at every scale (stem first)."""
        return self._get_runner()(self, pattern)

    def forward(self, pattern: SparsePattern) -> torch.Tensor:
        """Embedding [out_dim] of one pattern."""
        pooled = torch.cat(self.pooled(pattern))
        stats = self.stats_mlp(pattern.stats(locality=self.config.locality).to(pooled.device))
        return self.project(torch.cat([pooled, stats]))

    def embed(self, matrix: sp.csr_matrix) -> torch.Tensor:
        return self.forward(self.pattern(matrix))

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_runner"] = None
        return state
