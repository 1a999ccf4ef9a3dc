"""Splitting and picking matrices: train / validation / test splits, and small picks that
cover sizes or the embedding space."""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from .groups import Group


def split_by_matrix(names: Sequence[str], *, fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
                    seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """Seeded train / validation / test split of distinct matrix names (no matrix in two parts)."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or not np.isclose(sum(fractions), 1.0):
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    unique = sorted(set(names))
    order = np.random.default_rng(seed).permutation(len(unique))
    n_train = int(round(fractions[0] * len(unique)))
    n_val = int(round(fractions[1] * len(unique)))
    pick = [unique[i] for i in order]
    return pick[:n_train], pick[n_train:n_train + n_val], pick[n_train + n_val:]


def pick_across_sizes(sizes: Mapping[str, float], count: int, *, seed: int = 0) -> list[str]:
    """`count` matrix names, one seeded draw from each of `count` equal strata of `sizes` (e.g. nnz).

    A small validation set drawn uniformly can miss the large matrices, where
    configuration choice matters most; one per size stratum cannot.
    """
    if not 1 <= count <= len(sizes):
        raise ValueError(f"cannot pick {count} of {len(sizes)} matrices")
    ordered = sorted(sizes, key=lambda name: (sizes[name], name))
    rng = np.random.default_rng(seed)
    return [str(stratum[rng.integers(len(stratum))]) for stratum in np.array_split(np.array(ordered), count)]


def pick_diverse(embeddings: Mapping[str, np.ndarray], count: int, *, seed: int = 0,
                 prefer: Mapping[str, float] | None = None) -> list[str]:
    """`count` matrix names that cover the embedding space: the matrix nearest each centre of a
    seeded k-means (k-means++ start) of the standardized `embeddings` (name -> vector), or, with
    `prefer` (name -> score, e.g. nnz), the highest-scoring matrix of each cluster.

    A user picks which target matrices to spend simulations on before simulating any; the
    matrix embedding is free. A uniform draw of 5 misses a family 1 time in 2 when a family is
    an eighth of the pool (a draw without an R-MAT graph then picks no R-MAT matrix right). `prefer`
    lets each cluster send its largest matrix, where the configuration choice matters most.
    """
    from scipy.cluster.vq import kmeans2

    if not 1 <= count <= len(embeddings):
        raise ValueError(f"cannot pick {count} of {len(embeddings)} matrices")
    names = sorted(embeddings)
    if prefer is not None and not set(names) <= set(prefer):
        raise ValueError(f"no preference score for {sorted(set(names) - set(prefer))[:5]}")
    points = np.stack([np.asarray(embeddings[n], dtype=np.float64).ravel() for n in names])
    if not np.isfinite(points).all():
        raise ValueError("matrix embeddings hold NaN or infinite values")
    spread = points.std(axis=0)
    points = (points - points.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    centres, labels = kmeans2(points, count, minit="++", seed=np.random.default_rng([seed, 11]))
    chosen: list[int] = []
    for cluster, centre in enumerate(centres):  # a matrix not chosen yet (two centres may share one)
        order = list(np.argsort(((points - centre) ** 2).sum(axis=1), kind="stable"))
        if prefer is not None:  # the cluster's members by score, then the rest by distance (an empty cluster)
            members = sorted((i for i in order if labels[i] == cluster), key=lambda i: (-prefer[names[i]], names[i]))
            order = members + [i for i in order if labels[i] != cluster]
        chosen.append(int(next(i for i in order if i not in chosen)))
    return [names[i] for i in chosen]


def select(groups: Sequence[Group], names: Iterable[str]) -> list[Group]:
    """The groups whose matrix is in `names`."""
    wanted = set(names)
    return [g for g in groups if g.name in wanted]
