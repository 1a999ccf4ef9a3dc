"""The library behind the `measure` and `tune` CLIs (and the examples and benchmarks).

What they share lives here: creating a backend, the batched measuring loop,
the vendor report, loading cost models (a saved one, or the shipped model of
an op and platform), and tuning itself:

>>> from cognate_tvm import tuner                                          # doctest: +SKIP
>>> backend = tuner.create_backend("llvm")                                 # doctest: +SKIP
>>> remote = tuner.create_backend("cuda", arch="sm_90", rpc_tracker="HOST:9190", rpc_key="h200")  # doctest: +SKIP
>>> tuned = tuner.tune("spmm", A, backend=backend, feat=128)               # doctest: +SKIP
>>> tuned.chosen.config, tuned.confirmed                                   # doctest: +SKIP

`tune`: the shipped model of the op and the backend's
platform ranks the space's candidates for the backend's kernel threads
(`Space.candidates`: all configs but on the CPU, where parallel or serial ones
follow the thread count); a platform without a shipped model uses the CPU
model zero-shot, with a note. The baseline is measured, then the search
strategy (`cognate_tvm.search`) chooses what else to measure: by default
(`search.Adaptive`) 7 configs in rounds of 3, 2 and 2, the model fine-tuned (a
copy, from its loaded weights) on this matrix's measurements after each round
and the candidates ranked again; ``search="oneshot"`` measures the first
ranking's top-k (5) in one batch. The first picks are `fixed` (1) of the model's
best fixed configs (the ones that did best over its training matrices,
`pick_top`) and picks from the ranking that differ pairwise in
`Space.pick_distance` knobs (SPADE: 2; elsewhere 1, the plain ranking;
`diversity` overrides it); with ``budget=N`` a seeded sample of N candidates is
measured first and the loaded model is fine-tuned on it, from its pre-trained
weights.
The fastest `FINALISTS` measured configs and the baseline are then timed again
side by side (`FINAL_ROUNDS` calls, order rotated; not on a simulator) and
ranked by their medians (`retime_finalists`). The chosen config is the first of
them whose output, checked once against scipy, is right
(`backends.base.pick_checked`; a wrong one is recorded as failed and the next
best is tried); that check runs beside the baseline, and the baseline is kept
when the two medians say it is no slower.

Writing kernels out (`write_kernel`) and CUDA's compile-only ranking
(`compile_top_k`) are here too; the CLIs only parse arguments and print.
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from tqdm import tqdm

from . import backends, space
from .backends.base import Backend, MeasureResult, measure_side_by_side, pick_checked
from .backends.rpc import create_rpc, wants_rpc
from .errors import ModelVersionError, PretrainedNotFoundError
from .ops import Op, get_op
from . import search as search_strategies
from .search import (DEFAULT_STRATEGY, SearchStrategy, fixed_candidates, measured_group, pick_top,  # noqa: F401
                     sample_configs)

log = logging.getLogger(__name__)

EXAMPLE_MATRIX = Path(__file__).resolve().parent / "sample_matrices" / "example_powerlaw.mtx.gz"
BATCH = 8                # configs per backend call: small enough for a live progress bar
DEFAULT_TOP_K = 5        # configs measured from the model's ranking (the protocol's top-5, docs/transfer.md)
DEFAULT_BUDGET = 0       # target measurements to fine-tune on before ranking
# Of the top-k, how many are the model's best fixed configs (the ones that did best over its
# training matrices, `RankingModel.fixed_configs`) rather than its picks for this matrix: one
# config that is good everywhere guards against the model's misses on a matrix unlike its data.
DEFAULT_FIXED = 1
# Before choosing, the FINALISTS fastest measured configs and the baseline are timed again side
# by side, FINAL_ROUNDS calls with the order rotated, and compared by their medians: one timing
# each on a shared machine whose speed drifts by 10-40% over minutes picks the wrong one too often.
FINALISTS = 3
FINAL_ROUNDS = 3
SOURCE_PLATFORM = "cpu"  # whose shipped model ranks a platform that has none (zero-shot)
# --oracle measures the whole space when it has at most ORACLE_WHOLE_SPACE configs (spade: 256,
# gpu: 912), else a seeded sample of ORACLE_SAMPLE configs plus every config tune measured (the
# CPU space has ~50k configs; 512 llvm configs take a few minutes with a cold kernel cache).
ORACLE_WHOLE_SPACE = 1024
ORACLE_SAMPLE = 512


# -- backends and measuring ------------------------------------------------------------

def create_backend(target: str | Backend, *, arch: str | None = None, compile_only: bool = False,
                   rpc_tracker: str | None = None, rpc_key: str | None = None, **options) -> Backend:
    """The backend of `target` with the given options; ValueError if the target does not take one.

    With `rpc_tracker` ("HOST:PORT") and `rpc_key`, the kernels are built here and
    run on a device behind that TVM RPC tracker (`backends.rpc.create_rpc`);
    `RPCSettingsError` (a ValueError) when only one is given, the address is bad,
    or the target cannot run remotely (a remote backend takes no `compile_only`).
    """
    if isinstance(target, Backend):
        return target
    if arch is not None:
        options["arch"] = arch
    if compile_only:
        options["compile_only"] = True
    try:
        if wants_rpc(rpc_tracker, rpc_key):
            return create_rpc(target, tracker=rpc_tracker, key=rpc_key, **options)
        return backends.create(target, **options)
    except TypeError as exc:
        raise ValueError(f"target {target!r} does not take option(s) {sorted(options)}: {exc}") from None


def measure_configs(backend: Backend, op: Op | str, matrix: sp.csr_matrix, configs: Sequence[space.Config],
                    feat: int, *, check: bool = False, seed: int = 0, progress: bool = False,
                    desc: str = "measure") -> list[MeasureResult]:
    """Measure `configs` in batches of `BATCH` (so a progress bar stays live); failures are results."""
    op = get_op(op)
    results: list[MeasureResult] = []
    with tqdm(total=len(configs), desc=desc, unit="config", file=sys.stderr, disable=not progress) as bar:
        for start in range(0, len(configs), BATCH):
            batch = list(configs[start:start + BATCH])
            results += backend.measure(op, matrix, batch, feat, check=check, seed=seed)
            bar.update(len(batch))
    for r in results:
        if not r.ok:
            log.info("config %s failed: %s", r.config.to_json(), r.error)
    return results


def vendor_report(backend: Backend, op: Op | str, matrix: sp.csr_matrix, feat: int, seed: int) -> dict:
    """{"name", "method", "time_ms"} of the target's vendor library on `matrix`."""
    op = get_op(op)
    library = backend.vendor()
    if library is None:
        raise ValueError(f"no vendor library is available for target {backend.target!r} here")
    return {"name": library.name, "method": library.method(op),
            "time_ms": library.time_ms(op, matrix, feat, seed=seed)}


def matrix_report(path, matrix: sp.csr_matrix) -> dict:
    return {"path": str(path), "rows": matrix.shape[0], "cols": matrix.shape[1], "nnz": int(matrix.nnz)}


def measure_report(*, op: str, target: str, feat: int, matrix_path, matrix: sp.csr_matrix,
                   results: Sequence[MeasureResult], vendor: dict | None) -> dict:
    """The JSON form of a `measure` run: every result, the baseline (first) and the vendor."""
    report = {"op": op, "target": target, "feat": feat, "matrix": matrix_report(matrix_path, matrix),
              "baseline": {"config": results[0].config.to_dict(), "time_ms": results[0].time_ms},
              "results": [r.to_dict() for r in results]}
    if vendor is not None:
        report["vendor"] = vendor
    return report


# -- cost models -------------------------------------------------------------------------

def load_model(path: str | os.PathLike):
    """A saved CognateCostModel; ModelVersionError for another format version, ValueError if unreadable."""
    from .model.cognate import CognateCostModel

    try:
        return CognateCostModel.load(path)
    except (ModelVersionError, FileNotFoundError):
        raise
    except (OSError, RuntimeError, EOFError, KeyError, TypeError, ValueError, pickle.UnpicklingError) as exc:
        raise ValueError(f"cannot read the model in {path}: {type(exc).__name__}: {exc}") from None


def load_shipped_model(op: Op | str, platform: str, *, root: str | os.PathLike | None = None,
                       threads: int | None = None, hardware: dict | None = None) -> tuple[object, str, list[str]]:
    """(model, where it came from, notes): the shipped model of (`op`, `platform`) for kernels on
    `threads` threads (None: the target has no thread setting).

    The model of the closest thread count that ships is taken (a note says so when it is not
    `threads`). A platform without one gets the shipped CPU model, used zero-shot (a note says
    so). With `hardware` (the backend's `metadata()`), a note names each value it differs in from
    the hardware the model was trained on (`model.pretrained.hardware_notes`, e.g. another GPU arch).
    PretrainedNotFoundError when neither ships, naming what does.
    """
    from .model.pretrained import hardware_notes, load_pretrained, pretrained_path, thread_variants

    op = get_op(op)
    first = None
    for name, trained_threads in thread_variants(platform, threads, root=root):
        try:
            model = load_pretrained(op.name, name, root=root)
        except PretrainedNotFoundError as exc:
            first = first or str(exc)
            continue
        notes = []
        if threads is not None and trained_threads != max(1, int(threads)):
            notes.append(f"no shipped {op.name} model for {platform} kernels on {threads} thread(s): the one "
                         f"trained on {trained_threads}-thread timings ({name}) ranks the configs")
        path = pretrained_path(op.name, name, root=root)
        notes += hardware_notes(path, hardware or {}, op=op.name)
        return model, str(path), notes
    if platform == SOURCE_PLATFORM:
        raise PretrainedNotFoundError(f"{first}. Pass a saved model with --model PATH (library: model=...), "
                                      f"or build one with benchmarks/pretrain.py") from None
    try:
        model = load_pretrained(op.name, SOURCE_PLATFORM, root=root)
    except PretrainedNotFoundError as exc:
        raise PretrainedNotFoundError(f"{first}; no {SOURCE_PLATFORM} model to fall back on either: {exc}. "
                                      f"Pass a saved model with --model PATH") from None
    note = (f"no shipped {op.name} model for platform {platform!r}: the {SOURCE_PLATFORM} model is used, "
            f"pre-trained on {SOURCE_PLATFORM} measurements only; without a budget (--budget N) it ranks "
            f"{platform} configs zero-shot")
    return model, str(pretrained_path(op.name, SOURCE_PLATFORM, root=root)), [note]


# -- tuning -----------------------------------------------------------------------------

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


def check_tune_options(*, feat: int, top_k: int | None, budget: int, fixed: int, diversity: int | None = None,
                       oracle_sample: int | None = None, name=lambda option: option) -> None:
    """ValueError naming the first of `tune`'s options out of range (`oracle_sample`: only when given;
    `top_k` None: the search strategy's default).

    `name` spells an option as the caller knows it (the CLI: ``--top-k`` for ``top_k``).
    """
    if int(feat) < 1:
        raise ValueError(f"{name('feat')} must be >= 1, got {feat}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"{name('top_k')} must be >= 1, got {top_k}")
    if budget < 0:
        raise ValueError(f"{name('budget')} must be >= 0, got {budget}")
    if fixed < 0 or (top_k is not None and fixed > top_k):
        raise ValueError(f"{name('fixed')} must be in [0, {name('top_k')}={top_k}], got {fixed}")
    if oracle_sample is not None and oracle_sample < 1:
        raise ValueError(f"{name('oracle_sample')} must be >= 1, got {oracle_sample}")
    if diversity is not None and diversity < 1:
        raise ValueError(f"{name('diversity')} must be >= 1, got {diversity}")


def tune(op: Op | str, matrix: sp.csr_matrix, *, backend: Backend, feat: int = 128, model=None,
         model_source: str | None = None, pretrained_root: str | os.PathLike | None = None,
         budget: int = DEFAULT_BUDGET, top_k: int | None = None, fixed: int = DEFAULT_FIXED, seed: int = 0,
         diversity: int | None = None, search: str | SearchStrategy = DEFAULT_STRATEGY,
         candidates: Sequence[space.Config] | None = None, oracle: bool = False,
         oracle_sample: int = ORACLE_SAMPLE, name: str = "matrix", progress: bool = False) -> TuneResult:
    """Pick the fastest correct config of `op` on `matrix` for `backend` (see the module docstring).

    Parameters
    ----------
    model : a CognateCostModel (or any model with rank / finetune), or None for
        the shipped model of `op` on the backend's platform (`load_shipped_model`).
    pretrained_root : directory of shipped models (default: the package's).
    budget : configs sampled and measured before ranking; the model is
        fine-tuned on them (and the baseline) from its loaded weights.
    top_k : configs the search measures after the baseline (and the sample); None: the
        strategy's default (`search.OneShot`: 5, `search.Adaptive`: 7). Ignored when `search`
        is a strategy object.
    fixed : how many of the first picks are the model's best fixed configs (`search.pick_top`).
    diversity : the first ranked picks differ pairwise in at least this many knobs (`space.diverse_top`);
        None: the platform's `Space.pick_distance` (1, the plain top-k, but on SPADE).
    search : the search strategy (`cognate_tvm.search`): "adaptive" (rounds of measure, fine-tune,
        re-rank), "oneshot" (one ranking, one batch), or a `SearchStrategy`.
    candidates : the configs to search among (default: `Space.candidates` of the backend's threads).
    oracle : also sweep the space (`measure_oracle`) to see how far the choice is from its best.
    """
    op = get_op(op)
    check_tune_options(feat=feat, top_k=top_k, budget=budget, fixed=fixed, diversity=diversity)
    strategy = search_strategies.create(search, **({} if top_k is None else {"measurements": top_k}))
    platform_space = space.create(backend.platform, op.name)
    baseline = platform_space.baseline()
    candidates = list(candidates) if candidates is not None else platform_space.candidates(backend.kernel_threads())
    sample = sample_configs(platform_space, budget, seed, candidates)
    # The baseline (and the sample) first: a target that cannot run fails here, before any model work.
    results = measure_configs(backend, op, matrix, [baseline] + sample, feat, seed=seed, progress=progress,
                              desc=f"baseline + sample of {len(sample)}" if sample else "baseline")
    notes: list[str] = []
    if model is None:
        model, model_source, notes = load_shipped_model(op, backend.platform, root=pretrained_root,
                                                        threads=backend.kernel_threads(),
                                                        hardware=backend.metadata())
    tuned = TuneResult(baseline=results[0], measured=results, predicted_rank=[], model=model,
                       model_source=model_source, sampled=len(sample), notes=notes,
                       diversity=platform_space.pick_distance if diversity is None else diversity)
    if sample:
        _finetune_on_sample(tuned, model, platform_space, name, matrix, feat)
    context = search_strategies.SearchContext(
        op=op, matrix=matrix, feat=feat, space=platform_space, model=model, measured=results, name=name,
        candidates=candidates,
        measure=lambda configs, desc: measure_configs(backend, op, matrix, configs, feat, seed=seed,
                                                      progress=progress, desc=desc),
        fixed=fixed, diversity=tuned.diversity)
    outcome = strategy.search(context)
    tuned.measured, tuned.predicted_rank, tuned.fixed = outcome.measured, outcome.predicted_rank, outcome.fixed
    tuned.model, tuned.finetuned = outcome.model, tuned.finetuned or outcome.finetuned
    tuned.search, tuned.rounds = strategy.name, outcome.rounds
    tuned.notes += outcome.notes
    choose(backend, op, matrix, tuned, feat, seed=seed)
    if oracle:
        tuned.oracle = measure_oracle(backend, op, matrix, platform_space, tuned, feat, seed=seed,
                                      sample=oracle_sample, progress=progress)
    return tuned


def _finetune_on_sample(tuned: TuneResult, model, platform_space: space.Space, name: str, matrix: sp.csr_matrix,
                        feat: int) -> None:
    """--budget: fine-tune `model` on the measured baseline and sample, when at least two of them ran."""
    group = measured_group(name, matrix, feat, tuned.measured)
    succeeded = int(np.isfinite(group.times_ms).sum())
    if succeeded >= 2:
        log.info("fine-tuning the model on %d measurements of %s", succeeded, name)
        model.finetune([group], space=platform_space)
        tuned.finetuned = True
    else:
        tuned.notes.append(f"only {succeeded} of {len(tuned.measured)} sampled configs ran; the model was not "
                           f"fine-tuned")
        log.warning(tuned.notes[-1])


def retime_finalists(backend: Backend, op: Op, matrix: sp.csr_matrix, tuned: TuneResult, feat: int, *,
                     seed: int = 0, finalists: int = FINALISTS, rounds: int = FINAL_ROUNDS) -> dict:
    """{config: its times over `rounds` side-by-side calls} of the baseline and the `finalists`
    fastest measured configs; `tuned.retimed` gets the medians of those that ran every round."""
    ok = sorted((r for r in tuned.measured if r.ok), key=lambda r: r.time_ms)[:finalists]
    configs = list(dict.fromkeys([tuned.baseline.config] + [r.config for r in ok]))
    if rounds < 1 or len(configs) < 2 or backend.deterministic:
        return {}
    per_round = measure_side_by_side(backend, op, matrix, configs, feat, rounds=rounds, seed=seed)
    times = {c: [r[c].time_ms if c in r and r[c].ok else None for r in per_round] for c in configs}
    tuned.retimed = {c: float(np.median(t)) for c, t in times.items() if None not in t}
    return times


def choose(backend: Backend, op: Op, matrix: sp.csr_matrix, tuned: TuneResult, feat: int, *, seed: int = 0,
           finalists: int = FINALISTS, rounds: int = FINAL_ROUNDS) -> None:
    """Re-time the finalists beside the baseline (`retime_finalists`); check the fastest one's output,
    timed once more beside the baseline; take the next if wrong.

    Sets `tuned.retimed`, `tuned.checked`, `tuned.confirmed` and `tuned.rejected`; each rejected
    config's entry in `tuned.measured` becomes a failure carrying the reason.
    """
    times = retime_finalists(backend, op, matrix, tuned, feat, seed=seed, finalists=finalists, rounds=rounds)
    # the re-timed finalists first (by median), then the rest by their measured times
    order = lambda r: (0, tuned.retimed[r.config]) if r.config in tuned.retimed else (1, r.time_ms)  # noqa: E731
    pick = pick_checked(backend, op, matrix, tuned.measured, feat, seed=seed, beside=tuned.baseline.config,
                        key=order)
    tuned.rejected = list(pick.rejected)
    reasons = {r.config: r for r in pick.rejected}
    tuned.measured = [MeasureResult(r.config, None, error=reasons[r.config].error,
                                    correct=reasons[r.config].correct, extra=r.extra)
                      if r.config in reasons else r for r in tuned.measured]
    if tuned.baseline.config in reasons:
        tuned.baseline = tuned.measured[0]
    for r in pick.rejected:
        tuned.notes.append(f"config {r.config.to_json()} rejected: {r.error}")
        log.warning(tuned.notes[-1])
    tuned.checked = pick.best
    if pick.best is None:
        return
    if pick.best.correct is None:
        tuned.notes.append(f"target {backend.target!r} computes no outputs: the chosen config's output "
                           f"was not checked")
    if pick.beside is not None and pick.beside.ok and pick.best.config != tuned.baseline.config:
        tuned.confirmed = tuple(_with_rounds(r, times.get(r.config)) for r in (pick.beside, pick.best))
        if pick.beside.correct is False:
            tuned.notes.append("the baseline config's output is wrong on this matrix; it is never chosen")


def _with_rounds(result: MeasureResult, round_times: list | None) -> MeasureResult:
    """`result` with its time the median of it and its side-by-side rounds' (those that ran)."""
    samples = [t for t in (round_times or []) if t is not None] + [result.time_ms]
    return MeasureResult(result.config, float(np.median(samples)), error=result.error, correct=result.correct,
                         extra=result.extra)


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


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def tune_report(tuned: TuneResult, *, op: str, target: str, feat: int, matrix_path, matrix: sp.csr_matrix,
                budget: int, top_k: int | None, fixed: int = DEFAULT_FIXED, vendor: dict | None = None,
                saved_model: str | None = None) -> dict:
    """The JSON form of a tuning run; every time in it was measured in this run."""
    best = tuned.best
    report = {
        "op": op, "target": target, "feat": feat, "matrix": matrix_report(matrix_path, matrix),
        "mode": "finetuned" if tuned.finetuned else "ranked",
        "model": tuned.model_source, "budget": budget, "fixed": fixed,
        "top_k": len(tuned.measured) - 1 - tuned.sampled if top_k is None else top_k,
        "search": tuned.search, "rounds": tuned.rounds,
        "diversity": tuned.diversity,
        "saved_model": saved_model,
        "samples_measured": len(tuned.measured),
        "failed": len(tuned.failed),
        "baseline": {"config": tuned.baseline.config.to_dict(), "time_ms": tuned.baseline.time_ms,
                     "error": tuned.baseline.error},
        "best": None if best is None else {
            "config": best.config.to_dict(), "time_ms": best.time_ms,
            "speedup_vs_baseline": _ratio(tuned.baseline.time_ms, best.time_ms),
            "predicted_rank": tuned.predicted_rank[tuned.measured.index(best)],
            "correct": tuned.checked.correct if tuned.checked is not None else None},
        "measured": [{"config": r.config.to_dict(), "time_ms": r.time_ms, "error": r.error, "correct": r.correct,
                      "predicted_rank": rank, "sampled": 0 < n <= tuned.sampled,
                      "best_fixed": r.config in tuned.fixed}
                     for n, (r, rank) in enumerate(zip(tuned.measured, tuned.predicted_rank))],
        "rejected": [{"config": r.config.to_dict(), "error": r.error} for r in tuned.rejected],
        "finalists": [{"config": c.to_dict(), "median_ms": t} for c, t in tuned.retimed.items()],
        "chosen": None if tuned.chosen is None else tuned.chosen.config.to_dict(),
        "confirmed": None if tuned.confirmed is None else {
            "baseline_ms": tuned.confirmed[0].time_ms, "best_ms": tuned.confirmed[1].time_ms,
            "speedup_vs_baseline": _ratio(tuned.confirmed[0].time_ms, tuned.confirmed[1].time_ms)},
        "notes": list(tuned.notes),
    }
    if tuned.oracle is not None:
        report["oracle"] = tuned.oracle.to_dict()
        report["oracle_fraction"] = tuned.oracle.fraction
    if vendor is not None:
        chosen_ms = chosen_time_ms(tuned)
        report["vendor"] = dict(vendor, speedup_vs_vendor=_ratio(vendor["time_ms"], chosen_ms))
    return report


def chosen_time_ms(tuned: TuneResult) -> float | None:
    """The chosen config's time: its side-by-side re-timing when there was one."""
    if tuned.chosen is None:
        return None
    if tuned.confirmed is not None:
        base, best = tuned.confirmed
        return best.time_ms if tuned.chosen.config == best.config else base.time_ms
    return tuned.chosen.time_ms


# -- writing kernels out -------------------------------------------------------------------

def write_kernel(backend: Backend, op: Op | str, config: space.Config, feat: int, directory: str | os.PathLike,
                 *, stem: str = "kernel") -> dict:
    """Write `config`'s kernel for `backend` under `directory` (`Backend.export_kernel`); returns what was
    written (file names). A target without kernels (a simulator) writes nothing and says so.
    """
    op = get_op(op)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return backend.export_kernel(op, config, feat, directory, stem)


def write_outputs(directory: str | os.PathLike, backend: Backend, op: Op | str, tuned: TuneResult, feat: int,
                  report: dict) -> dict:
    """--out: the chosen kernel, ``config.json`` (the config and how to call the kernel), ``report.json``."""
    op = get_op(op)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files: dict = {"report": "report.json"}
    if tuned.chosen is not None:
        kernel = write_kernel(backend, op, tuned.chosen.config, feat, directory)
        config = {"op": op.name, "target": backend.target, "platform": backend.platform, "feat": feat,
                  "config": tuned.chosen.config.to_dict(), "kernel": kernel}
        (directory / "config.json").write_text(json.dumps(config, indent=1))
        files.update({"config": "config.json", "kernel": kernel})
    report["out"] = {"directory": str(directory), "files": files}
    (directory / "report.json").write_text(json.dumps(report, indent=1))
    return files


def compile_top_k(op: Op | str, matrix: sp.csr_matrix, *, backend: Backend, feat: int, directory,
                  model=None, model_source: str | None = None, pretrained_root=None,
                  top_k: int = DEFAULT_TOP_K) -> dict:
    """Rank with the model and write the top-k kernels (sources, PTX) under `directory`, without timing.

    For a target that cannot run here (CUDA without a GPU). Returns the report
    (also written as ``report.json``).
    """
    op = get_op(op)
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    platform_space = space.create(backend.platform, op.name)
    notes: list[str] = []
    if model is None:
        model, model_source, notes = load_shipped_model(op, backend.platform, root=pretrained_root,
                                                        threads=backend.kernel_threads(),
                                                        hardware=backend.metadata())
    ranked = model.rank(matrix, platform_space.candidates(backend.kernel_threads()), space=platform_space,
                        feat=feat)[:top_k]
    directory = Path(directory)
    kernels = []
    for n, config in enumerate(ranked, start=1):
        try:
            written = write_kernel(backend, op, config, feat, directory, stem=f"top{n}")
            error = written.get("ptx_error")
        except Exception as exc:  # a config that fails to build is a result, not an abort
            written, error = {}, f"{type(exc).__name__}: {exc}"
        kernels.append({"predicted_rank": n, "config": config.to_dict(), "files": written, "error": error})
    report = {"op": op.name, "target": backend.target, "feat": feat, "model": model_source,
              "compile_only": True, "top_k": top_k, "kernels": kernels, "notes": notes,
              "out": {"directory": str(directory)}}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(report, indent=1))
    return report


__all__ = ["BATCH", "DEFAULT_BUDGET", "DEFAULT_TOP_K", "EXAMPLE_MATRIX", "ORACLE_SAMPLE", "ORACLE_WHOLE_SPACE",
           "OracleResult", "TuneResult", "check_tune_options", "choose", "fixed_candidates", "pick_top",
           "chosen_time_ms", "compile_top_k", "create_backend", "load_model", "load_shipped_model", "measure_configs", "measure_oracle",
           "measure_report", "oracle_configs", "sample_configs", "tune", "tune_report",
           "vendor_report", "write_kernel", "write_outputs"]
