"""Pre-train the CPU cost model of one op on a collected CPU dataset, evaluate it, ship it.

    python benchmarks/pretrain.py --op spmm --data DATA/cpu_spmm --corpus synthetic:300:2026 --max-rows 100000
    python benchmarks/pretrain.py --op spmm --data DATA/cpu_spmm_2t --corpus synthetic:300:2026 --init shipped

The dataset comes from `python -m cognate_tvm.collect --target llvm` (see
docs/pretraining.md for the exact collection commands); its matrices are
rebuilt from the same corpus spec. The corpus's matrix names are split into
train / validation / test (70/15/15, seeded), so a dataset of a subset of the
corpus keeps each matrix in the part it has in the whole. COGNATE is trained on
train with the featurizer trained end to end; validation picks the epoch.
``--init shipped|DIR`` starts from a saved model's weights instead (the shipped
single-thread CPU model, for a dataset timed on several threads) and adds that
model, as it is, to the methods; an ``--init`` model fitted before knobs were appended to the space
(CPU ``block_rows``) gets a new knob encoder fitted on all of them (`CognateCostModel.refit_knob_encoder`)
before it is trained. Every method is then scored on the test
matrices, each choosing among the configs measured on that matrix:

- COGNATE (the shipped model), the XGBoost ranker, the best fixed config (one
  global order learned on train, `baselines.BestFixedRanker`), random;
- top-1 and top-5 as a fraction of the best measured config, speedup over the
  baseline config, ordered-pair accuracy, Kendall's tau, also per dense width.

The model keeps the train split's best fixed configs (`CognateCostModel.fixed_configs`;
`tune` measures the first beside its picks); ``--fixed-only`` computes just those
for the model already at ``--ship`` and saves it again, weights untouched (for a
model shipped before models kept them).

Writes the model to ``--ship`` (default: the package's pretrained/<op>-cpu, or
<op>-cpu-<T>t for data timed on T > 1 threads) with a MODEL_CARD.md, and
``pretrain_<op>.json``, ``.md`` and ``.png`` to ``--out``.
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from cognate_tvm import baselines
from cognate_tvm.data import groups_from_frame, load_frame, select, split_by_matrix
from cognate_tvm.matrix.corpus import load_corpus
from cognate_tvm.model import ModelConfig
from cognate_tvm.model.cognate import FIXED_MIN_GROUPS, CognateCostModel
from cognate_tvm.model.pretrained import CARD_FILE, load_pretrained, model_card, pretrained_path, threaded_platform
from cognate_tvm.space import create as create_space
from cognate_tvm.train import evaluate
from common import figure, setup_logging

logger = logging.getLogger("pretrain")

METHODS = ("cognate", "xgboost", "best_fixed", "random")
LABELS = {"cognate": "COGNATE (shipped)", "init": "the --init model, not trained here", "xgboost": "XGBoost ranker",
          "best_fixed": "best fixed config", "random": "random"}
METRICS = (("oracle_fraction_top1", "top-1 / best"), ("oracle_fraction_topk", "top-5 / best"),
           ("speedup_top1", "top-1 speedup"), ("speedup_topk", "top-5 speedup"),
           ("speedup_oracle", "best speedup"), ("pair_accuracy", "pair acc."), ("kendall_tau", "Kendall tau"))


def load_groups(args, space):
    frame = pd.concat([load_frame(path) for path in args.data], ignore_index=True)
    frame = frame[(frame["op"] == args.op) & (frame["platform"] == space.platform)]
    if frame.empty:
        raise SystemExit(f"error: {' '.join(map(str, args.data))} holds no {args.op}/{space.platform} measurements")
    corpus = {e.name: e for spec in args.corpus
              for e in load_corpus(spec, min_rows=args.min_rows, max_rows=args.max_rows)}
    skipped = []

    def skip(name, error):
        logger.warning("left out: %s", error)
        skipped.append(name)

    groups = [g for g in groups_from_frame(frame, space=space, matrices=corpus,
                                           on_mismatch=skip if args.skip_mismatched else None)
              if len(g.configs) >= 2]
    if skipped:
        logger.warning("%d matrices build differently on this machine than where they were timed; left out: %s",
                       len(skipped), ", ".join(skipped))
    return frame, groups, skipped


def data_threads(frame) -> list[int]:
    """The thread counts the dataset was timed on (from each part's backend metadata)."""
    return sorted({int(json.loads(b).get("num_threads") or 1) for b in frame["backend"].unique()})


def load_init(args, platform: str) -> CognateCostModel | None:
    """The --init model: a directory, or 'shipped': the package's model of --op for the data's threads
    (`platform`, e.g. cpu-2t), not the 1-thread one."""
    if args.init is None:
        return None
    return load_pretrained(args.op, platform) if args.init == "shipped" else CognateCostModel.load(args.init)


def fit_cognate(train, val, space, args, init: CognateCostModel | None) -> CognateCostModel:
    """A fresh model (hyperparameters from --hparams), or a copy of `init`, trained on `train`."""
    overrides = json.loads(args.hparams.read_text()) if args.hparams else {}
    changes = {"train.epochs": args.epochs, "train.lr": args.lr, "train.train_featurizer": True}
    if args.locality:
        changes["featurizer.locality"] = True
    if init is None:
        model = CognateCostModel(ModelConfig().replace(**{**overrides, **changes}), seed=args.seed,
                                 progress=not args.quiet)
    else:
        widen = args.locality and not init.config.featurizer.locality  # an init that reads it already is kept
        model = init.with_locality_stats() if widen else copy.deepcopy(init)
        model.config = model.config.replace(**{**overrides, **changes})
        model.history = []
        if model.encoder_for(space).width < len(space.knob_names):  # init predates knobs of the space
            model.refit_knob_encoder(space)
    return model.fit(train, space=space, val_groups=val)


def evaluate_all(models: dict, test, space, corpora: dict[str, set[str]] | None = None) -> dict:
    """metrics[method] over all test groups, per dense width and (several corpora) per corpus spec."""
    out = {}
    for name, model in models.items():
        row = {"all": evaluate(model, test, space=space, k=5)}
        for feat in sorted({g.feat for g in test}):
            row[f"N={feat}"] = evaluate(model, [g for g in test if g.feat == feat], space=space, k=5)
        for spec, names in (corpora if corpora and len(corpora) > 1 else {}).items():
            groups = [g for g in test if g.name in names]
            if groups:
                row[spec] = evaluate(model, groups, space=space, k=5)
        out[name] = row
    return out


def markdown(results: dict, subset: str) -> str:
    lines = ["| method | " + " | ".join(h for _, h in METRICS) + " |",
             "|---|" + "---|" * len(METRICS)]
    for name, row in results.items():
        cells = [f"{row[subset][key]:.3f}" for key, _ in METRICS]
        lines.append(f"| {LABELS[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict, path: Path, op: str) -> None:
    names = list(results)
    x = np.arange(len(names))
    with figure(path, figsize=(7, 3.5)) as (_, ax):
        for offset, (key, label) in zip((-0.2, 0.2), METRICS[:2]):
            ax.bar(x + offset, [results[n]["all"][key] for n in names], width=0.4, label=label)
        ax.set_xticks(x, [LABELS[n] for n in names], fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.axhline(1.0, color="k", lw=0.5)
        ax.set_ylabel("geomean fraction of best measured")
        ax.set_title(f"CPU {op}: picks on unseen test matrices")
        ax.legend(fontsize=8)


FIXED_HEADING = "## Best fixed configs"


def fixed_section(model: CognateCostModel, space) -> str:
    """The model card's list of the model's best fixed configs, with the command that made it."""
    configs = "\n".join(f"{n}. `{c.to_json()}`" for n, c in enumerate(model.fixed_configs(space), start=1))
    command = " ".join(["python benchmarks/pretrain.py"] + sys.argv[1:])
    return f"""{FIXED_HEADING}

The configs with the lowest mean ln(time / the matrix's best time) over the train matrices
that timed them (at least {FIXED_MIN_GROUPS}), among those `tune` ranks on the data's thread count,
best first. `tune` measures the first beside the
model's picks (`--fixed`). Written by `{command}`.

{configs}
"""


def refresh_fixed(ship: Path, train, space, threads: int) -> int:
    """--fixed-only: the saved model at `ship` gets the best fixed configs of `train`; weights unchanged."""
    model = CognateCostModel.load(ship)
    model.remember_fixed(train, space, among=space.candidates(threads))
    model.save(ship)
    section = fixed_section(model, space)
    card = (ship / CARD_FILE).read_text()
    (ship / CARD_FILE).write_text(card.split(FIXED_HEADING)[0].rstrip("\n") + "\n\n" + section)
    print(section)
    return 0


def matrices_fact(frame, corpora: dict[str, set[str]]) -> str:
    """How many matrices the data holds, and (several corpora) how many of each."""
    names = set(frame["matrix"].unique())
    if len(corpora) == 1:
        return f"{len(names)} matrices"
    return f"{len(names)} matrices, " + " and ".join(f"{len(names & members)} of `{spec}`"
                                                      for spec, members in corpora.items())


def card_text(args, frame, split, results, model, seconds, platform: str, corpora: dict[str, set[str]],
              left_out: list[str] = ()) -> str:
    feats = sorted(int(f) for f in frame["feat"].unique())
    train = model.config.train
    metric = f"val_{train.select_metric}"
    best_epoch = max(model.history, key=lambda r: r.get(metric, -1)) if model.history else {}
    if train.loss == "slowdown":
        loss = "regression of each config's ln(time / the matrix's best time) (`train.loss = \"slowdown\"`)"
    else:
        loss = "pairwise margin ranking loss" + (", pairs weighted by |log time ratio|"
                                                 if train.pair_weighting == "log_ratio" else "")
    command = " ".join(["python benchmarks/pretrain.py"] + sys.argv[1:])
    threads = ", ".join(str(t) for t in data_threads(frame))
    start = "" if args.init is None else f"starting from the weights of `{args.init}` (`--init`), "
    facts = [
        f"Platform: cpu (`llvm`, TVM-compiled TensorIR kernels, timed on {threads} thread(s)); shipped as\n"
        f"  `{args.op}-{platform}`, which `tune` loads for kernels on that many threads. Format: "
        "`CognateCostModel.save`.",
        f"Data: {matrices_fact(frame, corpora)} (corpus `{' + '.join(args.corpus)}`, "
        f"{args.min_rows}-{args.max_rows}\n  rows unless the spec says, all families), {len(frame)} measurements "
        f"({int(frame['time_ms'].isna().sum())} failed), dense widths\n  {feats}; measured with `python -m cognate_tvm.collect` (docs/pretraining.md).",
        f"Split by matrix (seed {args.split_seed}): {len(split[0])} train / {len(split[1])} validation / "
        f"{len(split[2])} test.",
        f"Training: {start}{loss}, featurizer trained end to end, {args.epochs} epochs max,\n"
        f"  lr {args.lr}; validation {train.select_metric.replace('_', ' ')} picked epoch {best_epoch.get('epoch')}\n"
        f"  ({best_epoch.get(metric, float('nan')):.3f}). {seconds:.0f} s on this machine."]
    if left_out:
        facts.append(f"Left out (`--skip-mismatched`): {len(left_out)} matrices that build differently on this "
                     f"machine than where they were timed: {', '.join(left_out)}.")
    return model_card(title=f"cognate-tvm pre-trained CPU cost model: {args.op} ({platform})", facts=facts,
                      table=markdown(results, "all"), command=command,
                      table_heading="Test split (unseen matrices; each method picks among the configs measured on "
                                    "the matrix)",
                      after=fixed_section(model, create_space("cpu", args.op)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--op", required=True, choices=("spmm", "sddmm"))
    parser.add_argument("--data", required=True, nargs="+",
                        help="dataset directories from cognate_tvm.collect (e.g. one per dense width)")
    parser.add_argument("--corpus", required=True, nargs="+",
                        help="the corpus specs the data was collected on (each split on its own, so a matrix "
                             "keeps its part whatever corpora train beside it)")
    parser.add_argument("--min-rows", type=int, default=1000)
    parser.add_argument("--max-rows", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hparams", type=Path, default=None,
                        help='JSON of ModelConfig overrides, e.g. {"featurizer.stem_channels": 16}')
    parser.add_argument("--init", default=None,
                        help="start from a saved model: 'shipped' (the package's CPU model of --op for the data's "
                             "thread count) or a directory")
    parser.add_argument("--locality", action="store_true",
                        help="the featurizer also reads each matrix's locality_profile (with --init: the init "
                             "model widened, its new inputs starting at zero weight; docs/transfer.md)")
    parser.add_argument("--ship", type=Path, default=None,
                        help="where to save the model (default: package data, <op>-cpu or <op>-cpu-<T>t)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/pretrain"))
    parser.add_argument("--fixed-only", action="store_true",
                        help="only compute the train split's best fixed configs for the model at --ship, and save it")
    parser.add_argument("--skip-mismatched", action="store_true",
                        help="leave out the matrices that build differently on this machine than where the data "
                             "was timed (a reverse Cuthill-McKee numbering follows numpy's CPU-dependent sort), "
                             "listing them in the report, instead of stopping")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    setup_logging()
    torch.set_num_threads(args.threads)
    space = create_space("cpu", args.op)
    frame, groups, skipped = load_groups(args, space)
    corpora = {spec: [e.name for e in load_corpus(spec, min_rows=args.min_rows, max_rows=args.max_rows)]
               for spec in args.corpus}
    parts = [split_by_matrix(names, seed=args.split_seed) for names in corpora.values()]
    split = tuple([name for part in parts for name in part[n]] for n in range(3))
    train, val, test = (select(groups, names) for names in split)
    present = {g.name for g in groups}
    split = tuple([name for name in part if name in present] for part in split)
    logger.info("%d groups: %d train, %d validation, %d test", len(groups), len(train), len(val), len(test))
    threads = data_threads(frame)
    if len(threads) != 1:
        raise SystemExit(f"error: the data mixes timings on {threads} threads; train one model per thread count")
    platform = threaded_platform(space.platform, threads[0])
    if args.fixed_only:
        return refresh_fixed(args.ship or pretrained_path(args.op, platform), train, space, threads[0])
    init = load_init(args, platform)
    start = time.perf_counter()
    model = fit_cognate(train, val, space, args, init)
    model.remember_fixed(train, space, among=space.candidates(threads[0]))  # the configs tune ranks there
    seconds = time.perf_counter() - start
    others = {name: baselines.create(name, seed=args.seed).fit(train, space=space) for name in METHODS[1:]}
    methods = {"cognate": model, **({"init": init} if init is not None else {}), **others}
    by_corpus = {spec: set(names) for spec, names in corpora.items()}
    results = evaluate_all(methods, test, space, by_corpus)
    results_val = evaluate_all(methods, val, space, by_corpus)
    ship = args.ship or pretrained_path(args.op, platform)
    model.save(ship)
    card = card_text(args, frame, split, results, model, seconds, platform, by_corpus, left_out=skipped)
    (ship / CARD_FILE).write_text(card)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"op": args.op, "split": {"train": split[0], "validation": split[1], "test": split[2]},
              "test": results, "validation": results_val, "history": model.history, "train_seconds": seconds,
              "best_fixed_config": others["best_fixed"].best(), "measurements": int(len(frame)),
              "left_out_mismatched": skipped}
    (args.out / f"pretrain_{args.op}.json").write_text(json.dumps(report, indent=1, default=float))
    table = "\n\n".join(f"### {subset}\n\n{markdown(results, subset)}" for subset in results["cognate"])
    (args.out / f"pretrain_{args.op}.md").write_text(table + "\n")
    plot(results, args.out / f"pretrain_{args.op}.png", args.op)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
