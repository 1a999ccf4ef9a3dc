"""The protocol's SPADE data: the evaluation split (validation, test), the training pool, and the draws of
the target training matrices from the pool."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from .. import backends
from ..space.sampling import config_sample
from ..data import Group, collect, groups_from_frame, load_frame, pick_across_sizes, pick_diverse, select
from ..matrix.corpus import load_corpus
from ..space import create as create_space
from .params import Params


@dataclass
class TargetData:
    """The SPADE groups of one op: validation, test, and the training pool."""

    val: list[Group]                # val_configs sampled configs (+ baseline) of the validation matrices
    test: list[Group]               # all configs
    pool: list[Group]               # pool_configs sampled configs + baseline
    seconds: float


def _sample_group(group: Group, count: int, seed: int, keep) -> Group:
    """`count` seeded configs of `group`, always including `keep` (the baseline config)."""
    rng = np.random.default_rng([seed, int(hashlib.sha1(group.name.encode()).hexdigest()[:8], 16)])
    others = [i for i, c in enumerate(group.configs) if c != keep]
    chosen = set(rng.choice(others, size=min(count, len(others)), replace=False).tolist())
    chosen |= {i for i, c in enumerate(group.configs) if c == keep}
    idx = sorted(chosen)
    return Group(group.name, group.matrix, group.feat, tuple(group.configs[i] for i in idx), group.times_ms[idx])


@dataclass(frozen=True)
class _Structure:
    """Builds a corpus entry's matrix without its values (1 byte per nonzero, not 8). Every model and metric
    here reads the pattern only (the simulator gets the full matrix from the entry), and a 1000-matrix pool at
    1k-1M rows holds ~1.27G nonzeros: 15 GB as float64 CSR, 6.4 GB this way (docs/decisions.md)."""

    entry: object

    def build(self) -> sp.csr_matrix:
        matrix = sp.csr_matrix(self.entry.build())
        return sp.csr_matrix((np.ones(matrix.nnz, dtype=bool), matrix.indices, matrix.indptr), shape=matrix.shape)


def _collect(op: str, entries, count: int, path: Path, params: Params, progress: bool) -> list[Group]:
    """Simulate (or reuse) `count` configs per entry, as `python -m cognate_tvm.collect` does; their groups."""
    spade = create_space("spade", op)
    backend = backends.create("spade", workers=params.threads)
    configs = {e.name: config_sample(spade, count, params.data_seed, e.name) for e in entries}
    collect(backend, op, entries, configs, path, feat=params.feat, seed=params.data_seed, progress=progress,
            chunk=params.chunk)
    frame = load_frame(path)
    names = {e.name for e in entries}
    frame = frame[frame["matrix"].isin(names) & (frame["feat"] == params.feat)]
    built = {e.name: _Structure(e) for e in entries}
    order = {e.name: n for n, e in enumerate(entries)}
    groups = groups_from_frame(frame, space=spade, matrices=built, op=op)
    return sorted((g for g in groups if len(g.configs) >= 2), key=lambda g: order[g.name])


def finetune_draw(pool: Sequence[Group], k: int, seed: int, draw: str, embed=None,
                  include: Sequence[str] = ()) -> list[Group]:
    """The k fine-tune matrices of a seed: the first k of the seeded permutation that also orders NTn's
    matrices ("random"), one seeded draw from each of k nnz strata of the pool ("stratified"), so that
    no seed fine-tunes on small matrices only (a random draw of five of <= 11.6k rows lost its
    picks on the large test matrices), or the k matrices that cover the source model's matrix
    embeddings (`embed`: matrix -> vector), one per seeded k-means cluster: the one nearest its centre
    ("diverse") or the one with the most nonzeros ("diverse-largest": where the choice matters most).

    `include`: pool matrices (names) that every draw holds: they come first, and the draw picks the
    other k - len(include) from the rest of the pool (a user who must cover a matrix, or a probe
    of whether one fine-tune matrix of a regime teaches it)."""
    by_name = {g.name: g for g in pool}
    if include:
        missing = [name for name in include if name not in by_name]
        if missing or len(set(include)) != len(include) or len(include) > k:
            raise ValueError(f"cannot include {list(include)} in a draw of {k} from the pool"
                             + (f": not in the pool: {missing}" if missing else ""))
        rest = [g for g in pool if g.name not in include]
        drawn = finetune_draw(rest, k - len(include), seed, draw, embed) if k > len(include) else []
        return [by_name[name] for name in include] + drawn
    if draw == "random":
        order = np.random.default_rng([seed, 7]).permutation(len(pool))
        return [pool[i] for i in order[:k]]
    if draw == "stratified":
        names = pick_across_sizes({g.name: g.matrix.nnz for g in pool}, k, seed=seed)
    elif draw in ("diverse", "diverse-largest"):
        if embed is None:
            raise ValueError(f"the {draw!r} draw needs the source model's matrix embeddings")
        prefer = {g.name: g.matrix.nnz for g in pool} if draw == "diverse-largest" else None
        names = pick_diverse({g.name: embed(g.matrix) for g in pool}, k, seed=seed, prefer=prefer)
    else:
        raise ValueError(f"unknown fine-tune draw {draw!r}: 'random', 'stratified', 'diverse' or "
                         "'diverse-largest'")
    return [by_name[name] for name in names]


def evaluation_split(op: str, params: Params, root: Path, *, progress: bool) -> tuple[list[Group], list[Group]]:
    """(validation, test) matrices of the evaluation corpus, all 256 configs each (simulated or reused)."""
    spade = create_space("spade", op)
    eval_entries = load_corpus(params.eval_corpus, min_rows=params.eval_min_rows, max_rows=params.eval_max_rows)
    evaluation = _collect(op, eval_entries, len(spade.configs()), root / f"spade_eval_{op}", params, progress)
    # validation: one matrix per nnz stratum, so that it holds large matrices, where the choice matters
    val_names = set(pick_across_sizes({g.name: g.matrix.nnz for g in evaluation}, params.val_matrices,
                                      seed=params.split_seed))
    test_names = [g.name for g in evaluation if g.name not in val_names]
    return select(evaluation, val_names), select(evaluation, test_names)


def target_data(op: str, params: Params, root: Path, *, progress: bool) -> TargetData:
    start = time.perf_counter()
    spade = create_space("spade", op)
    eval_names = {e.name for e in load_corpus(params.eval_corpus, min_rows=params.eval_min_rows,
                                              max_rows=params.eval_max_rows)}
    pool_entries = load_corpus(params.pool_corpus, min_rows=params.pool_min_rows, max_rows=params.pool_max_rows)
    if eval_names & {e.name for e in pool_entries}:
        raise ValueError("the evaluation corpus and the pool share matrices: change a corpus seed")
    val, test = evaluation_split(op, params, root, progress=progress)
    pool = _collect(op, pool_entries, params.pool_configs, root / f"spade_pool_{op}", params, progress)
    val = [_sample_group(g, params.val_configs, params.split_seed, spade.baseline()) for g in val]
    return TargetData(val=val, test=test, pool=pool, seconds=time.perf_counter() - start)
