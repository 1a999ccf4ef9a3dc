"""`tune`: pick the fastest correct config of an op on a matrix for a backend.

>>> from cognate_tvm import tuning                                          # doctest: +SKIP
>>> backend = tuning.create_backend("llvm")                                 # doctest: +SKIP
>>> remote = tuning.create_backend("cuda", arch="sm_90", rpc_tracker="HOST:9190", rpc_key="h200")  # doctest: +SKIP
>>> tuned = tuning.tune("spmm", A, backend=backend, feat=128)               # doctest: +SKIP
>>> tuned = tuning.tune("spmm", A, backend=backend, feat=128,
...                     options=tuning.TuneOptions(search="oneshot", budget=16))  # doctest: +SKIP
>>> tuned.chosen.config, tuned.confirmed                                    # doctest: +SKIP

The shipped model of the op and the backend's platform ranks the space's candidates for the
backend's kernel threads (`Space.candidates`: all configs but on the CPU, where parallel or serial
ones follow the thread count); a platform without a shipped model uses the CPU model zero-shot,
with a note (`model.load_shipped_model`). The baseline is measured, then the search strategy
(`tuning.search`) chooses what else to measure: by default (`search.Adaptive`) 7 configs in rounds
of 3, 2 and 2, the model fine-tuned (a copy, from its loaded weights) on this matrix's measurements
after each round and the candidates ranked again; ``search="oneshot"`` measures the first ranking's
top-k (5) in one batch. The first picks are `fixed` (1) of the model's best fixed configs (the ones
that did best over its training matrices, `pick_top`) and picks from the ranking that differ
pairwise in `Space.pick_distance` knobs (SPADE: 2; elsewhere 1, the plain ranking; `diversity`
overrides it); with ``budget=N`` a seeded sample of N candidates is measured first and the loaded
model is fine-tuned on it, from its pre-trained weights.
The fastest `FINALISTS` measured configs and the baseline are then timed again side by side
(`FINAL_ROUNDS` calls, order rotated; not on a simulator) and ranked by their medians
(`retime.retime_finalists`). The chosen config is the first of them whose output, checked once
against scipy, is right (`backends.base.pick_checked`; a wrong one is recorded as failed and the
next best is tried); that check runs beside the baseline, and the baseline is kept when the two
medians say it is no slower (`retime.choose`).
"""
from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from .. import space
from ..backends.base import Backend
from ..model.loading import load_shipped_model
from ..ops import Op, get_op
from . import search as search_strategies
from .measuring import measure_configs
from .options import TuneOptions
from .oracle import measure_oracle
from .result import TuneResult
from .retime import choose
from .search import measured_group, sample_configs

log = logging.getLogger(__name__)


def tune(op: Op | str, matrix: sp.csr_matrix, *, backend: Backend, feat: int = 128,
         options: TuneOptions | None = None) -> TuneResult:
    """Pick the fastest correct config of `op` on `matrix` for `backend` (see the module docstring);
    `options` (`TuneOptions`, default: the CLI's defaults) says how to search."""
    o = options if options is not None else TuneOptions()
    op = get_op(op)
    o.check(feat)
    strategy = search_strategies.create(o.search, **({} if o.top_k is None else {"measurements": o.top_k}))
    platform_space = space.create(backend.platform, op.name)
    baseline = platform_space.baseline()
    candidates = list(o.candidates) if o.candidates is not None \
        else platform_space.candidates(backend.kernel_threads())
    sample = sample_configs(platform_space, o.budget, o.seed, candidates)
    # The baseline (and the sample) first: a target that cannot run fails here, before any model work.
    results = measure_configs(backend, op, matrix, [baseline] + sample, feat, seed=o.seed, progress=o.progress,
                              desc=f"baseline + sample of {len(sample)}" if sample else "baseline")
    model, model_source, notes = o.model, o.model_source, []
    if model is None:
        model, model_source, notes = load_shipped_model(op, backend.platform, root=o.pretrained_root,
                                                        threads=backend.kernel_threads(),
                                                        hardware=backend.metadata())
    tuned = TuneResult(baseline=results[0], measured=results, predicted_rank=[], model=model,
                       model_source=model_source, sampled=len(sample), notes=notes,
                       diversity=platform_space.pick_distance if o.diversity is None else o.diversity)
    if sample:
        _finetune_on_sample(tuned, model, platform_space, o.name, matrix, feat)
    context = search_strategies.SearchContext(
        op=op, matrix=matrix, feat=feat, space=platform_space, model=model, measured=results, name=o.name,
        candidates=candidates,
        measure=lambda configs, desc: measure_configs(backend, op, matrix, configs, feat, seed=o.seed,
                                                      progress=o.progress, desc=desc),
        fixed=o.fixed, diversity=tuned.diversity)
    outcome = strategy.search(context)
    tuned.measured, tuned.predicted_rank, tuned.fixed = outcome.measured, outcome.predicted_rank, outcome.fixed
    tuned.model, tuned.finetuned = outcome.model, tuned.finetuned or outcome.finetuned
    tuned.search, tuned.rounds = strategy.name, outcome.rounds
    tuned.notes += outcome.notes
    choose(backend, op, matrix, tuned, feat, seed=o.seed)
    if o.oracle:
        tuned.oracle = measure_oracle(backend, op, matrix, platform_space, tuned, feat, seed=o.seed,
                                      sample=o.oracle_sample, progress=o.progress)
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
