"""What a tuning run found: `TuneResult` (and its `chosen` config) and the oracle sweep's `OracleResult`."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import space
from ..backends.base import MeasureResult


@dataclass
class OracleResult:
    """The best config of a (whole or sampled) sweep of the space, and the chosen one's time in it."""

    config: space.Config
    time_ms: float
    chosen_ms: float | None
    configs_measured: int
    space_size: int
    whole_space: bool
    rejected: list[MeasureResult] = field(default_factory=list)

    @property
    def fraction(self) -> float | None:
        """oracle time / chosen time, both from the same sweep (1.0: the chosen config is the oracle)."""
        return self.time_ms / self.chosen_ms if self.chosen_ms else None

    def to_dict(self) -> dict:
        return {"config": self.config.to_dict(), "time_ms": self.time_ms, "chosen_ms": self.chosen_ms,
                "configs_measured": self.configs_measured, "space_size": self.space_size,
                "whole_space": self.whole_space, "rejected": [r.to_dict() for r in self.rejected]}


@dataclass
class TuneResult:
    """What a tuning run measured and chose.

    measured : every target measurement of the search, in order (the baseline
        first); a config found wrong by the output check is recorded here as
        failed (``error`` says so).
    predicted_rank : the 1-based position of each measured config in the
        model's ranking of the whole space (after fine-tuning).
    sampled : how many configs after the baseline were the fine-tuning sample.
    fixed : the measured configs that came from the model's best fixed configs.
    diversity : the ranked picks differed pairwise in at least this many knobs (`pick_top`).
    retimed : the median time of the finalists (the fastest measured configs) and
        the baseline, timed side by side (`FINAL_ROUNDS` rounds) before the choice.
    confirmed : (baseline, best), their medians over those rounds and the best's
        output-checked run beside the baseline; None when the best is the baseline.
    checked : the chosen best's checked re-measurement (``correct`` True, or
        None on a backend that computes no outputs).
    rejected : configs that failed the output check (or the re-measurement).
    """

    baseline: MeasureResult
    measured: list[MeasureResult]
    predicted_rank: list[int | None]
    model: object | None = None
    model_source: str | None = None
    sampled: int = 0
    fixed: list[space.Config] = field(default_factory=list)
    diversity: int = 1
    finetuned: bool = False
    notes: list[str] = field(default_factory=list)
    confirmed: tuple[MeasureResult, MeasureResult] | None = None
    checked: MeasureResult | None = None
    rejected: list[MeasureResult] = field(default_factory=list)
    oracle: OracleResult | None = None
    retimed: dict = field(default_factory=dict)
    search: str = "oneshot"
    rounds: list[int] = field(default_factory=list)

    @property
    def best(self) -> MeasureResult | None:
        """The fastest measured config that ran and was not found wrong (None if none): by the
        finalists' re-timed medians when there are any left, else by the measured times."""
        ok = [r for r in self.measured if r.ok]
        finalists = [r for r in ok if r.config in self.retimed]
        if finalists:
            return min(finalists, key=lambda r: self.retimed[r.config])
        return min(ok, key=lambda r: r.time_ms) if ok else None

    @property
    def chosen(self) -> MeasureResult | None:
        """The config to use: the best, unless re-timing shows it no faster than a correct baseline."""
        if self.confirmed is not None and self.confirmed[1].time_ms >= self.confirmed[0].time_ms \
                and self.confirmed[0].correct is not False:
            return self.baseline
        return self.best

    @property
    def failed(self) -> list[MeasureResult]:
        return [r for r in self.measured if not r.ok]


def chosen_time_ms(tuned: TuneResult) -> float | None:
    """The chosen config's time: its side-by-side re-timing when there was one."""
    if tuned.chosen is None:
        return None
    if tuned.confirmed is not None:
        base, best = tuned.confirmed
        return best.time_ms if tuned.chosen.config == best.config else base.time_ms
    return tuned.chosen.time_ms

