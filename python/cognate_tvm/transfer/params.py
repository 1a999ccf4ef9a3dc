"""The protocol's sizes and choices (`Params`), at the three sizes it runs at (`SIZES`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


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
    # samples, and with 5 fine-tune matrices the matrices seen decide more than the recipe (docs/transfer.md)
    refit: bool = False
    # the target platform's knob encoder (ModelConfig.knob_encoder): "latent" (COGNATE's autoencoder) or
    # "pad" (the raw knobs, zero-padded: WACO+FM's). The CPU model keeps its own; NTn and the ablations'
    # re-pre-trained reference use this one too (docs/transfer.md)
    target_knob_encoder: str = "latent"
    # the recipe grids (docs/transfer.md): smaller ones (60 epochs, lrs 1e-4..2e-3; NT 40 epochs,
    # 1e-3/3e-3) had validation choose the largest lr and the last epochs in nearly every fit
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
    # on each matrix's fastest configs)
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


def with_pool_matrices(params: Params, count: int) -> Params:
    """`params` on the first `count` matrices of its (synthetic) pool corpus, NT sizes capped at `count`.

    A synthetic corpus' first N entries are ``synthetic:N:SEED`` (same size range): a prefix of the data.
    """
    seed = params.pool_corpus.split(":")[2]
    return dataclasses.replace(params, pool_corpus=f"synthetic:{count}:{seed}",
                               nt_sizes=tuple(sorted({min(n, count) for n in params.nt_sizes})))


def with_eval_matrices(params: Params, count: int) -> Params:
    """`params` on the first `count` matrices of its (synthetic) evaluation corpus (validation + test)."""
    seed = params.eval_corpus.split(":")[2]
    return dataclasses.replace(params, eval_corpus=f"synthetic:{count}:{seed}")
