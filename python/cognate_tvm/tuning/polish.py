"""Polish: after the search, hill-climb over the one-knob neighbours of the fastest measured config.

On matrices unlike the model's training data (large graphs whose dense operand leaves the cache,
meshes of a million nonzeros) the model ranks the space's fastest configs thousands of places
down, while the configs the search measured sit one knob away from faster ones: a full-width dense
tile instead of two halves, four column parts instead of eight, another tile of rows. With a polish
budget of N, `polish` measures up to N more configs: the candidates that differ from the fastest
measured config in one knob (`Config.knobs_differing`) and were not measured yet, in the order the
search's last model ranks them, `POLISH_BATCH` at a time; after each batch the fastest measured
config (perhaps a new one) is the next centre. It stops when the centre has no unmeasured
neighbour left or the budget is spent. Like the search strategies it never looks at the platform:
the neighbourhood is the space's own knobs.
"""
from __future__ import annotations

import logging

from .search import SearchContext, SearchOutcome, _fastest

log = logging.getLogger(__name__)

# Neighbours measured per step: enough that a step tries most knobs (a CPU config has ~25
# neighbours, so the model's first third), few enough that the climb moves on early.
POLISH_BATCH = 8


def polish(context: SearchContext, outcome: SearchOutcome, budget: int) -> tuple[int, int]:
    """Measure up to `budget` one-knob neighbours of the fastest measured config, climbing (see the module
    docstring); the measurements are appended to `outcome` (one round per batch, ranked by `outcome.model`).
    Returns (configs measured, how many times the fastest measured config changed)."""
    if budget < 0:
        raise ValueError(f"polish must be >= 0, got {budget}")
    centre = _fastest(outcome.measured)
    if budget == 0 or centre is None:
        return 0, 0
    ranked = outcome.model.rank(context.matrix, context.candidates, space=context.space, feat=context.feat)
    rank_of = {config: n + 1 for n, config in enumerate(ranked)}
    values = [config.to_json_values() for config in ranked]  # once: a CPU space has ~65k candidates
    seen, moves, spent = {r.config for r in outcome.measured}, 0, 0
    while spent < budget:
        batch = _neighbours(centre, ranked, values, seen, min(POLISH_BATCH, budget - spent))
        if not batch:
            break
        outcome.measured += context.measure(batch, f"polish {len(outcome.rounds) + 1}")
        outcome.predicted_rank += [rank_of.get(c) for c in batch]
        outcome.rounds.append(len(batch))
        seen.update(batch)
        spent += len(batch)
        fastest = _fastest(outcome.measured)
        if fastest != centre:
            moves += 1
            log.info("polish: %s is faster; its neighbours next", fastest.to_json())
        centre = fastest
    outcome.notes.append(f"polish: measured {spent} one-knob neighbours of the fastest measured config; "
                         f"the fastest changed {moves} time{'s' if moves != 1 else ''}")
    return spent, moves


def _neighbours(centre, ranked: list, values: list, seen: set, count: int) -> list:
    """The first `count` configs of `ranked` (whose `to_json_values` are `values`) one knob away from
    `centre` and not in `seen`."""
    mine = centre.to_json_values()
    found = []
    for config, theirs in zip(ranked, values):
        if sum(a != b for a, b in zip(mine, theirs)) == 1 and config not in seen:
            found.append(config)
            if len(found) == count:
                break
    return found
