"""Speed of the COGNATE cost model: ranking a whole space, and training throughput.

Ranking: time for `CognateCostModel.predict` on every config of a platform's
space (default: the 256-config SPADE space) for matrices of 10k, 100k and 1M
nonzeros, from a cold cache: content hash, binning, sparse-conv embedding,
mapping and scoring all included (goal: < 1 s at 1M nonzeros on 2 cores).

Training: samples (one matrix x one config) per second for (a) the head on
cached embeddings (featurizer frozen, as in fine-tuning) and (b) end-to-end
pre-training with the featurizer, on ~10k-nnz matrices.

    python benchmarks/model_speed.py --out benchmarks/results/model_speed --threads 2

Writes ``model_speed.json`` and ``model_speed.md`` under --out. Timings are
wall-clock medians; on a shared machine they are noisy.
"""
from __future__ import annotations

import argparse
import json
import logging
import platform as _platform
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from cognate_tvm.data import Group
from cognate_tvm.matrix import as_csr, generate
from cognate_tvm.model import CognateCostModel, ModelConfig
from cognate_tvm.space import create as create_space
from common import setup_logging

logger = logging.getLogger("model_speed")


def _matrix(nnz: int, seed: int) -> sp.csr_matrix:
    """A power-law (R-MAT) matrix with about `nnz` nonzeros (average degree ~10)."""
    rows = max(64, nnz // 10)
    m = generate("rmat", rows, seed=seed)
    if m.nnz < 0.5 * nnz or m.nnz > 2 * nnz:  # rmat draws its degree; fall back to uniform
        m = as_csr(sp.random_array((rows, rows), density=nnz / rows**2, rng=np.random.default_rng(seed)))
    return m


def time_ranking(model: CognateCostModel, space, matrix, *, feat: int, repeats: int) -> dict:
    configs = space.configs()
    totals, embeds = [], []
    for _ in range(repeats):
        model.clear_embedding_cache()
        model._patterns.clear()
        start = time.perf_counter()
        model.embedding(matrix)
        mid = time.perf_counter()
        scores = model.predict(matrix, configs, space=space, feat=feat)
        end = time.perf_counter()
        totals.append(end - start)
        embeds.append(mid - start)
    assert scores.shape == (len(configs),)
    return {"nnz": int(matrix.nnz), "rows": int(matrix.shape[0]), "configs": len(configs),
            "points": model.pattern(matrix).points, "binning_level": model.pattern(matrix).level,
            "total_s": float(np.median(totals)), "embed_s": float(np.median(embeds)),
            "score_s": float(np.median(totals) - np.median(embeds))}


def time_training(space, *, train_featurizer: bool, matrices: int, configs: int, epochs: int, feat: int,
                  seed: int) -> dict:
    rng = np.random.default_rng(seed)
    groups = []
    for n in range(matrices):
        m = _matrix(10_000, seed + n)
        chosen = space.sample(configs, seed + n)
        groups.append(Group(f"m{n}", m, feat, tuple(chosen), rng.lognormal(size=len(chosen))))
    config = ModelConfig().replace(**{"train.train_featurizer": train_featurizer, "train.epochs": epochs})
    model = CognateCostModel(config, seed=seed)
    model.encoder_for(space)  # the autoencoder's own training is not counted
    start = time.perf_counter()
    for g in groups:
        # one-off per matrix: binning, and (featurizer frozen) the cached embedding
        model.embedding(g.matrix) if not train_featurizer else model.pattern(g.matrix)
    prepare = time.perf_counter() - start
    CognateCostModel(config, seed=seed).fit(groups[:1], space=space, epochs=1)  # one-off lazy imports
    start = time.perf_counter()
    model.fit(groups, space=space)
    elapsed = time.perf_counter() - start
    samples = sum(len(g.configs) for g in groups) * epochs
    return {"train_featurizer": train_featurizer, "matrices": matrices, "configs_per_matrix": configs,
            "epochs": epochs, "prepare_s": prepare, "seconds": elapsed, "samples_per_s": samples / elapsed,
            "final_loss": model.history[-1]["loss"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/model_speed"))
    parser.add_argument("--platform", default="spade", help="space whose every config is ranked")
    parser.add_argument("--op", default="spmm")
    parser.add_argument("--feat", type=int, default=128)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-matrices", type=int, default=8)
    parser.add_argument("--train-configs", type=int, default=100)
    parser.add_argument("--train-epochs", type=int, default=3)
    args = parser.parse_args(argv)
    setup_logging(plain=True)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    space = create_space(args.platform, args.op)

    model = CognateCostModel(ModelConfig(), seed=args.seed)
    model.encoder_for(space)
    ranking = []
    for size in args.sizes:
        row = time_ranking(model, space, _matrix(size, args.seed), feat=args.feat, repeats=args.repeats)
        logger.info("rank %d configs, %d nnz: %.3f s (embedding %.3f s)", row["configs"], row["nnz"],
                    row["total_s"], row["embed_s"])
        ranking.append(row)
    training = []
    for train_featurizer in (False, True):
        row = time_training(space, train_featurizer=train_featurizer, matrices=args.train_matrices,
                            configs=args.train_configs, epochs=args.train_epochs, feat=args.feat, seed=args.seed)
        logger.info("training (featurizer %s): %.0f samples/s", "trained" if train_featurizer else "frozen",
                    row["samples_per_s"])
        training.append(row)

    args.out.mkdir(parents=True, exist_ok=True)
    result = {"space": repr(space), "threads": args.threads, "feat": args.feat, "host": _platform.node(),
              "torch": torch.__version__, "ranking": ranking, "training": training}
    (args.out / "model_speed.json").write_text(json.dumps(result, indent=2))
    lines = [f"# Model speed ({space!r}, {args.threads} threads, feat {args.feat})", "",
             "| nnz | rows | points after binning | configs | embed s | total s |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['nnz']} | {r['rows']} | {r['points']} | {r['configs']} | {r['embed_s']:.3f} | "
              f"{r['total_s']:.3f} |" for r in ranking]
    lines += ["", "| featurizer | matrices x configs | epochs | one-off prepare s | train s | samples/s |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {'trained' if r['train_featurizer'] else 'frozen (cached)'} | {r['matrices']} x "
              f"{r['configs_per_matrix']} | {r['epochs']} | {r['prepare_s']:.2f} | {r['seconds']:.2f} | "
              f"{r['samples_per_s']:.0f} |" for r in training]
    (args.out / "model_speed.md").write_text("\n".join(lines) + "\n")
    logger.info("wrote %s", args.out / "model_speed.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
