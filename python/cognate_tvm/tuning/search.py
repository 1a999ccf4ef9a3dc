"""Search strategies: which configs `tuning.tune` measures, and in what order.

A strategy gets a `SearchContext` (the op, matrix, space, candidates, cost model
and a `measure` callable) after the baseline, and the optional seeded sample
the model was fine-tuned on, have been measured; it measures what it chooses
and returns a `SearchOutcome`. `tune` then re-times the finalists and checks the
winner's output, whatever the strategy. As in TVM MetaSchedule, the strategy is
one concept with implementations side by side; none of them looks at the
platform: what differs between platforms is the space and the model.

- `OneShot`: the model ranks the candidates once; its best fixed configs and top
  picks are measured in one batch.
- `Adaptive` (the default): rounds of measure -> update -> re-rank. After each
  round a copy of the loaded model is fine-tuned on this matrix's measured
  configs and ranks the candidates again; each later round measures the best
  config of the new ranking and one that explores: first the config nearest the
  fastest measured one (its twin where there is one) that holds a value, no
  measured config has held, of a knob the model does not read (one appended to
  the space after the model was trained: the model scores it blind); else the
  best-ranked config that changes, against the fastest measured so far, a knob
  no measured config has varied yet (where the model has had nothing of this
  matrix to learn from).
"""
from __future__ import annotations

import copy
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Sequence

import numpy as np
import scipy.sparse as sp

from ..backends.base import MeasureResult
from ..errors import UnknownKindError
from ..ops import Op
from ..space.base import Config, Space, diverse_top

log = logging.getLogger(__name__)

# -- shared pieces ---------------------------------------------------------------------


def sample_configs(platform_space: Space, budget: int, seed: int,
                   candidates: Sequence[Config] | None = None) -> list[Config]:
    """`budget` configs other than the baseline, drawn with `seed` from `candidates` (default: the
    whole space; fewer if there are fewer)."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if budget == 0:
        return []
    baseline = platform_space.baseline()
    if candidates is None:
        drawn = platform_space.sample(min(budget + 1, len(platform_space)), seed)
    else:
        pool = list(candidates)
        order = np.random.default_rng(seed).permutation(len(pool))[:budget + 1]
        drawn = [pool[i] for i in sorted(order)]
    return [c for c in drawn if c != baseline][:budget]


def fixed_candidates(model, platform_space: Space, candidates: Sequence[Config]) -> list[Config]:
    """The model's best fixed configs of `platform_space` that are among `candidates`, best first."""
    # Duck-typed: tune takes any model with rank/finetune; one without a fixed list gives none.
    known = getattr(model, "fixed_configs", lambda _: [])(platform_space)
    allowed = set(candidates)
    return [c for c in known if c in allowed]


def pick_top(model, platform_space: Space, ranked: Sequence[Config], *, measured: set,
             top_k: int, fixed: int, min_distance: int = 1) -> tuple[list[Config], list[Config]]:
    """(configs to measure, those of them that are best fixed configs): the model's first `fixed`
    best fixed configs among `ranked` (the candidates), then picks from its ranking that differ
    pairwise in at least `min_distance` knobs (`space.diverse_top`), `top_k` in all, none of them
    already `measured`."""
    chosen_fixed = [c for c in fixed_candidates(model, platform_space, ranked) if c not in measured][:fixed]
    if len(chosen_fixed) == top_k:
        return chosen_fixed, chosen_fixed
    rest = [c for c in ranked if c not in measured and c not in chosen_fixed]
    picks = diverse_top(rest, top_k - len(chosen_fixed), min_distance) if rest else []
    return picks + chosen_fixed, chosen_fixed


def measured_group(name: str, matrix: sp.csr_matrix, feat: int, results: Sequence[MeasureResult]):
    """The measurements as one ranking group (`data.Group`), NaN where a config failed."""
    from ..data import Group

    return Group(name=name, matrix=matrix, feat=feat, configs=tuple(r.config for r in results),
                 times_ms=np.array([r.time_ms if r.ok else np.nan for r in results], dtype=np.float64))


def unread_knob_positions(model, space: Space) -> list[int]:
    """Positions in `space.knob_names` of the knobs `model` does not read (its `unread_knobs`; none for a
    model without that method)."""
    unread = getattr(model, "unread_knobs", None)
    names = set(unread(space)) if unread is not None and space.knob_names else set()
    return [n for n, name in enumerate(space.knob_names) if name in names]


def unvaried_knobs(configs: Sequence[Config]) -> set[int]:
    """Positions of the fields (`Config.to_json_values`) that hold one value in all `configs`."""
    values = [c.to_json_values() for c in configs]
    return {n for n in range(len(values[0])) if len({v[n] for v in values}) == 1} if values else set()


# -- the interface ------------------------------------------------------------------------

@dataclass
class SearchContext:
    """What a strategy searches with; `measure(configs, desc)` returns one result per config."""

    op: Op
    matrix: sp.csr_matrix
    feat: int
    space: Space
    candidates: list[Config]
    model: object
    measure: Callable[[Sequence[Config], str], list[MeasureResult]]
    measured: list[MeasureResult]  # what was measured before the search: the baseline first
    name: str = "matrix"
    fixed: int = 1
    diversity: int = 1


@dataclass
class SearchOutcome:
    """What a strategy measured (the context's first measurements included, in order), the
    1-based rank each measured config had when it was picked (None: not from a ranking), the
    best fixed configs among them, the model that ranked last and how many configs each
    round measured."""

    measured: list[MeasureResult]
    predicted_rank: list[int | None]
    fixed: list[Config]
    model: object
    finetuned: bool = False
    rounds: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class SearchStrategy(ABC):
    """Chooses and measures `measurements` configs of one matrix (see the module docstring)."""

    name: ClassVar[str]

    def __init__(self, *, measurements: int):
        if measurements < 1:
            raise ValueError(f"measurements must be >= 1, got {measurements}")
        self._measurements = int(measurements)

    @property
    def measurements(self) -> int:
        """How many configs the search measures after the context's first measurements."""
        return self._measurements

    @abstractmethod
    def search(self, context: SearchContext) -> SearchOutcome:
        """Measure the configs this strategy picks; failures are results, never raised."""

    @staticmethod
    def first_picks(context: SearchContext, k: int) -> tuple[list[Config], list[Config], list[Config]]:
        """(the model's ranking of the candidates, its first `k` picks (`pick_top`), the best fixed
        configs among them)."""
        ranked = context.model.rank(context.matrix, context.candidates, space=context.space, feat=context.feat)
        picks, fixed = pick_top(context.model, context.space, ranked, measured={r.config for r in context.measured},
                                top_k=k, fixed=min(context.fixed, k), min_distance=context.diversity)
        return ranked, picks, fixed


class OneShot(SearchStrategy):
    """The model ranks once; its `fixed` best fixed configs and top picks, `measurements` in all, are
    measured in one batch."""

    name = "oneshot"

    def __init__(self, *, measurements: int = 5):
        super().__init__(measurements=measurements)

    def search(self, context: SearchContext) -> SearchOutcome:
        ranked, top, fixed = self.first_picks(context, self._measurements)
        measured = list(context.measured) + context.measure(top, f"top-{len(top)}")
        rank_of = {config: n + 1 for n, config in enumerate(ranked)}
        return SearchOutcome(measured=measured, predicted_rank=[rank_of.get(r.config) for r in measured],
                             fixed=fixed, model=context.model, rounds=[len(top)])


class Adaptive(SearchStrategy):
    """Rounds of measure -> update -> re-rank (see the module docstring).

    Parameters
    ----------
    measurements : configs measured in all (after the context's first measurements).
    first : configs of the first round, picked as `OneShot` picks them (at most `measurements`).
    per_round : configs of each later round: the best of the new ranking, then (with
        `explore`) the best-ranked one that varies a knob no measured config varied, then
        the next of the ranking.
    explore : whether later rounds explore (else they take the ranking's next configs).
    radius : explore only configs within this many knobs of the fastest measured one, when
        there are any (None: anywhere in the ranking).
    local : the best of each later round is taken among the configs within this many knobs of the
        fastest measured one, when there are any (None: the whole ranking), as an evolutionary
        search mutates its best.
    epochs : epochs of each fine-tune (None: the model's own setting).
    """

    name = "adaptive"

    def __init__(self, *, measurements: int = 7, first: int = 3, per_round: int = 2, explore: bool = True,
                 radius: int | None = None, local: int | None = None, epochs: int | None = None):
        super().__init__(measurements=measurements)
        if first < 1 or per_round < 1:
            raise ValueError(f"first and per_round must be >= 1, got first={first}, per_round={per_round}")
        for name, value in (("radius", radius), ("local", local)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        self.first, self.per_round = min(int(first), self._measurements), int(per_round)
        self.explore, self.radius, self.local, self.epochs = bool(explore), radius, local, epochs

    def search(self, context: SearchContext) -> SearchOutcome:
        ranked, picks, fixed = self.first_picks(context, self.first)
        outcome = SearchOutcome(measured=list(context.measured), predicted_rank=[], fixed=fixed,
                                model=context.model)
        self._record(outcome, context, picks, ranked, "round 1")
        while len(outcome.measured) - len(context.measured) < self._measurements:
            model = self._update(context, outcome.measured)
            if model is not None:
                outcome.model, outcome.finetuned = model, True
                ranked = model.rank(context.matrix, context.candidates, space=context.space, feat=context.feat)
            left = self._measurements - (len(outcome.measured) - len(context.measured))
            picks = self._next_round(ranked, outcome.measured, min(self.per_round, left), context)
            if not picks:
                break  # every candidate is measured
            self._record(outcome, context, picks, ranked, f"round {len(outcome.rounds) + 1}")
        return outcome

    @staticmethod
    def _record(outcome: SearchOutcome, context: SearchContext, picks: list[Config], ranked: Sequence[Config],
                desc: str) -> None:
        rank_of = {config: n + 1 for n, config in enumerate(ranked)}
        if not outcome.predicted_rank:  # the context's first measurements, ranked by the first ranking
            outcome.predicted_rank = [rank_of.get(r.config) for r in outcome.measured]
        outcome.measured += context.measure(picks, desc)
        outcome.predicted_rank += [rank_of.get(c) for c in picks]
        outcome.rounds.append(len(picks))

    def _update(self, context: SearchContext, measured: Sequence[MeasureResult]):
        """A copy of the context's model fine-tuned on this matrix's measurements so far (None when
        fewer than two configs ran or all ran equally fast: nothing to rank)."""
        group = measured_group(context.name, context.matrix, context.feat, measured).ok()
        if len(group.configs) < 2 or np.ptp(group.times_ms) == 0:
            return None
        log.info("adaptive search: fine-tuning on %d measured configs of %s", len(group.configs), context.name)
        model = copy.deepcopy(context.model)
        model.finetune([group], space=context.space, **({} if self.epochs is None else {"epochs": self.epochs}))
        return model

    def _next_round(self, ranked: Sequence[Config], measured: Sequence[MeasureResult], k: int,
                    context: SearchContext) -> list[Config]:
        seen = {r.config for r in measured}
        rest = [c for c in ranked if c not in seen]
        incumbent = _fastest(measured)
        exploit = rest
        if self.local is not None and incumbent is not None:
            exploit = [c for c in rest if c.knobs_differing(incumbent) <= self.local] or rest
        picks = exploit[:1]
        if self.explore and k > 1 and rest:
            others = [c for c in rest if c not in picks]
            explored = self._unread_value(others, measured, context) or self._explore(others, measured)
            picks += [explored] if explored is not None else []
        chosen = set(picks)
        return picks + [c for c in dict.fromkeys(exploit + rest) if c not in chosen][:k - len(picks)]

    @staticmethod
    def _unread_value(ranked: Sequence[Config], measured: Sequence[MeasureResult],
                      context: SearchContext) -> Config | None:
        """Of the configs in `ranked` holding a value, of a knob the model does not read, that no measured
        config holds: the nearest to the fastest measured config (fewest fields changed: its twin when
        there is one), the best-ranked among those. None when the model reads every knob or no such
        config is left."""
        positions = unread_knob_positions(context.model, context.space)
        incumbent = _fastest(measured)
        if not positions or incumbent is None:
            return None
        held = {n: {context.space.platform_knobs(r.config)[n] for r in measured} for n in positions}
        novel = [c for c in ranked if any(context.space.platform_knobs(c)[n] not in held[n] for n in positions)]
        return min(novel, key=incumbent.knobs_differing) if novel else None

    def _explore(self, ranked: Sequence[Config], measured: Sequence[MeasureResult]) -> Config | None:
        """The best-ranked of `ranked` that changes, against the fastest measured config, a knob that
        every measured config holds at one value (within `radius` knobs of it, where any are)."""
        incumbent = _fastest(measured)
        if incumbent is None:
            return None
        values = incumbent.to_json_values()
        unvaried = unvaried_knobs([r.config for r in measured])
        varying = [c for c in ranked if any(c.to_json_values()[n] != values[n] for n in unvaried)]
        if self.radius is not None:
            varying = [c for c in varying if c.knobs_differing(incumbent) <= self.radius] or varying
        return varying[0] if varying else None


def _fastest(measured: Sequence[MeasureResult]) -> Config | None:
    ok = [r for r in measured if r.ok]
    return min(ok, key=lambda r: r.time_ms).config if ok else None


STRATEGIES = {OneShot.name: OneShot, Adaptive.name: Adaptive}
DEFAULT_STRATEGY = Adaptive.name


def create(name: str | SearchStrategy, **options) -> SearchStrategy:
    """The strategy named `name` ("oneshot", "adaptive") with `options`; a strategy passes through."""
    if isinstance(name, SearchStrategy):
        return name
    if name not in STRATEGIES:
        raise UnknownKindError("search strategy", name, list(STRATEGIES))
    return STRATEGIES[name](**options)
