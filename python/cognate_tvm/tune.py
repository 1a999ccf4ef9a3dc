"""Tune a sparse op on one matrix and one target: pick its fastest configuration.

    python -m cognate_tvm.tune {spmm,sddmm} [--target llvm|spade|cuda] [--matrix PATH] [--feat N]
        [--model PATH] [--budget N] [--top-k K] [--seed S] [--save-model PATH] [--vendor]
        [--json] [--quiet] [--arch sm_80|sm_90]

Two ways to tune (DESIGN.md, "Pipeline"):

- With ``--model PATH`` (a saved `CognateCostModel`, e.g. pre-trained on CPU
  data and fine-tuned on the target): the model ranks the whole space of the
  target's platform; the top-k configs and the baseline config are measured.
- Without it, few-shot tuning on this matrix alone: a seeded sample of
  ``--budget`` configs (the baseline always among them) is measured, a cost
  model is fitted on those measurements (`few_shot_model_config`), it ranks
  the configs not measured yet, and its top-k are measured. ``--save-model``
  writes the fitted model.

Either way the chosen config is the fastest *measured* one, and every time in
the output was measured in this run (the speedup is the baseline's measured
time over the chosen config's). A config that fails is reported with its error
and skipped. Without --matrix, the bundled example matrix is used. --json prints
one JSON object (see `build_report`); otherwise a short summary.
"""
from __future__ import annotations

import argparse
import json
import logging
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from . import space
from .backends.base import Backend, MeasureResult
from .errors import CognateError, ModelVersionError
from .matrix import load_matrix
from .measure import add_common_arguments, create_backend, measure_configs, vendor_report
from .ops import Op, get_op

log = logging.getLogger(__name__)

DEFAULT_BUDGET = 24  # few-shot: target measurements before the model ranks (the baseline included)
DEFAULT_TOP_K = 5    # configs measured from the model's ranking (DESIGN.md: top-5)


def few_shot_model_config():
    """Hyperparameters of the model fitted on one matrix's measurements.

    The defaults of `ModelConfig`, except that the featurizer is not trained:
    with a single matrix its embedding is one constant vector, so training it
    cannot help the ranking and only costs time (the embedding is computed once
    and cached instead).
    """
    from .model.config import ModelConfig

    return ModelConfig().replace(**{"train.train_featurizer": False})


@dataclass
class TuneResult:
    """What a tuning run measured.

    `measured` holds every target measurement in order; `predicted_rank[n]` is
    the 1-based position of config n in the model's ranking, or None for a
    config measured without a prediction (the few-shot sample).
    """

    baseline: MeasureResult
    measured: list[MeasureResult]
    predicted_rank: list[int | None]
    model: object | None = None
    notes: list[str] = field(default_factory=list)
    # (baseline, best) re-timed side by side after the choice, see `confirm`.
    confirmed: tuple[MeasureResult, MeasureResult] | None = None

    @property
    def best(self) -> MeasureResult | None:
        """The fastest successfully measured config (None if every config failed)."""
        ok = [r for r in self.measured if r.ok]
        return min(ok, key=lambda r: r.time_ms) if ok else None

    @property
    def chosen(self) -> MeasureResult | None:
        """The config to use: the best, unless re-timing shows it no faster than the baseline."""
        if self.confirmed is not None and self.confirmed[1].time_ms >= self.confirmed[0].time_ms:
            return self.baseline
        return self.best

    @property
    def failed(self) -> list[MeasureResult]:
        return [r for r in self.measured if not r.ok]


def tune_with_model(*, backend: Backend, platform_space: space.Space, model, matrix: sp.csr_matrix, feat: int,
                    top_k: int = DEFAULT_TOP_K, seed: int = 0, progress: bool = False) -> TuneResult:
    """Rank the whole space with `model`, measure the baseline and the top `top_k`."""
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    ranked = model.rank(matrix, platform_space.configs(), space=platform_space, feat=feat)
    rank_of = {config: n + 1 for n, config in enumerate(ranked)}
    baseline = platform_space.baseline()
    chosen = [baseline] + [c for c in ranked[:top_k] if c != baseline]
    results = measure_configs(backend, platform_space.op, matrix, chosen, feat, seed=seed, progress=progress,
                              desc=f"baseline + top-{top_k}")
    return TuneResult(baseline=results[0], measured=results,
                      predicted_rank=[rank_of.get(r.config) for r in results], model=model)


def few_shot_sample(platform_space: space.Space, budget: int, seed: int) -> list[space.Config]:
    """The baseline followed by `budget - 1` other configs drawn with `seed` (fewer if the space is smaller)."""
    if budget < 2:
        raise ValueError(f"budget must be >= 2 (the baseline and at least one more config), got {budget}")
    baseline = platform_space.baseline()
    drawn = [c for c in platform_space.sample(budget, seed) if c != baseline]
    return [baseline] + drawn[:budget - 1]


def tune_few_shot(*, backend: Backend, platform_space: space.Space, matrix: sp.csr_matrix, feat: int,
                  budget: int = DEFAULT_BUDGET, top_k: int = DEFAULT_TOP_K, seed: int = 0, model_config=None,
                  name: str = "matrix", progress: bool = False) -> TuneResult:
    """Measure a seeded sample, fit a cost model on it, measure the model's top `top_k` of the rest.

    Parameters
    ----------
    model_config : ModelConfig or None
        Hyperparameters of the fitted model (default `few_shot_model_config()`).
    name : the matrix's name in the training group (for logs).

    With fewer than two successful measurements in the sample there is nothing
    to learn a ranking from: no model is fitted and the result holds the sample
    only (with a note saying so).
    """
    from .data import Group
    from .model.cognate import CognateCostModel

    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    op = platform_space.op
    sample = few_shot_sample(platform_space, budget, seed)
    results = measure_configs(backend, op, matrix, sample, feat, seed=seed, progress=progress,
                              desc=f"sample of {len(sample)}")
    ranks: list[int | None] = [None] * len(results)
    group = Group(name=name, matrix=matrix, feat=feat, configs=tuple(r.config for r in results),
                  times_ms=np.array([r.time_ms if r.ok else np.nan for r in results], dtype=np.float64))
    tuned = TuneResult(baseline=results[0], measured=results, predicted_rank=ranks)
    succeeded = int(np.isfinite(group.times_ms).sum())
    if succeeded < 2:
        tuned.notes.append(f"only {succeeded} of {len(results)} sampled configs ran; no model was fitted")
        log.warning(tuned.notes[-1])
        return tuned
    model = CognateCostModel(model_config or few_shot_model_config(), seed=seed, progress=progress)
    log.info("fitting the cost model on %d measurements of %s", succeeded, name)
    model.fit([group], space=platform_space)
    tuned.model = model
    measured = set(sample)
    rest = [c for c in platform_space.configs() if c not in measured]
    if not rest:
        tuned.notes.append("the sample covered the whole space; nothing left to rank")
        return tuned
    top = model.top_k(matrix, rest, min(top_k, len(rest)), space=platform_space, feat=feat)
    more = measure_configs(backend, op, matrix, top, feat, seed=seed, progress=progress, desc=f"top-{len(top)}")
    tuned.measured += more
    tuned.predicted_rank += list(range(1, len(more) + 1))
    return tuned


def confirm(backend: Backend, op: Op, matrix: sp.csr_matrix, tuned: TuneResult, feat: int, *,
            seed: int = 0) -> None:
    """Re-time the baseline and the chosen config side by side (sets `tuned.confirmed`).

    The chosen config is the minimum over many noisy timings, so its own time is
    biased low; the speedup printed comes from this fresh, paired measurement.
    """
    best = tuned.best
    if best is None or not tuned.baseline.ok or best.config == tuned.baseline.config:
        return
    again = backend.measure(op, matrix, [tuned.baseline.config, best.config], feat, seed=seed)
    if all(r.ok for r in again):
        tuned.confirmed = (again[0], again[1])


def load_model(path: str | Path):
    """A saved CognateCostModel; unreadable files raise ValueError naming `path`."""
    from .model.cognate import CognateCostModel

    try:
        return CognateCostModel.load(path)
    except (ModelVersionError, FileNotFoundError):
        raise
    except (OSError, RuntimeError, EOFError, KeyError, TypeError, ValueError, pickle.UnpicklingError) as exc:
        raise ValueError(f"cannot read the model in {path}: {type(exc).__name__}: {exc}") from None


def run(args: argparse.Namespace) -> tuple[dict, TuneResult]:
    """Tune as the command line says; returns the report (see `build_report`) and the raw result."""
    op = get_op(args.op)
    if args.feat < 1:
        raise ValueError(f"--feat must be >= 1, got {args.feat}")
    if args.top_k < 1:
        raise ValueError(f"--top-k must be >= 1, got {args.top_k}")
    if args.model is None and args.budget < 2:
        raise ValueError(f"--budget must be >= 2 (the baseline and at least one more config), got {args.budget}")
    if args.model is not None and args.save_model is not None:
        raise ValueError("--save-model saves the model fitted by few-shot tuning; it cannot be used with --model")
    matrix = load_matrix(args.matrix)
    model = load_model(args.model) if args.model is not None else None
    backend = create_backend(args)
    platform_space = space.create(backend.platform, op.name)
    progress = not args.quiet
    if model is not None:
        tuned = tune_with_model(backend=backend, platform_space=platform_space, model=model, matrix=matrix,
                                feat=args.feat, top_k=args.top_k, seed=args.seed, progress=progress)
    else:
        tuned = tune_few_shot(backend=backend, platform_space=platform_space, matrix=matrix, feat=args.feat,
                              budget=args.budget, top_k=args.top_k, seed=args.seed,
                              name=Path(args.matrix).stem, progress=progress)
        if args.save_model is not None:
            if tuned.model is None:
                raise ValueError(f"no model was fitted, nothing to save to {args.save_model}: {tuned.notes[-1]}")
            tuned.model.save(args.save_model)
    confirm(backend, op, matrix, tuned, args.feat, seed=args.seed)
    vendor = vendor_report(backend, op, matrix, args.feat, args.seed) if args.vendor else None
    return build_report(args, matrix, tuned, vendor), tuned


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def build_report(args, matrix: sp.csr_matrix, tuned: TuneResult, vendor: dict | None) -> dict:
    """The JSON form of a tuning run; every time in it was measured in this run."""
    best = tuned.best
    report = {
        "op": args.op, "target": args.target, "feat": args.feat,
        "matrix": {"path": str(args.matrix), "rows": matrix.shape[0], "cols": matrix.shape[1],
                   "nnz": int(matrix.nnz)},
        "mode": "model" if args.model is not None else "few_shot",
        "model": str(args.model) if args.model is not None else None,
        "saved_model": str(args.save_model) if args.save_model is not None else None,
        "samples_measured": len(tuned.measured),
        "failed": len(tuned.failed),
        "baseline": {"config": tuned.baseline.config.to_dict(), "time_ms": tuned.baseline.time_ms,
                     "error": tuned.baseline.error},
        "best": None if best is None else {
            "config": best.config.to_dict(), "time_ms": best.time_ms,
            "speedup_vs_baseline": _ratio(tuned.baseline.time_ms, best.time_ms),
            "predicted_rank": tuned.predicted_rank[tuned.measured.index(best)]},
        "measured": [{"config": r.config.to_dict(), "time_ms": r.time_ms, "error": r.error,
                      "predicted_rank": rank} for r, rank in zip(tuned.measured, tuned.predicted_rank)],
        "chosen": None if tuned.chosen is None else tuned.chosen.config.to_dict(),
        "confirmed": None if tuned.confirmed is None else {
            "baseline_ms": tuned.confirmed[0].time_ms, "best_ms": tuned.confirmed[1].time_ms,
            "speedup_vs_baseline": _ratio(tuned.confirmed[0].time_ms, tuned.confirmed[1].time_ms)},
        "notes": list(tuned.notes),
    }
    if vendor is not None:
        best_ms = tuned.confirmed[1].time_ms if tuned.confirmed else (best.time_ms if best else None)
        report["vendor"] = dict(vendor, speedup_vs_vendor=_ratio(vendor["time_ms"], best_ms))
    return report


def format_summary(report: dict) -> str:
    """A few readable lines: the chosen config, its time, the baseline's, the speedups."""
    m, best, base = report["matrix"], report["best"], report["baseline"]
    how = (f"top-k of the model {report['model']}" if report["mode"] == "model"
           else "few-shot: a seeded sample, then the top-k of a model fitted on it")
    lines = [f"{report['op']} on {report['target']}: {m['rows']}x{m['cols']}, nnz={m['nnz']}, "
             f"feat={report['feat']} ({how})"]
    if best is None:
        lines.append("no configuration could be measured")
    else:
        rank = best["predicted_rank"]
        lines.append(f"best      {best['time_ms']:.4f} ms  {json.dumps(best['config'], sort_keys=True)}"
                     + (f"  (predicted rank {rank})" if rank is not None else "  (from the sample)"))
    if base["time_ms"] is not None:
        lines.append(f"baseline  {base['time_ms']:.4f} ms  {json.dumps(base['config'], sort_keys=True)}")
    else:
        lines.append(f"baseline  failed: {base['error']}")
    if best is not None and report["chosen"] != best["config"]:
        lines.append("chosen: the baseline (re-timed side by side, the best measured config was no faster)")
    if report["confirmed"] is not None:
        c = report["confirmed"]
        lines.append(f"speedup over the baseline: {c['speedup_vs_baseline']:.2f}x (re-timed side by side: "
                     f"baseline {c['baseline_ms']:.4f} ms, best {c['best_ms']:.4f} ms)")
    elif best is not None and best["speedup_vs_baseline"] is not None:
        lines.append(f"speedup over the baseline: {best['speedup_vs_baseline']:.2f}x")
    if "vendor" in report:
        v = report["vendor"]
        speed = f", speedup over it: {v['speedup_vs_vendor']:.2f}x" if v["speedup_vs_vendor"] else ""
        lines.append(f"vendor {v['name']} ({v['method']}): {v['time_ms']:.4f} ms{speed}")
    lines.append(f"target measurements: {report['samples_measured']} ({report['failed']} failed)")
    for r in report["measured"]:
        if r["error"]:
            lines.append(f"  failed {json.dumps(r['config'], sort_keys=True)}: {r['error']}")
    lines += [f"note: {n}" for n in report["notes"]]
    if report["saved_model"]:
        lines.append(f"model saved to {report['saved_model']}")
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cognate_tvm.tune", description=__doc__.split("\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--model", type=Path, default=None,
                        help="a saved cost model: rank the whole space with it (default: few-shot tuning)")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET,
                        help=f"few-shot: configs sampled and measured before ranking, the baseline included "
                             f"(default {DEFAULT_BUDGET})")
    parser.add_argument("--top-k", type=int, default=DEFAULT_TOP_K,
                        help=f"configs measured from the model's ranking (default {DEFAULT_TOP_K})")
    parser.add_argument("--save-model", type=Path, default=None, help="few-shot: save the fitted model here")
    parser.set_defaults(compile_only=False)  # read by measure.backend_options; tuning needs real runs
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 tuned, 1 no config could be measured, 2 bad input."""
    args = make_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        report, _ = run(args)
    except (CognateError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1) if args.json else format_summary(report))
    if report["best"] is None:
        first = report["measured"][0]["error"] if report["measured"] else "nothing was measured"
        print(f"error: no configuration could be measured (first error: {first})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
