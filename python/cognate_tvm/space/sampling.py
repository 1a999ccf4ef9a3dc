"""Sampling configs per matrix for training data: the baseline plus a seeded sample that covers every
knob value (`config_sample`), optionally an equal share per value of one field (`stratified_sample`).
What `python -m cognate_tvm.collect`, the transfer protocol's datasets and the benchmarks draw."""
from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

from .base import Config, Space


def config_sample(platform_space: Space, count: int, seed: int, name: str,
                  pool: Sequence[Config] | None = None,
                  candidates: Sequence[Config] | None = None, stratify: str | None = None) -> list[Config]:
    """The baseline plus `count` configs, seeded by (seed, matrix name): drawn from `pool`
    when given, else a sample of `candidates` (default: the whole space) that covers every knob value;
    with `stratify` (a config field), an equal share of the sample for each of the field's values."""
    sub_seed = [int(seed), zlib.crc32(name.encode())]
    if pool is None and stratify is not None:
        sample = stratified_sample(platform_space, count, sub_seed, stratify, candidates)
    elif pool is None:
        sample = platform_space.sample_covering(count, seed=sub_seed, configs=candidates)
    else:
        rng = np.random.default_rng(sub_seed)
        sample = [pool[i] for i in sorted(rng.choice(len(pool), size=min(count, len(pool)), replace=False))]
    baseline = platform_space.baseline()
    return [baseline] + [c for c in sample if c != baseline]


def stratified_sample(platform_space: Space, count: int, seed, field: str,
                      candidates: Sequence[Config] | None = None) -> list[Config]:
    """`count` configs, an equal share (the first values one more when it does not divide) drawn from
    the configs of each value of `field`, each share covering every knob value it can.

    Why: a knob whose other values hold few configs of the space (register blocks: 1,296 of 87,084 SpMM
    configs) would appear in a uniform sample a few times per matrix, too few to learn where it pays.
    """
    configs = list(platform_space.configs() if candidates is None else candidates)
    if not configs or not hasattr(configs[0], field):
        raise ValueError(f"--stratify {field!r}: not a field of {platform_space.config_type.__name__}")
    values = sorted({getattr(c, field) for c in configs}, key=repr)
    sample: list[Config] = []
    for n, value in enumerate(values):
        share = count // len(values) + (n < count % len(values))
        group = [c for c in configs if getattr(c, field) == value]
        sample += sample_within(platform_space, group, share, [*np.atleast_1d(seed), n])
    return sample


def sample_within(platform_space: Space, group: list, count: int, seed) -> list:
    """`count` configs of `group` covering every knob value, or uniform where too few to cover."""
    try:
        return platform_space.sample_covering(count, seed=seed, configs=group)
    except ValueError:
        rng = np.random.default_rng(seed)
        return [group[i] for i in sorted(rng.choice(len(group), size=min(count, len(group)), replace=False))]
