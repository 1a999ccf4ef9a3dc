"""The oracle: a sweep of the whole space (or a large seeded sample of it) and its fastest correct config,
to see how far `tune`'s choice is from the best."""
from __future__ import annotations

import scipy.sparse as sp

from .. import space
from ..backends.base import Backend, pick_checked
from ..ops import Op
from .measuring import measure_configs
from .options import ORACLE_SAMPLE, ORACLE_WHOLE_SPACE
from .result import OracleResult, TuneResult


def oracle_configs(platform_space: space.Space, tuned: TuneResult | None, *, seed: int,
                   sample: int = ORACLE_SAMPLE) -> tuple[list[space.Config], bool]:
    """(configs, whole_space): the oracle sweep's configs (see ORACLE_WHOLE_SPACE)."""
    everything = platform_space.configs()
    if len(everything) <= ORACLE_WHOLE_SPACE:
        return everything, True
    if sample < 1:
        raise ValueError(f"oracle sample must be >= 1, got {sample}")
    already = [r.config for r in tuned.measured] if tuned is not None else [platform_space.baseline()]
    return list(dict.fromkeys(already + platform_space.sample(sample, seed + 1))), False


def measure_oracle(backend: Backend, op: Op, matrix: sp.csr_matrix, platform_space: space.Space,
                   tuned: TuneResult, feat: int, *, seed: int = 0, sample: int = ORACLE_SAMPLE,
                   progress: bool = False) -> OracleResult | None:
    """Sweep the space (or a large sample of it) and return its fastest correct config.

    The oracle's and the chosen config's times both come from this one sweep.
    """
    configs, whole = oracle_configs(platform_space, tuned, seed=seed, sample=sample)
    chosen = tuned.chosen.config if tuned.chosen is not None else None
    if chosen is not None and chosen not in set(configs):
        configs.append(chosen)
    results = measure_configs(backend, op, matrix, configs, feat, seed=seed, progress=progress, desc="oracle")
    pick = pick_checked(backend, op, matrix, results, feat, seed=seed)
    if pick.best is None:
        tuned.notes.append("oracle: no config of the sweep ran correctly")
        return None
    by_config = {r.config: r for r in results}
    best = by_config[pick.best.config]
    chosen_ms = by_config[chosen].time_ms if chosen is not None and by_config[chosen].ok else None
    return OracleResult(config=best.config, time_ms=best.time_ms, chosen_ms=chosen_ms,
                        configs_measured=len(results), space_size=len(platform_space), whole_space=whole,
                        rejected=list(pick.rejected))
