"""CPU -> SPADE transfer at the paper's protocol (issue 10), for SpMM and SDDMM.

    python benchmarks/transfer.py --size full --data-root DATA \\
        --cpu-data 'DATA/cpu_{op}' --cpu-corpus synthetic:300:2026 --out docs/results [--ablations] [--ship]
    python benchmarks/transfer.py --size ci --out /tmp/transfer      # CI: < 10 min, asserts no thresholds

Source: the shipped pre-trained CPU model (`load_pretrained(op, "cpu")`, or
``--cpu-model pretrain`` / a saved model directory). Target: SPADE configs
simulated by the C++ model (`backends.create("spade")`) at dense width 32, the
width of the CPU data, on two generated corpora (resumable datasets under
``--data-root``):

- the *evaluation* corpus (``eval_corpus``, 1k-1M rows, all families, all 256
  configs): validation (``val_matrices``, one seeded draw per nnz stratum, of
  which a fixed seeded sample of ``val_configs`` configs is used) and test (the rest);
- the *pool* (``pool_corpus``, 1k-100k rows, ``pool_configs`` sampled configs +
  the baseline per matrix): the target training matrices. For each seed, a
  seeded permutation of the pool gives the n matrices of NTn (the first n) and
  the k fine-tune matrices of TLk (the first k: nested), or, with
  ``--finetune-draw stratified``, one seeded draw per nnz stratum of the pool, or, with
  ``--finetune-draw diverse``, the matrix nearest each centre of a seeded k-means of the
  source model's matrix embeddings (free: no simulation chooses them), or, with
  ``diverse-largest``, each k-means cluster's matrix with the most nonzeros. NTn trains on
  TLn's matrices where TL has that size. ``--finetune-include NAME ...`` puts pool
  matrices into every draw (the draw picks the rest).

Every learned method sees the same validation data, which counts in its target
samples; validation makes every choice (test is only scored):

- COGNATE TLk: the shipped CPU model fine-tuned on k matrices; validation
  (``select_metric``, pair accuracy by default) picks the recipe among "no fine-tuning", (frozen parts) x (lr) of
  ``freezes`` x ``lrs``, and "head re-initialized" x ``reinit_lrs`` (the config embedding and score head
  re-drawn, so only the featurizer and the knob encoders carry the pre-training: the recipe for a source
  whose costs rank configs unlike the target's), and the epoch (early stopping: best epoch kept);
  ``--anchors`` adds L2-SP strengths (pull toward the pre-trained weights) to the grid;
  ``--target-knob-encoder pad`` gives it (and NTn) raw SPADE knobs instead of a latent encoder;
- NTn: the same network trained on n target matrices only (lr from ``nt_lrs``
  and the epoch chosen on validation);
- WACO+FA (no mapper: raw config fields, no knobs) and WACO+FM (mapper, raw
  knobs instead of latent encoders): their config embedding and head are
  pre-trained on the same CPU data over the shipped model's (frozen)
  featurizer, then fine-tuned on the TL5 matrices with COGNATE's recipe grid;
- XGBoost: fit on the CPU data, then ``xgb_rounds`` more boosting rounds on the
  TL5 matrices (validation picks the count, 0 included);
- zero-shot (CPU model + SPADE knob encoder), random-k (k random configs per
  test matrix: the same number of measurements as top-k), the best fixed
  config chosen on the TL5 matrices, and the oracle.

``--refit``: once validation has chosen a recipe and its epoch, each learned method is
trained again with them on its target training matrices and the validation matrices
together (the samples it already counts), and the best fixed config is chosen on both
(docs/transfer.md, runs J and K: it helps TL5, and can collapse beyond with no data left
to stop it). A refit that ranks the matrices it was trained on worse than the validated
model does is rejected, and the validated model kept (`guarded_refit`).

``--ensemble-sizes 1 2 3 5``: validation may choose, per learned method and seed, to score with the
mean of the standardized scores of its grid's m best models (`RankEnsemble`) instead of the best one;
a larger m must validate strictly better. With ``--refit`` each member is refit (and guarded) on its
own. Default 1: no ensembles (docs/transfer.md, run T: it narrows the worst case, not the gap).

``--target-loss listwise``: every network trained on SPADE data uses ListNet's loss, which weighs each
matrix's fastest configs (``--listwise-temperature``), instead of its source model's own (the shipped
CPU models': slowdown). ``--audit-grid``: every grid point of TLk and NTn is also scored on the test
matrices after validation has chosen (recorded, never used for a choice): what a perfect choice among
the grid would reach (docs/transfer.md, run U).

``--ablations`` adds, at k = 5: the COGNATE network re-pre-trained like the
WACO variants (the reference they compare with), without the mapper, with a
random-permutation mapping, without the latent encoder (platform knobs
dropped), with the featurizer trained during fine-tuning, and pre-trained from
scratch on 5 / 20 / 100 / 300 CPU matrices (``source_sizes``).

Beside the plain top-5, the tables show the diverse top-5: the best of the 5 configs
that `tune` measures from a ranking (`space.diverse_top`, SPADE's `pick_distance`).

Outputs under ``--out``: ``transfer_<op>.json`` (everything: params, headroom,
per-seed and per-matrix results), ``transfer_<op>.md`` (tables, mean ± std over
seeds), ``transfer_<op>_per_matrix.png`` (per-matrix sorted speedups, the
paper's Figure 5) and ``transfer_<op>_efficiency.png`` (target samples vs
top-1 fraction of the oracle, TL vs NT). ``--ship`` writes the TL5 model of
the first seed to ``<pretrained root>/<op>-spade`` with a MODEL_CARD.md.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from cognate_tvm import backends, baselines
from cognate_tvm.collect import config_sample
from cognate_tvm.data import (Group, collect, groups_from_frame, load_frame, pick_across_sizes, pick_diverse, select,
                              split_by_matrix)
from cognate_tvm.matrix.corpus import load_corpus
from cognate_tvm.metrics import evaluate_group, summarize
from cognate_tvm.model import ModelConfig
from cognate_tvm.model.cognate import CognateCostModel, RankingModel
from cognate_tvm.model.ensemble import RankEnsemble
from cognate_tvm.model.pretrained import CARD_FILE, PRETRAINED_DIR, load_pretrained, pretrained_path
from cognate_tvm.space import create as create_space
from cognate_tvm.train import LOSSES

logger = logging.getLogger("transfer")


@dataclass(frozen=True)
class Params:
    """Every size and choice of the experiment (``--size`` picks one of `SIZES`)."""

    ops: tuple[str, ...] = ("spmm", "sddmm")
    feat: int = 32
    data_seed: int = 0              # seeds the config samples (as `python -m cognate_tvm.collect --seed`)
    chunk: int = 25                 # configs per Parquet part
    eval_corpus: str = "synthetic:40:1101"
    eval_min_rows: int = 1000
    eval_max_rows: int = 1_000_000
    pool_corpus: str = "synthetic:1000:1102"
    pool_min_rows: int = 1000
    pool_max_rows: int = 100_000
    pool_configs: int = 100
    split_seed: int = 0
    val_matrices: int = 5
    val_configs: int = 100
    ks: tuple[int, ...] = (3, 5, 7)
    nt_sizes: tuple[int, ...] = (5, 100, 1000)
    seeds: tuple[int, ...] = (0, 1, 2)
    top_k: int = 5
    # which pool matrices TLk (and the k = 5 baselines) fine-tune on, per seed: "random" (the first k of a
    # seeded permutation: nested, the paper's draw) or "stratified" (one seeded draw per nnz stratum of the pool)
    finetune_draw: str = "random"
    finetune_include: tuple[str, ...] = ()  # pool matrices every draw holds (`finetune_draw`'s `include`)
    # what every recipe choice (grid point, epoch) maximises on validation: "pair_accuracy" or
    # "top1_fraction". Pair accuracy: over 5 validation matrices it averages ~25k pairs, top-1 only
    # 5 picks, too few to choose among 9 recipes x up to 150 epochs.
    select_metric: str = "pair_accuracy"
    # after validation has chosen a recipe and its epoch, train that recipe again on the fine-tune and
    # validation matrices together: every learned method already counts the validation samples as target
    # samples, and with 5 fine-tune matrices the matrices seen decide more than the recipe (run H)
    refit: bool = False
    # the target platform's knob encoder (ModelConfig.knob_encoder): "latent" (COGNATE's autoencoder) or
    # "pad" (the raw knobs, zero-padded: WACO+FM's). The CPU model keeps its own; NTn and the ablations'
    # re-pre-trained reference use this one too (run O, docs/transfer.md)
    target_knob_encoder: str = "latent"
    # the recipe grids of run G (docs/transfer.md): run E's (60 epochs, lrs 1e-4..2e-3; NT 40 epochs,
    # 1e-3/3e-3) had validation choose the largest lr and last epochs in nearly every fit
    finetune_epochs: int = 150
    lrs: tuple[float, ...] = (5e-4, 2e-3, 5e-3)
    freezes: tuple[tuple[str, ...], ...] = (("featurizer",), ("featurizer", "config"))
    reinit_lrs: tuple[float, ...] = (3e-3, 1e-2)  # "head re-initialized" recipes (() = none)
    # L2-SP strengths of the fine-tuning recipes (TrainConfig.finetune_anchor): 0 = plain fine-tuning
    anchors: tuple[float, ...] = (0.0,)
    # sizes m among which validation chooses to score with the mean of a grid's m best models (RankEnsemble)
    # instead of its best one; (1,): no ensembles
    ensemble_sizes: tuple[int, ...] = (1,)
    # the loss of every network trained on target data (TLk, NTn, WACO+FA/FM, the ablations): None keeps the
    # CPU model's own (the shipped ones: "slowdown"); or "pairwise", "slowdown", "listwise" (ListNet: weight
    # on each matrix's fastest configs, run U)
    target_loss: str | None = None
    listwise_temperature: float = 0.1  # TrainConfig.listwise_temperature of the "listwise" loss
    nt_epochs: int = 100
    nt_lrs: tuple[float, ...] = (3e-3, 1e-2)
    xgb_rounds: tuple[int, ...] = (0, 25, 100, 300)
    pretrain_epochs: int = 30       # WACO variants / ablations: CPU pre-training of config embedding + head
    source_sizes: tuple[int, ...] = (5, 20, 100, 300)
    source_epochs: int = 10         # source-size ablation: pre-training from scratch, featurizer end to end
    featurizer_epochs: int = 20     # ablation "featurizer trained in fine-tuning" (each epoch re-embeds)
    featurizer_lrs: tuple[float, ...] = (5e-4,)
    # CPU data collected by this benchmark when no --cpu-data is given (llvm, 1 thread)
    cpu_corpus: str = "synthetic:16:2031"
    cpu_min_rows: int = 1000
    cpu_max_rows: int = 8000
    cpu_configs: int = 12
    threads: int = 2


SIZES = {
    # pytest: tiny everything, one seed (< 60 s with a warm kernel cache)
    "test": Params(chunk=128, eval_corpus="synthetic:9:1101", eval_min_rows=300, eval_max_rows=3000,
                   pool_corpus="synthetic:10:1102", pool_min_rows=300, pool_max_rows=2000, pool_configs=24,
                   val_matrices=2, val_configs=40, ks=(3, 5), nt_sizes=(5, 10), seeds=(0,), finetune_epochs=3,
                   lrs=(1e-3,), freezes=(("featurizer",),), reinit_lrs=(1e-3,), nt_epochs=3, nt_lrs=(1e-3,), xgb_rounds=(0, 5),
                   pretrain_epochs=2, source_epochs=2, featurizer_epochs=2, source_sizes=(1, 3),
                   cpu_corpus="synthetic:4:2031", cpu_min_rows=300, cpu_max_rows=1500, cpu_configs=3),
    # CI: the whole protocol at small scale, < 10 min on 2 cores
    "ci": Params(eval_corpus="synthetic:24:1101", eval_max_rows=200_000, pool_corpus="synthetic:120:1102",
                 pool_max_rows=30_000, nt_sizes=(5, 30, 120), finetune_epochs=30, lrs=(5e-4, 2e-3),
                 reinit_lrs=(1e-3, 3e-3), nt_epochs=20, nt_lrs=(1e-3,), xgb_rounds=(0, 50), pretrain_epochs=10,
                 source_epochs=5, source_sizes=(5, 16)),
    "full": Params(),
}

LABELS = {"zero_shot": "zero-shot (CPU model only)", "waco_fa": "WACO+FA", "waco_fm": "WACO+FM",
          "xgboost": "XGBoost", "random": "random-k", "best_fixed": "best fixed config (TL5 matrices)",
          "oracle": "oracle", "abl_reference": "COGNATE, head re-pre-trained (reference)",
          "abl_no_mapper": "no mapper (= WACO+FA)", "abl_random_mapping": "random-permutation mapping",
          "abl_no_latent": "no latent encoder (knobs dropped)", "abl_raw_knobs": "raw knobs (= WACO+FM)",
          "abl_featurizer_trained": "featurizer trained in fine-tuning"}
COLUMNS = (("speedup_top1", "top-1 speedup"), ("speedup_topk", "top-5 speedup"),
           ("oracle_fraction_top1", "top-1 / oracle"), ("oracle_fraction_topk", "top-5 / oracle"),
           ("oracle_fraction_topk_diverse", "diverse top-5 / oracle"),
           ("ape_top1", "APE %"), ("pair_accuracy", "pair acc."), ("kendall_tau", "Kendall tau"))


def label(method: str) -> str:
    if method.startswith("tl"):
        return f"COGNATE TL{method[2:]}"
    if method.startswith("nt"):
        return f"NT{method[2:]}"
    if method.startswith("abl_source_"):
        return f"CPU source: {method.rsplit('_', 1)[1]} matrices"
    return LABELS.get(method, method)


# -- data ---------------------------------------------------------------------------------------
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
    no seed fine-tunes on small matrices only (run E's seed 2 drew five of <= 11.6k rows and lost its
    picks on the large test matrices), or the k matrices that cover the source model's matrix
    embeddings (`embed`: matrix -> vector), one per seeded k-means cluster: the one nearest its centre
    ("diverse") or the one with the most nonzeros ("diverse-largest": where the choice matters most).

    `include`: pool matrices (names) that every draw holds: they come first, and the draw picks the
    other k - len(include) from the rest of the pool (a user who must cover a matrix, or run N's probe
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


def cpu_source(op: str, params: Params, args, out: Path, *, progress: bool):
    """(train, validation) CPU groups: the given dataset, or one this benchmark measures itself."""
    cpu = create_space("cpu", op)
    if args.cpu_data:
        path, spec = Path(str(args.cpu_data).format(op=op)), args.cpu_corpus
        entries = load_corpus(spec, min_rows=args.cpu_min_rows, max_rows=args.cpu_max_rows)
    else:
        from cognate_tvm.backends.cpu import LLVMBackend

        path, spec = out / f"cpu_{op}", params.cpu_corpus
        entries = load_corpus(spec, min_rows=params.cpu_min_rows, max_rows=params.cpu_max_rows)
        llvm = LLVMBackend(num_threads=1, cache_dir=args.kernel_cache, warmup=0, repeats=2, min_seconds=0.001)
        pool = cpu.sample_covering(max(16, 2 * params.cpu_configs), seed=params.data_seed)  # >= every knob value
        configs = {e.name: config_sample(cpu, params.cpu_configs, params.data_seed, e.name, pool) for e in entries}
        collect(llvm, op, entries, configs, path, feat=params.feat, seed=params.data_seed, progress=progress)
    frame = load_frame(path)
    frame = frame[(frame["op"] == op) & (frame["platform"] == "cpu")]
    known = {e.name: e for e in entries}
    if not frame["matrix"].isin(known).any():
        # the corpus draws each matrix's size from [min, max] rows: other bounds name other matrices
        raise ValueError(f"none of the {frame['matrix'].nunique()} matrices of the CPU data in {path} is in the "
                         f"corpus {spec} with {args.cpu_min_rows}-{args.cpu_max_rows} rows: give --cpu-corpus, "
                         "--cpu-min-rows and --cpu-max-rows as the data was collected")
    frame = frame[frame["matrix"].isin(known)]
    groups = [g for g in groups_from_frame(frame, space=cpu, matrices=known, op=op) if len(g.configs) >= 2]
    train_names, val_names, _ = split_by_matrix([g.name for g in groups], seed=0)  # pretrain.py's split
    order = {name: n for n, name in enumerate(train_names)}
    train = sorted(select(groups, train_names), key=lambda g: order[g.name])
    return train, select(groups, val_names), {"path": str(path), "corpus": spec, "matrices": len(groups),
                                              "measurements": int(len(frame))}


# -- models -------------------------------------------------------------------------------------
def evaluate_groups(model: RankingModel, groups: Sequence[Group], space, k: int) -> tuple[dict, list[dict]]:
    """Summary metrics (`cognate_tvm.metrics.summarize`) and per-group picks of `model` on `groups`; the
    diverse top-k is the k that `tune` measures from the ranking (`space.pick_distance` knobs apart)."""
    results, rows = [], []
    base = space.baseline()
    for g in groups:
        configs = list(g.configs)
        baseline_ms = float(g.times_ms[configs.index(base)])
        scores = np.asarray(model.predict(g.matrix, configs, space=space, feat=g.feat), dtype=np.float64)
        r = evaluate_group(g.times_ms, scores, baseline_ms=baseline_ms, k=k, configs=configs,
                           min_distance=space.pick_distance)
        results.append(r)
        rows.append({"matrix": g.name, "nnz": int(g.matrix.nnz), "baseline_ms": r.baseline_ms,
                     "oracle_ms": r.oracle_ms, "top1_ms": r.top1_ms, "topk_ms": r.topk_ms,
                     "topk_diverse_ms": r.topk_diverse_ms})
    return summarize(results), rows


class OracleRanker(RankingModel):
    """Scores = the measured times: the best config of each group first (the upper bound)."""

    name = "oracle"

    def __init__(self, groups: Sequence[Group]):
        from cognate_tvm.data import matrix_hash

        self.times = {(matrix_hash(g.matrix), g.feat, c.to_json()): t
                      for g in groups for c, t in zip(g.configs, g.times_ms)}
        self._hash = matrix_hash

    def fit(self, groups, *, space):
        return self

    def finetune(self, groups, *, space):
        return self

    def predict(self, matrix, configs, *, space, feat):
        key = self._hash(matrix)
        return np.array([self.times[(key, feat, c.to_json())] for c in configs], dtype=np.float64)


def samples(groups: Sequence[Group]) -> int:
    return int(sum(len(g.configs) for g in groups))


def val_score(model: RankingModel, val: Sequence[Group], space, k: int) -> dict:
    summary, _ = evaluate_groups(model, val, space, k)
    return summary


def shown_path(path: str) -> str:
    """`path` relative to the working directory when inside it: cards name no machine's paths."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# train.select_metric names -> evaluate_groups summary keys
SUMMARY_KEY = {"pair_accuracy": "pair_accuracy", "top1_fraction": "oracle_fraction_top1"}


def best_epoch(model: CognateCostModel, phase_rows: int) -> int | None:
    metric = f"val_{model.config.train.select_metric}"
    rows = [r for r in model.history[-phase_rows:] if metric in r] if phase_rows else []
    return max(rows, key=lambda r: r[metric])["epoch"] if rows else None


def reinitialized(base: CognateCostModel, seed: int) -> CognateCostModel:
    """A copy of `base` whose config embedding and score head are re-drawn (seeded); the featurizer and the
    knob encoders keep their weights."""
    import torch

    model = copy.deepcopy(base)
    torch.manual_seed(seed)
    for part in (model.net.config_embedding, model.net.head):
        for module in part.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
    return model


def target_loss(params: Params) -> dict:
    """The TrainConfig changes that give a network trained on target data the run's loss (none: the source's)."""
    if params.target_loss is None:
        return {}
    return {"train.loss": params.target_loss, "train.listwise_temperature": params.listwise_temperature}


def finetune_on_validation(base: CognateCostModel, finetune: Sequence[Group], val: Sequence[Group], spade,
                           params: Params, seed: int, freezes=None,
                           audit: Sequence[Group] = ()) -> tuple[CognateCostModel, dict]:
    """Fine-tune copies of `base` with every recipe of the grid; keep the best on validation (`params.select_metric`).

    The grid: no fine-tuning; (frozen parts) x lr; with the default `freezes`, also the
    head re-initialized (featurizer frozen) x ``reinit_lrs``.
    """
    base.encoder_for(spade)  # the SPADE knob encoder: unsupervised, trained once on the whole space
    grid = [(("everything",), 0.0, 0, False, 0.0)] + [
        (tuple(f), lr, params.finetune_epochs, False, anchor)
        for f in (params.freezes if freezes is None else freezes) for lr in params.lrs for anchor in params.anchors]
    if freezes is None:  # a re-drawn head has no pre-trained weights to anchor to
        grid += [(("featurizer",), lr, params.finetune_epochs, True, 0.0) for lr in params.reinit_lrs]

    def train(freeze, lr, epochs, reinit, anchor, groups, val_groups=None) -> CognateCostModel:
        model = reinitialized(base, seed) if reinit else copy.deepcopy(base)
        model.seed = seed
        model.config = model.config.replace(**{"train.finetune_anchor": anchor, **target_loss(params)})
        if epochs:
            model.finetune(groups, space=spade, freeze=freeze, epochs=epochs, lr=lr, val_groups=val_groups)
        return model

    tried = []
    for freeze, lr, epochs, reinit, anchor in grid:
        model = train(freeze, lr, epochs, reinit, anchor, finetune, val)
        metrics = val_score(model, val, spade, params.top_k)
        tried.append((model, {"freeze": list(freeze), "lr": lr, "epochs_max": epochs, "head_reinitialized": reinit,
                              "anchor": anchor, "epoch_kept": best_epoch(model, epochs), "val": metrics}))

    def refit(model, recipe):
        if not (params.refit and epochs_trained(recipe)):
            return model, recipe
        again = train(tuple(recipe["freeze"]), recipe["lr"], epochs_trained(recipe), recipe["head_reinitialized"],
                      recipe["anchor"], [*finetune, *val])
        model, guard = guarded_refit(model, again, [*finetune, *val], spade, params)
        return model, {**recipe, **guard}

    return chosen_on_validation(tried, refit, val, spade, params, audit)


def chosen_on_validation(tried: list[tuple[RankingModel, dict]], refit, val: Sequence[Group], spade,
                         params: Params, audit: Sequence[Group] = ()) -> tuple[RankingModel, dict]:
    """The grid's best model on validation, or the mean of its m best (`RankEnsemble`) where validation prefers it.

    `tried`: (model, recipe) in grid order, each recipe with its validation metrics under "val". The sizes m
    are `params.ensemble_sizes`; a larger ensemble must validate strictly better than every smaller one (so
    with sizes (1,), the default, this is the grid's first best model, as before ensembles existed). Each
    member then goes through `refit` ((model, recipe) -> (model, recipe)). The returned recipe is the best
    member's, with the choice's validation metrics, the ensemble size and, for m > 1, every member's recipe.

    `audit` (`--audit-grid`): matrices on which every grid point is also scored, under "audit" in its
    recipe, after the choice is made and never read by it: what a perfect choice among the grid could reach.
    """
    key = SUMMARY_KEY[params.select_metric]
    # stable: ties keep grid order; a NaN validation score ranks last
    ranked = sorted(tried, key=lambda t: -t[1]["val"][key] if np.isfinite(t[1]["val"][key]) else np.inf)
    size, metrics = 1, ranked[0][1]["val"]
    for m in sorted({m for m in params.ensemble_sizes if 1 < m <= len(ranked)}):
        candidate = val_score(RankEnsemble([model for model, _ in ranked[:m]]), val, spade, params.top_k)
        if candidate[key] > metrics[key]:
            size, metrics = m, candidate
    members = [refit(model, recipe) for model, recipe in ranked[:size]]
    grid = [recipe for _, recipe in tried]
    if audit:
        grid = [{**recipe, "audit": audit_metrics(model, audit, spade, params)} for model, recipe in tried]
    model = members[0][0] if size == 1 else RankEnsemble([model for model, _ in members])
    recipe = {**members[0][1], "val": metrics, "ensemble_size": size, "refit": params.refit, "grid": grid}
    if size > 1:
        recipe["ensemble"] = [member for _, member in members]
    return model, recipe


def audit_metrics(model: RankingModel, groups: Sequence[Group], spade, params: Params) -> dict:
    summary = val_score(model, groups, spade, params.top_k)
    return {name: summary[name] for name in ("oracle_fraction_top1", "oracle_fraction_topk", "pair_accuracy")}


def guarded_refit(validated, refit, seen: Sequence[Group], spade, params: Params) -> tuple:
    """The refit model, unless it fits the matrices it was trained on worse than the validated model does
    (by `select_metric`): then the validated model. With no data left to stop it, a refit can collapse
    (run K: SpMM TL20 seed 0 fell to 0.637 of the oracle); a training set it no longer ranks is the sign."""
    key = SUMMARY_KEY[params.select_metric]
    before = val_score(validated, seen, spade, params.top_k)[key]
    after = val_score(refit, seen, spade, params.top_k)[key]
    kept = after >= before
    if not kept:
        logger.warning("refit rejected: %s on its training matrices %.3f < the validated model's %.3f",
                       params.select_metric, after, before)
    return (refit if kept else validated), {"refit_kept": kept, "refit_fit": {"validated": before, "refit": after}}


def epochs_trained(recipe: dict) -> int:
    """Epochs up to and including the one validation kept (0: no training chosen)."""
    return 0 if recipe.get("epoch_kept") is None else int(recipe["epoch_kept"]) + 1


def train_no_transfer(nt_base: CognateCostModel, groups: Sequence[Group], val: Sequence[Group], spade,
                      params: Params, seed: int, audit: Sequence[Group] = ()) -> tuple[CognateCostModel, dict]:
    """The COGNATE network trained on target data only; lr and epoch chosen on validation."""

    def train(lr, epochs, train_groups, val_groups=None) -> CognateCostModel:
        model = copy.deepcopy(nt_base)
        model.seed = seed
        model.config = model.config.replace(**{"train.lr": lr, **target_loss(params)})
        return model.fit(train_groups, space=spade, val_groups=val_groups, epochs=epochs)

    tried = []
    for lr in params.nt_lrs:
        model = train(lr, params.nt_epochs, groups, val)
        tried.append((model, {"lr": lr, "epochs_max": params.nt_epochs,
                              "epoch_kept": best_epoch(model, params.nt_epochs),
                              "val": val_score(model, val, spade, params.top_k)}))

    def refit(model, recipe):
        if not (params.refit and epochs_trained(recipe)):
            return model, recipe
        again = train(recipe["lr"], epochs_trained(recipe), [*groups, *val])
        model, guard = guarded_refit(model, again, [*groups, *val], spade, params)
        return model, {**recipe, **guard}

    return chosen_on_validation(tried, refit, val, spade, params, audit)


def xgboost_on_validation(source_model, finetune, val, spade, params: Params) -> tuple[RankingModel, dict]:

    def train(rounds, groups) -> RankingModel:
        model = copy.deepcopy(source_model)
        model.finetune_rounds = rounds
        if rounds:
            model.finetune(groups, space=spade)
        return model

    tried = []
    for rounds in params.xgb_rounds:
        model = train(rounds, finetune)
        tried.append((model, {"rounds": rounds, "val": val_score(model, val, spade, params.top_k)}))

    def refit(model, recipe):
        if not (params.refit and recipe["rounds"]):
            return model, recipe
        return train(recipe["rounds"], [*finetune, *val]), recipe

    return chosen_on_validation(tried, refit, val, spade, params)


def pretrain_variant(cpu_model: CognateCostModel, cpu_train, cpu_val, cpu_space, params: Params,
                     **changes) -> CognateCostModel:
    """A COGNATE variant whose config embedding and head are pre-trained on the CPU data over the
    shipped model's featurizer (copied, frozen): only the named mapper / knob encoder differs."""
    config = cpu_model.config.replace(**changes, **{"train.train_featurizer": False,
                                                    "train.epochs": params.pretrain_epochs})
    model = CognateCostModel(config, seed=cpu_model.seed)
    model.net.featurizer.load_state_dict(cpu_model.net.featurizer.state_dict())
    return model.fit(cpu_train, space=cpu_space, val_groups=cpu_val)


def pretrain_from_scratch(cpu_model_config: ModelConfig, cpu_train, cpu_val, cpu_space, params: Params,
                          seed: int = 0) -> CognateCostModel:
    """The shipped model's recipe (every part trained, featurizer end to end) on `cpu_train` only."""
    config = cpu_model_config.replace(**{"train.train_featurizer": True, "train.epochs": params.source_epochs})
    return CognateCostModel(config, seed=seed).fit(cpu_train, space=cpu_space, val_groups=cpu_val)


def source_sizes(params: Params, available: int) -> list[int]:
    """The CPU source sizes of the ablation, capped at the CPU training matrices there are."""
    return sorted({min(n, available) for n in params.source_sizes})


def warm_embeddings(model: CognateCostModel, groups: Sequence[Group]) -> None:
    """Compute (and cache) the matrix embeddings once, so every copy of `model` reuses them."""
    for g in groups:
        model.embedding(g.matrix)


# -- the experiment of one op ---------------------------------------------------------------------
def load_cpu_model(op: str, args, cpu_train, cpu_val, params: Params) -> tuple[CognateCostModel, dict]:
    if args.cpu_model == "shipped":
        root = args.pretrained_root or PRETRAINED_DIR
        model = load_pretrained(op, "cpu", root=root)
        path = pretrained_path(op, "cpu", root=root)
        return model, {"source": "shipped", "path": str(path),
                       "weights_sha1": hashlib.sha1((path / "model.pt").read_bytes()).hexdigest()}
    if args.cpu_model == "pretrain":
        config = ModelConfig().replace(**{"train.epochs": params.pretrain_epochs, "train.train_featurizer": True})
        model = CognateCostModel(config, seed=0).fit(cpu_train, space=create_space("cpu", op), val_groups=cpu_val)
        return model, {"source": "pre-trained by this run", "epochs": params.pretrain_epochs}
    path = Path(str(args.cpu_model).format(op=op))
    return CognateCostModel.load(path), {"source": "directory", "path": str(path),
                                         "weights_sha1": hashlib.sha1((path / "model.pt").read_bytes()).hexdigest()}


def run_op(op: str, params: Params, args, out: Path) -> dict:
    import torch

    progress = not args.no_progress
    timings: dict[str, float] = {}
    tick = time.perf_counter()
    spade, cpu = create_space("spade", op), create_space("cpu", op)
    data = target_data(op, params, Path(args.data_root or out / "data"), progress=progress)
    timings["target_data"] = data.seconds
    logger.info("%s: %d validation, %d test, %d pool matrices (%.0f s)", op, len(data.val), len(data.test),
                len(data.pool), data.seconds)
    if 5 not in params.ks:
        raise ValueError(f"k = 5 (TL5: shipped, and the data of the k = 5 baselines) must be among ks {params.ks}")
    for n in (*params.nt_sizes, *params.ks):
        if n > len(data.pool):
            raise ValueError(f"{n} target training matrices asked, the pool has {len(data.pool)}")
    # the rows built on the CPU data (WACO+FA/FM, XGBoost); the curve's rows use the CPU model only
    cpu_baselines = not (args.ship_only or args.curve_only)
    ablations = (args.ablations or args.ablations_only) and not args.ship_only
    start = time.perf_counter()
    if not (cpu_baselines or ablations or args.cpu_model == "pretrain"):
        cpu_train, cpu_val, cpu_info = [], [], {"path": None, "corpus": None, "matrices": 0, "measurements": 0}
    else:
        cpu_train, cpu_val, cpu_info = cpu_source(op, params, args, out, progress=progress)
    timings["cpu_data"] = time.perf_counter() - start
    start = time.perf_counter()
    cpu_model, cpu_model_info = load_cpu_model(op, args, cpu_train, cpu_val, params)
    # one validation statistic for every choice of every method: recipes, epochs, boosting rounds
    cpu_model.config = cpu_model.config.replace(**{"train.select_metric": params.select_metric},
                                                knob_encoder=params.target_knob_encoder)
    cpu_model.encoder_for(spade)
    warm_embeddings(cpu_model, [*data.val, *data.test])
    timings["cpu_model"] = time.perf_counter() - start

    runs: list[dict] = []
    per_matrix: dict[str, dict[int, list[dict]]] = {}
    recipes: dict[str, dict[int, dict]] = {}
    shipped_candidate = None

    def score(method: str, seed: int, model: RankingModel, target_samples: float, seconds: float,
              recipe: dict | None = None) -> None:
        summary, rows = evaluate_groups(model, data.test, spade, params.top_k)
        runs.append({"method": method, "seed": seed, **summary, "target_samples": target_samples,
                     "seconds": seconds})
        per_matrix.setdefault(method, {})[seed] = rows
        if recipe is not None:
            recipes.setdefault(method, {})[seed] = recipe
        logger.info("%s seed %d %-22s top-1/oracle %.3f top-5/oracle %.3f pair %.3f (%.1f s)", op, seed, method,
                    summary["oracle_fraction_top1"], summary["oracle_fraction_topk"], summary["pair_accuracy"],
                    seconds)

    n_val = samples(data.val)
    main = not (args.ablations_only or args.ship_only)
    # one-off models: zero-shot, oracle, WACO variants and XGBoost pre-trained on the CPU data
    if main:
        start = time.perf_counter()
        score("zero_shot", params.seeds[0], copy.deepcopy(cpu_model), 0.0, time.perf_counter() - start)
    score("oracle", params.seeds[0], OracleRanker(data.test), float("nan"), 0.0)
    start = time.perf_counter()
    variants = {}
    if cpu_baselines:
        variants["waco_fa"] = pretrain_variant(cpu_model, cpu_train, cpu_val, cpu, params, mapper="none",
                                               knob_encoder="none")
        variants["waco_fm"] = pretrain_variant(cpu_model, cpu_train, cpu_val, cpu, params, mapper="standard",
                                               knob_encoder="pad")
    if ablations:
        variants["abl_reference"] = pretrain_variant(cpu_model, cpu_train, cpu_val, cpu, params)
        variants["abl_random_mapping"] = pretrain_variant(cpu_model, cpu_train, cpu_val, cpu, params,
                                                          mapper="random")
        variants["abl_no_latent"] = pretrain_variant(cpu_model, cpu_train, cpu_val, cpu, params,
                                                     knob_encoder="none")
        for n in source_sizes(params, len(cpu_train)):
            variants[f"abl_source_{n}"] = pretrain_from_scratch(cpu_model.config, cpu_train[:n], cpu_val, cpu,
                                                                params)
    for model in variants.values():
        model.encoder_for(spade)
        warm_embeddings(model, [*data.val, *data.test])
    if main and cpu_baselines:
        xgb_source = baselines.create("xgboost", seed=0, xgb_options={"num_threads": params.threads})
        xgb_source.fit(cpu_train, space=cpu)
    timings["source_variants"] = time.perf_counter() - start

    embed = lambda matrix: cpu_model.embedding(matrix).numpy()  # noqa: E731 (cached per matrix)
    audit = data.test if args.audit_grid else ()  # scored after each choice, never read by one
    for seed in (params.seeds[:1] if args.ship_only else params.seeds):
        torch.manual_seed(seed)
        pool = finetune_draw(data.pool, len(data.pool), seed, "random")  # NTn's matrices: the first n
        drawn = {k: finetune_draw(data.pool, k, seed, params.finetune_draw, embed, params.finetune_include)
                 for k in {*params.ks, 5}}
        five = drawn[5]  # TL5's matrices: also WACO+FA/FM's, XGBoost's and best fixed's
        for k in (params.ks if main else (5,)):
            start = time.perf_counter()
            chosen = drawn[k]
            warm_embeddings(cpu_model, chosen)
            model, recipe = finetune_on_validation(cpu_model, chosen, data.val, spade, params, seed, audit=audit)
            score(f"tl{k}", seed, model, samples(chosen) + n_val, time.perf_counter() - start,
                  {**recipe, "finetune_matrices": [g.name for g in chosen]})
            if k == 5 and seed == params.seeds[0]:
                shipped_candidate = (model, recipe, [g.name for g in chosen])
        if ablations:
            start = time.perf_counter()
            params_fz = dataclasses.replace(params, finetune_epochs=params.featurizer_epochs, lrs=params.featurizer_lrs)
            model, recipe = finetune_on_validation(cpu_model, five, data.val, spade, params_fz, seed,
                                                   freezes=[()])
            score("abl_featurizer_trained", seed, model, samples(five) + n_val, time.perf_counter() - start,
                  recipe)
        for name, base in variants.items():
            start = time.perf_counter()
            warm_embeddings(base, five)
            model, recipe = finetune_on_validation(base, five, data.val, spade, params, seed)
            score(name, seed, model, samples(five) + n_val, time.perf_counter() - start, recipe)
        if not main:
            continue
        # no transfer: one seeded network per seed; its (frozen, random) featurizer's embeddings are shared
        start = time.perf_counter()
        nt_base = CognateCostModel(cpu_model.config.replace(**{"train.train_featurizer": False}), seed=seed)
        nt_base.encoder_for(spade)
        nt_base.adopt_patterns(cpu_model)  # the pool binned once, not once per seed (docs/decisions.md)
        # NTn trains on TLn's matrices where TL has that size (the same with the random draw: pool[:n])
        nt_groups = {n: drawn.get(n, pool[:n]) for n in params.nt_sizes}
        nt_matrices = {g.name: g for groups in nt_groups.values() for g in groups}  # nested sizes share matrices
        warm_embeddings(nt_base, [*data.val, *data.test, *nt_matrices.values()])
        shared = time.perf_counter() - start
        for n, groups in nt_groups.items():
            start = time.perf_counter()
            model, recipe = train_no_transfer(nt_base, groups, data.val, spade, params, seed, audit=audit)
            score(f"nt{n}", seed, model, samples(groups) + n_val, time.perf_counter() - start + shared, recipe)
        if cpu_baselines:
            start = time.perf_counter()
            model, recipe = xgboost_on_validation(xgb_source, five, data.val, spade, params)
            score("xgboost", seed, model, samples(five) + n_val, time.perf_counter() - start, recipe)
        fixed_on = [*five, *data.val] if params.refit else five
        fixed = baselines.create("best_fixed").finetune(fixed_on, space=spade)
        score("best_fixed", seed, fixed, samples(fixed_on), 0.0, {"config": fixed.best()})
        score("random", seed, baselines.create("random", seed=seed), 0.0, 0.0)
    timings["total"] = time.perf_counter() - tick

    hindsight = baselines.create("best_fixed").finetune(data.test, space=spade)
    headroom, _ = evaluate_groups(hindsight, data.test, spade, params.top_k)
    val_head, _ = evaluate_groups(OracleRanker(data.val), data.val, spade, params.top_k)
    info = {
        "op": op, "feat": params.feat, "timings_s": timings, "cpu_data": cpu_info, "cpu_model": cpu_model_info,
        "validation_matrices": [g.name for g in data.val], "validation_samples": n_val,
        "select_metric": params.select_metric,
        "test_matrices": [g.name for g in data.test], "pool_matrices": len(data.pool),
        "test_nnz": [int(g.matrix.nnz) for g in data.test],
        "headroom": {"test_oracle_over_baseline": headroom["speedup_oracle"],
                     "test_best_fixed_in_hindsight_over_oracle": headroom["oracle_fraction_top1"],
                     "test_best_fixed_in_hindsight_config": hindsight.best(),
                     "validation_oracle_over_baseline": val_head["speedup_oracle"]},
    }
    result = {"info": info, "runs": runs, "summary": summarize_runs(runs), "recipes": recipes,
              "per_matrix": per_matrix}
    if args.ship and shipped_candidate is not None:
        result["shipped"] = ship(op, shipped_candidate, result, params, args, data.test)
    return result


def summarize_runs(runs: list[dict]) -> dict[str, dict[str, float]]:
    keys = [k for k, _ in COLUMNS] + ["speedup_oracle", "target_samples", "seconds"]
    out: dict[str, dict[str, float]] = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        rows = [r for r in runs if r["method"] == method]
        entry = {"seeds": float(len(rows))}
        for key in keys:
            values = np.array([r[key] for r in rows], dtype=np.float64)
            entry[key] = float(values.mean())
            entry[key + "_std"] = float(values.std())
        out[method] = entry
    return out


# -- shipping and reports -------------------------------------------------------------------------
def ship(op: str, candidate, result: dict, params: Params, args, test_groups: Sequence[Group]) -> dict:
    model, recipe, names = candidate
    root = Path(args.pretrained_root or PRETRAINED_DIR)
    path = pretrained_path(op, "spade", root=root)
    model.save(path)
    test_row = next(r for r in result["runs"] if r["method"] == "tl5" and r["seed"] == params.seeds[0])
    info = result["info"]
    metric_rows = "\n".join(f"| {title} | {recipe['val'][key]:.3f} | {test_row[key]:.3f} |" for key, title in COLUMNS)
    command = "python benchmarks/transfer.py " + " ".join(sys.argv[1:])
    card = f"""# cognate-tvm SPADE cost model: {op} (COGNATE TL5)

- Platform: spade (the C++ SPADE model, `backends.create("spade")`, default hardware), dense width {params.feat}.
  Format: `CognateCostModel.save`; load with `load_pretrained("{op}", "spade")`.
  SPADE knob encoder: {model.net.get_encoder("spade").kind}.
- Pre-trained: the CPU model {shown_path(info['cpu_model'].get('path', info['cpu_model']['source']))}
  (weights sha1 {info['cpu_model'].get('weights_sha1', 'n/a')}).
- Fine-tuned on 5 SPADE matrices x {params.pool_configs} sampled configs (+ the baseline config), drawn
  ({params.finetune_draw}) with seed {params.seeds[0]} from the pool `{params.pool_corpus}` ({params.pool_min_rows}-{params.pool_max_rows} rows):
  {', '.join(names)}.
- Validation: {len(info['validation_matrices'])} matrices of `{params.eval_corpus}`
  ({params.eval_min_rows}-{params.eval_max_rows} rows) x {params.val_configs} sampled configs
  ({info['validation_samples']} samples); it chose the recipe: frozen {', '.join(recipe['freeze']) or 'nothing'},
  head {'re-initialized' if recipe.get('head_reinitialized') else 'pre-trained'},
  lr {recipe['lr']}, epoch {recipe['epoch_kept']} of {recipe['epochs_max']} (best validation
  {info['select_metric'].replace('_', ' ')}){refit_text(recipe)}.
- Target samples used: {test_row['target_samples']:.0f} (fine-tune + validation).
- Test: {len(info['test_matrices'])} other matrices of the evaluation corpus, all 256 configs each; oracle / baseline
  config {info['headroom']['test_oracle_over_baseline']:.3f}x, best fixed config in hindsight / oracle
  {info['headroom']['test_best_fixed_in_hindsight_over_oracle']:.3f}.

| metric (top-k: k = {params.top_k}) | validation | test |
|---|---|---|
{metric_rows}

Rebuild: `{command}` (docs/transfer.md).
"""
    (path / CARD_FILE).write_text(card)
    # the shipped files must give back the same scores
    reloaded = load_pretrained(op, "spade", root=root)
    spade = create_space("spade", op)
    group = test_groups[0]
    same = np.allclose(reloaded.predict(group.matrix, list(group.configs), space=spade, feat=group.feat),
                       model.predict(group.matrix, list(group.configs), space=spade, feat=group.feat), atol=1e-5)
    if not same:
        raise RuntimeError(f"{path}: the reloaded model scores differently from the one saved")
    return {"path": str(path), "finetune_matrices": names,
            "recipe": {k: v for k, v in recipe.items() if k != "grid"}}


def fmt(entry: dict, key: str) -> str:
    return f"{entry[key]:.3f} ± {entry[key + '_std']:.3f}"


def markdown(op: str, result: dict, params: Params, methods: Sequence[str]) -> list[str]:
    summary = result["summary"]
    header = ["method"] + [t for _, t in COLUMNS] + ["target samples"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in methods:
        if method not in summary:
            continue
        e = summary[method]
        samples_cell = "all (test)" if method == "oracle" else f"{e['target_samples']:.0f}"
        cells = [label(method)] + [fmt(e, key) for key, _ in COLUMNS] + [samples_cell]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main_methods(params: Params) -> list[str]:
    return ([f"tl{k}" for k in params.ks] + [f"nt{n}" for n in params.nt_sizes]
            + ["zero_shot", "waco_fa", "waco_fm", "xgboost", "random", "best_fixed", "oracle"])


def ablation_methods(summary: dict) -> list[str]:
    sources = sorted((m for m in summary if m.startswith("abl_source_")), key=lambda m: int(m.rsplit("_", 1)[1]))
    return ["tl5", "abl_reference", "waco_fa", "abl_random_mapping", "abl_no_latent", "waco_fm",
            "abl_featurizer_trained", *sources]


def recipe_text(recipe: dict) -> str:
    if recipe.get("ensemble"):
        members = [recipe_text({**member, "refit": recipe.get("refit")}) for member in recipe["ensemble"]]
        return f"mean of the {len(members)} best on validation ({' / '.join(members)})"
    if not recipe.get("epochs_max"):
        return "no fine-tuning"
    head = "head re-initialized" if recipe.get("head_reinitialized") else "pre-trained head"
    return (f"{head}, frozen {', '.join(recipe['freeze']) or 'nothing'}, lr {recipe['lr']}, "
            + (f"L2-SP {recipe['anchor']}, " if recipe.get("anchor") else "")
            + f"epoch {recipe['epoch_kept']}"
            + (", refit" if recipe.get("refit") and recipe.get("refit_kept", True) else "")
            + (", refit rejected" if recipe.get("refit_kept") is False else ""))


def refit_text(recipe: dict) -> str:
    if not recipe.get("refit") or not epochs_trained(recipe):
        return ""
    if recipe.get("refit_kept") is False:
        return ("; trained again on the fine-tune and validation matrices together (`--refit`), that model was "
                "rejected: it ranked those matrices worse than the validated model does, which is kept")
    return "; then trained again with that recipe and epoch on the fine-tune and validation matrices together (`--refit`)"


def write_markdown(op: str, result: dict, params: Params, path: Path, command: str) -> str:
    info, h = result["info"], result["info"]["headroom"]
    lines = [f"# CPU -> SPADE transfer, {op} (N = {params.feat})", "",
             f"Command: `{command}`; {info['timings_s']['total']:.0f} s for this op.", "",
             f"Test: {len(info['test_matrices'])} matrices of `{params.eval_corpus}` ({params.eval_min_rows}-"
             f"{params.eval_max_rows} rows, nnz {min(info['test_nnz'])}-{max(info['test_nnz'])}), all 256 configs. "
             f"Headroom: oracle / baseline config **{h['test_oracle_over_baseline']:.3f}x**; the best fixed config "
             "in hindsight (chosen on the test set itself) reaches "
             f"**{h['test_best_fixed_in_hindsight_over_oracle']:.3f}**"
             f" of the oracle.",
             f"Validation (every method, every choice, by {info['select_metric'].replace('_', ' ')}): "
             f"{len(info['validation_matrices'])} matrices x "
             f"{params.val_configs} configs = {info['validation_samples']} samples, counted in target samples. "
             f"Target training matrices: seeded draws ({params.finetune_draw}) from a pool of "
             f"{info['pool_matrices']} matrices of "
             f"`{params.pool_corpus}` ({params.pool_min_rows}-{params.pool_max_rows} rows) x {params.pool_configs} "
             f"configs + baseline. "
             + (f"Every draw holds {', '.join(params.finetune_include)}. " if params.finetune_include else "")
             + ("Refit: each chosen recipe trained again, to its chosen epoch, on the target training and "
                "validation matrices together (best fixed: chosen on both); a refit model that ranks those matrices "
                "worse than the validated model does is rejected and the validated model kept. " if params.refit else "")
             + (f"Ensembles: validation chose, per method and seed, among the mean of the grid's m best models "
                f"for m in {list(params.ensemble_sizes)}. " if max(params.ensemble_sizes) > 1 else "")
             + (f"Loss of every network trained on SPADE data: {params.target_loss}"
                + (f" (temperature {params.listwise_temperature})" if params.target_loss == "listwise" else "")
                + " (default: the CPU model's own). " if params.target_loss else "")
             + (f"SPADE knob encoder: {params.target_knob_encoder} (COGNATE's is latent). "
                if params.target_knob_encoder != "latent" else "")
             + f"CPU model: {info['cpu_model']['source']}; CPU data for the re-pre-trained "
             + (f"variants: {info['cpu_data']['matrices']} matrices ({info['cpu_data']['corpus']})."
                if info['cpu_data']['matrices'] else "variants: none loaded (none of this run's rows needs them)."),
             f"Seeds {list(params.seeds)}: mean ± std over seeds. top-k measures the k best-scored configs and "
             f"keeps the fastest; speedups are geomeans over the baseline config; APE = mean % slowdown of the "
             f"top-1 pick vs the oracle.", ""]
    lines += markdown(op, result, params, main_methods(params))
    chosen = result.get("recipes", {}).get("tl5", {})
    if chosen:
        lines += ["", "TL5 recipes chosen on validation: " + "; ".join(
            f"seed {seed}: " + recipe_text(r) for seed, r in sorted(chosen.items(), key=lambda x: int(x[0])))]
    lines += audit_lines(result)
    if any(m.startswith("abl_") for m in result["summary"]):
        lines += ["", "### Ablations (k = 5, same validation and recipe grid)", ""]
        lines += markdown(op, result, params, ablation_methods(result["summary"]))
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def audit_lines(result: dict) -> list[str]:
    """`--audit-grid`'s table: per method, the test top-1 / oracle of the model chosen (refit included) beside
    the chosen grid point before refit and the grid point that was best on test (hindsight, seed by seed)."""
    rows = []
    for method, per_seed in result.get("recipes", {}).items():
        audited = [(int(seed), recipe) for seed, recipe in per_seed.items()
                   if all("audit" in point for point in recipe.get("grid", [{}]))]
        if not audited or len(audited) != len(per_seed):
            continue
        test = {run["seed"]: run["oracle_fraction_top1"] for run in result["runs"] if run["method"] == method}
        chosen = [test[seed] for seed, _ in audited]
        before = [next(p["audit"]["oracle_fraction_top1"] for p in r["grid"] if same_point(p, r)) for _, r in audited]
        best = [max(p["audit"]["oracle_fraction_top1"] for p in r["grid"]) for _, r in audited]
        cells = [f"{np.mean(v):.3f} ± {np.std(v):.3f} ({' / '.join(f'{x:.3f}' for x in v)})"
                 for v in (chosen, before, best)]
        rows.append(f"| {method} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["", "### Grid audit (`--audit-grid`): every grid point scored on test after the choice, never by it", "",
            "| method | chosen (as scored above) | its grid point, before refit | best grid point on test |",
            "|---|---|---|---|", *rows]


def same_point(point: dict, recipe: dict) -> bool:
    """Whether grid entry `point` is the recipe `recipe` was chosen from (its best member for an ensemble)."""
    fields = [k for k in point if k not in ("val", "audit")]
    return all(point[k] == recipe.get(k) for k in fields)


def plot(op: str, result: dict, params: Params, out: Path, stem: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = params.seeds[0]
    pm = result["per_matrix"]
    oracle = pm["oracle"][seed]
    base = np.array([r["baseline_ms"] for r in oracle])
    order = np.argsort(base / np.array([r["oracle_ms"] for r in oracle]))
    fig, ax = plt.subplots(figsize=(9, 3.8))
    tl = "tl5"
    nt_mid = f"nt{params.nt_sizes[len(params.nt_sizes) // 2]}"
    for method, style in (("oracle", "k-"), (tl, "r-o"), ("best_fixed", "b--s"), ("waco_fm", "g:^"),
                          (nt_mid, "m-.v"), ("zero_shot", "c:x")):
        if method not in pm:
            continue
        rows = pm[method][seed]
        speed = np.array([r["baseline_ms"] / r["top1_ms"] for r in rows])[order]
        ax.plot(np.arange(len(speed)), speed, style, ms=4, lw=1, label=label(method) + " (top-1)")
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.5)
    ax.set_xlabel("test matrix (sorted by oracle speedup)")
    ax.set_ylabel("speedup over baseline config")
    ax.set_title(f"SPADE {op}: per-matrix top-1 speedups (seed {seed})")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / f"{stem}_per_matrix.png", dpi=120)
    plt.close(fig)
    if not any(m.startswith("nt") for m in result["summary"]):
        return

    summary = result["summary"]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for prefix, sizes, style, name in (("tl", params.ks, "r-o", "COGNATE TLk"), ("nt", params.nt_sizes, "m-s", "NTn")):
        keys = [f"{prefix}{n}" for n in sizes if f"{prefix}{n}" in summary]
        xs = [summary[k]["target_samples"] for k in keys]
        ys = [summary[k]["oracle_fraction_top1"] for k in keys]
        es = [summary[k]["oracle_fraction_top1_std"] for k in keys]
        ax.errorbar(xs, ys, yerr=es, fmt=style, capsize=3, label=name)
        for x, y, k in zip(xs, ys, keys):
            ax.annotate(label(k).replace("COGNATE ", ""), (x, y), fontsize=7, textcoords="offset points",
                        xytext=(4, -10))
    for method, style in (("best_fixed", "b--"), ("zero_shot", "c:")):
        if method in summary:
            ax.axhline(summary[method]["oracle_fraction_top1"], ls=style[1:], color=style[0], lw=1,
                       label=label(method))
    ax.set_xscale("log")
    ax.set_xlabel("target samples (fine-tune + validation)")
    ax.set_ylabel("top-1 fraction of oracle (geomean)")
    ax.set_title(f"SPADE {op}: data efficiency")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f"{stem}_efficiency.png", dpi=120)
    plt.close(fig)


# -- CLI -----------------------------------------------------------------------------------------
def positive(kind: type):
    """An argparse type: a `kind` number above 0 (epochs, learning rates)."""
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not positive")
        return value
    return parse


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="ci")
    parser.add_argument("--ops", nargs="+", choices=("spmm", "sddmm"), default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--select-metric", choices=("pair_accuracy", "top1_fraction"), default=None,
                        help="the validation statistic every choice maximises (default: pair_accuracy)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/transfer"))
    parser.add_argument("--data-root", type=Path, default=None,
                        help="where the SPADE datasets live (spade_eval_<op>, spade_pool_<op>); default OUT/data")
    parser.add_argument("--cpu-model", default="shipped",
                        help="'shipped' (load_pretrained(op, 'cpu')), 'pretrain' (on the CPU data), or a directory "
                             "('{op}' is replaced)")
    parser.add_argument("--cpu-data", default=None, help="CPU dataset directory ('{op}' is replaced); default: "
                                                         "measure a small one under OUT")
    parser.add_argument("--cpu-corpus", default=None, help="the corpus spec the CPU dataset was collected on")
    parser.add_argument("--cpu-min-rows", type=int, default=1000)
    parser.add_argument("--cpu-max-rows", type=int, default=1_000_000)
    parser.add_argument("--pool-matrices", type=int, default=None,
                        help="use the first N matrices of the pool corpus (caps NT sizes at N)")
    parser.add_argument("--pool-max-rows", type=int, default=None,
                        help="largest pool matrix (default 100000 at full size: NT1000 stays affordable; "
                             "1000000 spans the test matrices' sizes)")
    parser.add_argument("--eval-matrices", type=int, default=None,
                        help="use the first N matrices of the evaluation corpus (validation + test)")
    parser.add_argument("--finetune-draw", choices=("random", "stratified", "diverse", "diverse-largest"),
                        default=None,
                        help="TLk's fine-tune matrices per seed: the first k of a seeded permutation of the pool "
                             "(random, the default), one per nnz stratum (stratified), or one per k-means cluster of the "
                             "source model's matrix embeddings: the one nearest its centre (diverse) or its largest "
                             "(diverse-largest, most nonzeros)")
    parser.add_argument("--finetune-include", nargs="+", default=None, metavar="MATRIX",
                        help="pool matrices that every seed's fine-tune draw holds; the draw picks the rest")
    # the recipe grids (every point is chosen among on validation; defaults: the size's)
    parser.add_argument("--finetune-epochs", type=positive(int), default=None,
                        help="most fine-tuning epochs of a recipe")
    parser.add_argument("--lrs", type=positive(float), nargs="+", default=None, help="fine-tuning learning rates")
    parser.add_argument("--reinit-lrs", type=positive(float), nargs="*", default=None,
                        help="learning rates of the 'head re-initialized' recipes (none: no such recipe)")
    parser.add_argument("--nt-epochs", type=positive(int), default=None, help="most epochs of NTn training")
    parser.add_argument("--anchors", type=float, nargs="+", default=None,
                        help="L2-SP strengths of the fine-tuning recipes (0: plain fine-tuning; default 0)")
    parser.add_argument("--ensemble-sizes", type=positive(int), nargs="+", default=None, metavar="M",
                        help="let validation choose, per method and seed, to score with the mean of the grid's M best "
                             "models' standardized scores instead of its best model (1 = the best alone; default 1)")
    parser.add_argument("--target-loss", choices=LOSSES, default=None,
                        help="the loss of every network trained on SPADE data (default: the CPU model's own, "
                             "slowdown for the shipped models): pairwise (margin loss over random pairs), slowdown, or "
                             "listwise (ListNet: weight on each matrix's fastest configs)")
    parser.add_argument("--listwise-temperature", type=positive(float), default=None,
                        help="the listwise loss' temperature: a config t / t_best slower weighs (t_best / t) ** "
                             "(1 / temperature) of the best in its target (default 0.1)")
    parser.add_argument("--nt-lrs", type=positive(float), nargs="+", default=None, help="NTn learning rates")
    parser.add_argument("--ks", type=positive(int), nargs="+", default=None,
                        help="TLk sizes: target matrices fine-tuned on (must hold 5)")
    parser.add_argument("--nt-sizes", type=positive(int), nargs="+", default=None,
                        help="NTn sizes: target matrices trained on from scratch")
    parser.add_argument("--curve-only", action="store_true",
                        help="only the data-efficiency rows (TLk, NTn) and the free ones (zero-shot, best fixed, "
                             "random-k, oracle): no CPU data is loaded (writes transfer_<op>_curve.*)")
    parser.add_argument("--refit", action="store_true",
                        help="after validation chooses each recipe and epoch, train it again on the fine-tune and "
                             "validation matrices together (the samples every learned method counts already); "
                             "best fixed is chosen on both too; a refit that ranks its own training matrices worse "
                             "than the validated model is rejected")
    parser.add_argument("--target-knob-encoder", choices=("latent", "pad"), default=None,
                        help="the SPADE knob encoder of the transferred model: COGNATE's latent autoencoder "
                             "(default) or the raw knobs, zero-padded")
    parser.add_argument("--audit-grid", action="store_true",
                        help="also score every grid point of TLk and NTn on the test matrices (recorded under "
                             "'audit', after validation has chosen, never used for a choice): how far a perfect "
                             "choice among the grid would go")
    parser.add_argument("--ablations", action="store_true", help="add the ablation rows")
    parser.add_argument("--ablations-only", action="store_true",
                        help="only TL5 and the ablation rows (writes transfer_<op>_ablations.*)")
    parser.add_argument("--ship-only", action="store_true",
                        help="only TL5 of the first seed, shipped (with --ship; writes transfer_<op>_ship.*)")
    parser.add_argument("--ship", action="store_true", help="write the TL5 models to <pretrained root>/<op>-spade")
    parser.add_argument("--pretrained-root", type=Path, default=None,
                        help="where CPU models are loaded from and SPADE models shipped to (default: package data)")
    parser.add_argument("--kernel-cache", type=Path, default=None, help="llvm kernel cache (own CPU data only)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if (args.cpu_data is None) != (args.cpu_corpus is None):
        parser.error("--cpu-data and --cpu-corpus go together")
    if args.listwise_temperature and args.target_loss != "listwise":
        parser.error("--listwise-temperature goes with --target-loss listwise")
    params = SIZES[args.size]
    changes = {}
    if args.ops:
        changes["ops"] = tuple(args.ops)
    if args.seeds:
        changes["seeds"] = tuple(args.seeds)
    if args.threads:
        changes["threads"] = args.threads
    if args.select_metric:
        changes["select_metric"] = args.select_metric
    if args.finetune_draw:
        changes["finetune_draw"] = args.finetune_draw
    if args.finetune_include:
        changes["finetune_include"] = tuple(args.finetune_include)
    if args.refit:
        changes["refit"] = True
    if args.target_knob_encoder:
        changes["target_knob_encoder"] = args.target_knob_encoder
    if args.target_loss:
        changes["target_loss"] = args.target_loss
    if args.listwise_temperature:
        changes["listwise_temperature"] = args.listwise_temperature
    grid = {"finetune_epochs": args.finetune_epochs, "lrs": args.lrs, "reinit_lrs": args.reinit_lrs,
            "nt_epochs": args.nt_epochs, "nt_lrs": args.nt_lrs, "anchors": args.anchors,
            "ensemble_sizes": args.ensemble_sizes}
    changes.update({name: tuple(value) if isinstance(value, list) else value
                    for name, value in grid.items() if value is not None})
    # a synthetic corpus' first N entries are synthetic:N:SEED (same sizes range): a prefix of the data
    if args.pool_matrices:
        seed = params.pool_corpus.split(":")[2]
        changes["pool_corpus"] = f"synthetic:{args.pool_matrices}:{seed}"
        changes["nt_sizes"] = tuple(sorted({min(n, args.pool_matrices) for n in params.nt_sizes}))
    if args.curve_only and (args.ablations or args.ablations_only or args.ship_only or args.ship):
        parser.error("--curve-only runs neither ablations nor shipping")
    if args.ship and args.ensemble_sizes and max(args.ensemble_sizes) > 1:
        parser.error("--ship writes one network: it does not go with --ensemble-sizes above 1")
    if args.pool_max_rows:
        changes["pool_max_rows"] = args.pool_max_rows
    if args.eval_matrices:
        seed = params.eval_corpus.split(":")[2]
        changes["eval_corpus"] = f"synthetic:{args.eval_matrices}:{seed}"
    # explicit sizes win over the pool cap above (run_op rejects sizes beyond the pool)
    if args.ks:
        changes["ks"] = tuple(sorted(set(args.ks)))
    if args.nt_sizes:
        changes["nt_sizes"] = tuple(sorted(set(args.nt_sizes)))
    return dataclasses.replace(params, **changes), args


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    params, args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(params.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/transfer.py " + " ".join(sys.argv[1:] if argv is None else argv)
    for op in params.ops:
        start = time.perf_counter()
        result = run_op(op, params, args, args.out)
        payload = {"params": dataclasses.asdict(params), "command": command, **result,
                   "wall_seconds": time.perf_counter() - start}
        stem = f"transfer_{op}" + ("_ship" if args.ship_only else "_ablations" if args.ablations_only
                                   else "_curve" if args.curve_only else "")
        (args.out / f"{stem}.json").write_text(json.dumps(payload, indent=1, default=float))
        print(write_markdown(op, result, params, args.out / f"{stem}.md", command))
        plot(op, result, params, args.out, stem)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
