"""CPU -> SPADE transfer: does pre-training on cheap CPU runs help rank SPADE configs?

Source data: real SpMM timings of a seeded sample of CPU-space configs (TVM
llvm kernels, `LLVMBackend`) on generated matrices. Target data: all SPADE
configs simulated on *other* generated matrices. For each seed the target
matrices are split by that seed into fine-tune (k matrices), validation and
test; every method is pre-trained on the source (if it uses it), fine-tuned on
the k target matrices (a seeded sample of their configs), and evaluated on the
test matrices over all SPADE configs. Validation picks the fine-tuning epoch of
the neural models that accept it and is reported; test is never used to choose.

Methods (`cognate_tvm.baselines`): COGNATE, no-transfer (same k target
matrices, no source), zero-shot, WACO+FA, WACO+FM, XGBoost, random.

    python benchmarks/transfer.py --out benchmarks/results/transfer
    python benchmarks/transfer.py --small --out /tmp/transfer   # CI size, < 60 s

Writes under OUT: ``source/`` and ``target/`` (parquet datasets; a rerun skips
matrices already measured), ``transfer.json`` (per-seed and summary metrics),
``transfer.md`` (table, mean ± std over seeds) and ``transfer.png`` (top-5
fraction of the oracle per method, error bars = std over seeds).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from cognate_tvm import baselines
from cognate_tvm.data import Group, collect, groups_from_frame, load_frame, select, split_by_matrix
from cognate_tvm.errors import UnknownKindError
from cognate_tvm.matrix import generate_corpus
from cognate_tvm.model import ModelConfig
from cognate_tvm.model.cognate import CognateCostModel
from cognate_tvm.space import create as create_space
from cognate_tvm.train import evaluate

logger = logging.getLogger("transfer")

METHODS = ("cognate", "no_transfer", "zero_shot", "waco_fa", "waco_fm", "xgboost", "random")
LABELS = {"cognate": "COGNATE", "no_transfer": "no transfer", "zero_shot": "zero-shot", "waco_fa": "WACO+FA",
          "waco_fm": "WACO+FM", "random_mapping": "random mapping", "xgboost": "XGBoost", "random": "random"}
# (metrics key, table header) in table order; "target_samples" is added by this benchmark
COLUMNS = (("speedup_top1", "top-1 speedup"), ("speedup_topk", "top-{k} speedup"),
           ("oracle_fraction_top1", "top-1 / oracle"), ("oracle_fraction_topk", "top-{k} / oracle"),
           ("pair_accuracy", "pair acc."), ("kendall_tau", "Kendall tau"), ("val_pair_accuracy", "val pair acc."),
           ("target_samples", "target samples"))


@dataclass(frozen=True)
class Params:
    """Every size and setting of the experiment (the CLI flags override these)."""

    op: str = "spmm"
    feat: int = 32
    corpus_seed: int = 7
    source_matrices: int = 24
    source_configs: int = 32        # sampled CPU configs per matrix (+ the baseline config)
    source_min_rows: int = 2000
    source_max_rows: int = 20000
    target_matrices: int = 40
    target_min_rows: int = 2000
    target_max_rows: int = 20000
    finetune_matrices: int = 5      # k
    val_matrices: int = 5
    finetune_configs: int = 100     # sampled SPADE configs per fine-tune matrix (of 256)
    seeds: tuple[int, ...] = (0, 1, 2)
    epochs: int = 40                # pre-training
    finetune_epochs: int = 40
    latent_epochs: int = 400
    train_featurizer: bool = False
    top_k: int = 5
    methods: tuple[str, ...] = METHODS
    num_threads: int = 2
    warmup: int = 1
    repeats: int = 3
    min_seconds: float = 0.002


SMALL = Params(source_matrices=3, source_configs=5, source_min_rows=500, source_max_rows=1500,
               target_matrices=7, target_min_rows=500, target_max_rows=1500, finetune_matrices=2,
               val_matrices=1, finetune_configs=32, seeds=(0,), epochs=2, finetune_epochs=2, latent_epochs=20,
               repeats=1, min_seconds=0.0005)


# -- data ---------------------------------------------------------------------------------
def collect_data(params: Params, out: Path, *, kernel_cache: Path | None, progress: bool = True):
    """Measure (or reuse) source and target datasets; returns (source groups, target groups)."""
    from cognate_tvm.backends.cpu import LLVMBackend
    from cognate_tvm.backends.spade import SpadeBackend

    cpu, spade = create_space("cpu", params.op), create_space("spade", params.op)
    source = generate_corpus(params.source_matrices, seed=params.corpus_seed, min_rows=params.source_min_rows,
                             max_rows=params.source_max_rows)
    target = generate_corpus(params.target_matrices, seed=params.corpus_seed + 1,
                             min_rows=params.target_min_rows, max_rows=params.target_max_rows)
    shared = {e.name for e in source} & {e.name for e in target}
    if shared:
        raise ValueError(f"source and target corpora share matrices {sorted(shared)}; change --corpus-seed")
    configs = cpu.sample(params.source_configs, seed=params.corpus_seed)
    if cpu.baseline() not in configs:
        configs.append(cpu.baseline())  # every group needs its baseline time
    llvm = LLVMBackend(num_threads=params.num_threads, cache_dir=kernel_cache, warmup=params.warmup,
                       repeats=params.repeats, min_seconds=params.min_seconds)
    collect(llvm, params.op, source, configs, out / "source", feat=params.feat, progress=progress)
    collect(SpadeBackend(workers=params.num_threads), params.op, target, spade.configs(), out / "target",
            feat=params.feat, progress=progress)
    built = {e.name: e.build() for e in (*source, *target)}
    names_src, names_tgt = {e.name for e in source}, {e.name for e in target}
    src_frame, tgt_frame = load_frame(out / "source"), load_frame(out / "target")
    # a dataset dir may hold matrices of an earlier, larger run: use only this run's
    src = groups_from_frame(src_frame[src_frame["matrix"].isin(names_src) & (src_frame["feat"] == params.feat)],
                            space=cpu, matrices=built)
    tgt = groups_from_frame(tgt_frame[tgt_frame["matrix"].isin(names_tgt) & (tgt_frame["feat"] == params.feat)],
                            space=spade, matrices=built)
    return src, tgt


def split_target(params: Params, groups: list[Group], seed: int) -> tuple[list[Group], list[Group], list[Group]]:
    """Seeded fine-tune / validation / test split of the target matrices; fine-tune configs subsampled."""
    names = [g.name for g in groups]
    n = len(set(names))
    if params.finetune_matrices + params.val_matrices >= n:
        raise ValueError(f"{params.finetune_matrices} fine-tune + {params.val_matrices} validation matrices "
                         f"leave no test matrix of {n} target matrices")
    f_ft, f_val = params.finetune_matrices / n, params.val_matrices / n
    ft_names, val_names, test_names = split_by_matrix(names, fractions=(f_ft, f_val, 1.0 - f_ft - f_val),
                                                      seed=seed)
    rng = np.random.default_rng(seed)
    finetune = []
    for g in select(groups, ft_names):
        keep = np.sort(rng.choice(len(g.configs), min(params.finetune_configs, len(g.configs)), replace=False))
        finetune.append(Group(g.name, g.matrix, g.feat, tuple(g.configs[i] for i in keep), g.times_ms[keep]))
    return finetune, select(groups, val_names), select(groups, test_names)


# -- experiment ---------------------------------------------------------------------------
def model_config(params: Params) -> ModelConfig:
    return ModelConfig().replace(**{"train.epochs": params.epochs, "train.finetune_epochs": params.finetune_epochs,
                                    "train.train_featurizer": params.train_featurizer,
                                    "latent.epochs": params.latent_epochs})


def run_method(kind: str, seed: int, params: Params, *, source, finetune, val, test) -> dict:
    """Pre-train, fine-tune and evaluate one method for one seed; returns its metrics row."""
    cpu, spade = create_space("cpu", params.op), create_space("spade", params.op)
    start = time.perf_counter()
    model = baselines.create(kind, config=model_config(params), seed=seed,
                             xgb_options={"num_threads": params.num_threads})
    model.fit(source, space=cpu)
    if isinstance(model, CognateCostModel):
        model.finetune(finetune, space=spade, val_groups=val)  # validation picks the fine-tuning epoch
    else:
        model.finetune(finetune, space=spade)
    row = evaluate(model, test, space=spade, k=params.top_k)
    val_metrics = evaluate(model, val, space=spade, k=params.top_k)
    uses_target = kind not in ("zero_shot", "random")
    row.update(method=kind, seed=seed, val_pair_accuracy=val_metrics["pair_accuracy"],
               val_oracle_fraction_topk=val_metrics["oracle_fraction_topk"],
               target_samples=float(sum(len(g.configs) for g in finetune)) if uses_target else 0.0,
               source_samples=float(sum(len(g.configs) for g in source)) if kind not in ("no_transfer", "random")
               else 0.0, seconds=time.perf_counter() - start)
    return row


def summarize_runs(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows).drop(columns=["seed"])
    grouped = frame.groupby("method", sort=False)
    return pd.concat([grouped.mean(), grouped.std(ddof=0).add_suffix("_std")], axis=1)


def write_reports(params: Params, out: Path, rows: list[dict], summary: pd.DataFrame, info: dict) -> None:
    payload = {"params": dataclasses.asdict(params), "info": info, "runs": rows,
               "summary": {m: {k: float(v) for k, v in r.items()} for m, r in summary.iterrows()}}
    (out / "transfer.json").write_text(json.dumps(payload, indent=1))
    header = ["method"] + [title.format(k=params.top_k) for _, title in COLUMNS]
    lines = [f"# CPU -> SPADE transfer ({params.op}, N={params.feat})", "",
             f"Source: {info['source_groups']} matrices x {params.source_configs}+baseline CPU configs "
             f"(llvm, {params.num_threads} threads). Target: {info['target_groups']} matrices x all SPADE "
             f"configs; per seed {params.finetune_matrices} fine-tune (x {params.finetune_configs} configs), "
             f"{params.val_matrices} validation, the rest test. Seeds: {list(params.seeds)}; mean ± std over seeds. "
             f"Oracle speedup over the baseline config (test): "
             f"{summary['speedup_oracle'].iloc[0]:.3f}. top-{params.top_k} = the fastest of the model's "
             f"{params.top_k} best-scored configs.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, r in summary.iterrows():
        cells = [LABELS.get(method, method)]
        for key, _ in COLUMNS:
            cells.append(f"{r[key]:.0f}" if key == "target_samples" else f"{r[key]:.3f} ± {r[key + '_std']:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    (out / "transfer.md").write_text("\n".join(lines) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.1 * len(summary) + 2, 3.6))
    x = np.arange(len(summary))
    ax.bar(x, summary["oracle_fraction_topk"], yerr=summary["oracle_fraction_topk_std"], capsize=4,
           color=["tab:red" if m == "cognate" else "tab:blue" for m in summary.index])
    ax.set_xticks(x, [LABELS.get(m, m) for m in summary.index], rotation=20)
    ax.set_ylabel(f"top-{params.top_k} fraction of oracle (geomean)")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"CPU -> SPADE, {params.finetune_matrices} target matrices, {len(params.seeds)} seed(s)")
    fig.tight_layout()
    fig.savefig(out / "transfer.png", dpi=120)
    plt.close(fig)


def run(params: Params, out: Path, *, kernel_cache: Path | None, progress: bool = True) -> pd.DataFrame:
    """The whole experiment; returns the summary (one row per method, mean and *_std columns)."""
    import torch

    for kind in params.methods:
        if kind not in baselines.KINDS:
            raise UnknownKindError("method", kind, baselines.KINDS)
    torch.set_num_threads(params.num_threads)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    source, target = collect_data(params, out, kernel_cache=kernel_cache, progress=progress)
    collected = time.perf_counter() - start
    rows = []
    jobs = [(seed, kind) for seed in params.seeds for kind in params.methods]
    splits = {seed: split_target(params, target, seed) for seed in params.seeds}
    for seed, kind in tqdm(jobs, desc="methods x seeds", disable=not progress):
        finetune, val, test = splits[seed]
        rows.append(run_method(kind, seed, params, source=source, finetune=finetune, val=val, test=test))
        logger.info("seed %d %s: top-5/oracle %.3f (%.1f s)", seed, kind, rows[-1]["oracle_fraction_topk"],
                    rows[-1]["seconds"])
    summary = summarize_runs(rows)
    info = {"source_groups": len(source), "target_groups": len(target), "collect_seconds": collected,
            "total_seconds": time.perf_counter() - start, "test_matrices": len(splits[params.seeds[0]][2])}
    write_reports(params, out, rows, summary, info)
    return summary


def parse_args(argv: list[str] | None) -> tuple[Params, argparse.Namespace]:
    defaults = Params()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/transfer"))
    parser.add_argument("--small", action="store_true", help="CI size (few matrices and configs, 1 seed)")
    parser.add_argument("--kernel-cache", type=Path, default=None,
                        help="compiled-kernel cache (default: the llvm backend's own)")
    parser.add_argument("--no-progress", action="store_true")
    flags = {"op": str, "feat": int, "corpus_seed": int, "source_matrices": int, "source_configs": int,
             "source_min_rows": int, "source_max_rows": int, "target_matrices": int, "target_min_rows": int,
             "target_max_rows": int, "finetune_matrices": int, "val_matrices": int, "finetune_configs": int,
             "epochs": int, "finetune_epochs": int, "latent_epochs": int, "top_k": int, "num_threads": int,
             "repeats": int}
    for name, kind in flags.items():
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                            help=f"default {getattr(defaults, name)} (--small: {getattr(SMALL, name)})")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help=f"default {list(defaults.seeds)}")
    parser.add_argument("--methods", nargs="+", default=None, choices=baselines.KINDS,
                        help=f"default {' '.join(defaults.methods)}")
    parser.add_argument("--train-featurizer", action="store_true", default=None,
                        help="also train the sparse-conv featurizer in pre-training (slow)")
    args = parser.parse_args(argv)
    params = SMALL if args.small else defaults
    changes = {name: getattr(args, name) for name in (*flags, "train_featurizer") if getattr(args, name) is not None}
    if args.seeds is not None:
        changes["seeds"] = tuple(args.seeds)
    if args.methods is not None:
        changes["methods"] = tuple(args.methods)
    return dataclasses.replace(params, **changes), args


def main(argv: list[str] | None = None) -> int:
    params, args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from cognate_tvm.kernels.cache import DEFAULT_CACHE_DIR

    summary = run(params, args.out, kernel_cache=args.kernel_cache or DEFAULT_CACHE_DIR,
                  progress=not args.no_progress)
    print((args.out / "transfer.md").read_text())
    logger.info("wrote %s", args.out)
    return 0 if len(summary) == len(params.methods) else 1


if __name__ == "__main__":
    raise SystemExit(main())
