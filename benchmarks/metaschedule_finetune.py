"""Fine-tune the shipped CPU model on MetaSchedule's own kernels: the model `CognateModel()` loads.

The shipped CPU models learned the hand-written kernels that `tune` measures. `tune_sparse` builds
the same configs from its own schedule (`metaschedule.schedule_config`), whose kernels time
differently (docs/metaschedule.md), so the model ranks the configs of a MetaSchedule search by
the wrong kernels. This script

1. generates training matrices (corpus `--corpus`, a seed other than the comparison's matrices),
2. measures on each the baseline (where reachable), `--uniform` configs sampled over the MetaSchedule space's
   candidates at `--threads` (every knob value covered) and `--top` drawn from the shipped model's
   3 x `--top` best-ranked of them (where a search looks first), as `tune_sparse` builds them
   (`metaschedule.MetaScheduleBackend`: side by side, outputs checked against scipy),
   into a resumable dataset (`--data`),
3. fine-tunes the shipped `<op>-cpu-<T>t` model on the train matrices, once per learning rate of
   `--lrs`; the validation matrices choose the epoch and the learning rate,
4. reports the test matrices: the fine-tuned model, the shipped one, the best fixed config
   (chosen on the train matrices) and random picks (top-1 and top-8 of the measured configs,
   ordered-pair accuracy, Kendall's tau),
5. with `--ship`, writes the model as ``pretrained/<op>-cpu-metaschedule-<T>t`` with a model card.

    python benchmarks/metaschedule_finetune.py --op spmm --threads 2 --data data/ms_spmm_2t \\
        --out docs/results/ms_finetune --ship
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
import torch

from cognate_tvm import baselines
from cognate_tvm.metaschedule import MetaScheduleBackend
from cognate_tvm.data import collect, groups_from_frame, load_frame, select, split_by_matrix
from cognate_tvm.matrix.corpus import load_corpus
from cognate_tvm.metaschedule import METASCHEDULE_PLATFORM, reachable_configs
from cognate_tvm.model.pretrained import CARD_FILE, PRETRAINED_DIR, model_card, threaded_platform
from cognate_tvm.space.cpu import CPUSpace
from cognate_tvm.train import evaluate as evaluate_group_set
from cognate_tvm.model.loading import load_shipped_model
from common import setup_logging

log = logging.getLogger("metaschedule_finetune")

TOP_K = 8  # a search's first batch
LABELS = {"finetuned": "COGNATE fine-tuned on MetaSchedule kernels", "shipped": "COGNATE shipped (tune's kernels)",
          "best_fixed": "best fixed config (train matrices)", "random": "random"}
METRICS = (("oracle_fraction_top1", "top-1 / best"), ("oracle_fraction_topk", f"top-{TOP_K} / best"),
           ("pair_accuracy", "pair acc."), ("kendall_tau", "Kendall tau"))


def plan_configs(corpus, space: CPUSpace, shipped, *, feat: int, threads: int, uniform: int, top: int,
                 seed: int) -> dict:
    """{matrix name: the baseline, `uniform` covering draws and `top` draws from the shipped model's best}."""
    candidates = set(space.candidates(threads))
    reachable = [c for c in reachable_configs(space.op, feat) if c in candidates]
    out = {}
    for n, entry in enumerate(corpus):
        sampled = space.sample_covering(uniform, seed=[seed, n], configs=reachable)
        ranked = shipped.rank(entry.build(), reachable, space=space, feat=feat)[:3 * top]
        rng = np.random.default_rng([seed, n, 1])
        best = [ranked[i] for i in sorted(rng.choice(len(ranked), size=min(top, len(ranked)), replace=False))]
        # the baseline where MetaSchedule reaches it (its dense tile is 128: not at N < 128)
        baseline = [space.baseline()] if space.baseline() in reachable else []
        out[entry.name] = list(dict.fromkeys([*baseline, *sampled, *best]))
    return out


def evaluate(model, groups, space) -> dict:
    """`train.evaluate` at k = TOP_K. Only fractions of each matrix's best are reported, which need no
    baseline; groups without a measured baseline get their median time as one (unreported speedups)."""
    base = space.baseline()
    reference = {(g.name, g.feat): float(np.nanmedian(g.times_ms)) for g in groups
                 if base not in g.configs or not np.isfinite(g.times_ms[list(g.configs).index(base)])}
    return evaluate_group_set(model, groups, space=space, k=TOP_K, baseline_ms=reference)


def fine_tune(shipped, train, val, space, lrs, epochs: int):
    """The fine-tuned copy of `shipped` with the best validation top-1 over `lrs` (each: its best epoch)."""
    best = None
    for lr in lrs:
        model = copy.deepcopy(shipped)
        model.history = []
        model.finetune(train, space=space, lr=lr, epochs=epochs, val_groups=val)
        score = evaluate(model, val, space)["oracle_fraction_top1"]
        log.info("lr %g: validation top-1 / best %.3f", lr, score)
        if best is None or score > best[0]:
            best = (score, lr, model)
    return best


def report(models: dict, test, space) -> dict:
    return {name: evaluate(model, test, space) for name, model in models.items()}


def markdown(results: dict) -> str:
    lines = ["| method | " + " | ".join(h for _, h in METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for name, row in results.items():
        lines.append(f"| {LABELS[name]} | " + " | ".join(f"{row[k]:.3f}" for k, _ in METRICS) + " |")
    return "\n".join(lines)


def card_text(args, frame, split, results, lr, val_score, seconds, name: str) -> str:
    command = " ".join(["python benchmarks/metaschedule_finetune.py"] + sys.argv[1:])
    facts = [
        f"What for: `CognateModel()` loads it in `tune_sparse` searches of {args.op} on {args.threads} thread(s)\n"
        "  (docs/metaschedule.md). It ranks configs of the CPU space as MetaSchedule builds them\n"
        "  (`metaschedule.schedule_config`), not as `tune` does.",
        f"Start: the shipped `{args.op}-{threaded_platform('cpu', args.threads)}` model (tune's kernels), fine-tuned.",
        f"Data: {frame['matrix'].nunique()} generated matrices (corpus `{args.corpus}`, {args.min_rows}-{args.max_rows} "
        f"rows),\n  {len(frame)} measurements ({int(frame['time_ms'].isna().sum())} failed) at N = {args.feat}, timed "
        f"with\n  `metaschedule.MetaScheduleBackend` ({args.rounds} side-by-side rounds per matrix, outputs checked).\n"
        f"  Per matrix: the baseline (where reachable), {args.uniform} configs sampled over the space, {args.top} of the "
        f"shipped model's\n  {3 * args.top} best-ranked. Stored in `{args.data}`.",
        f"Split by matrix (seed {args.split_seed}): {len(split[0])} train / {len(split[1])} validation / "
        f"{len(split[2])} test.",
        f"Fine-tuning: the model's fine-tune recipe (frozen parts from its config), up to {args.epochs} epochs;\n"
        f"  validation top-1 chose lr {lr:g} of {args.lrs} and its epoch ({val_score:.3f}). {seconds:.0f} s in all."]
    return model_card(title=f"cognate-tvm cost model of MetaSchedule's CPU kernels: {args.op} ({name.split('-', 1)[1]})",
                      facts=facts, table=markdown(results), command=command,
                      table_heading="Test matrices (each method picks among the configs measured on the matrix)")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", default="spmm", choices=["spmm", "sddmm"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--feat", type=int, default=128)
    parser.add_argument("--corpus", default="synthetic:20:9300000")
    parser.add_argument("--min-rows", type=int, default=4000)
    parser.add_argument("--max-rows", type=int, default=200000)
    parser.add_argument("--uniform", type=int, default=16)
    parser.add_argument("--top", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lrs", type=float, nargs="+", default=[5e-4, 1e-3, 2e-3])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, required=True, help="dataset directory (resumable)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ship", action="store_true", help="write pretrained/<op>-cpu-metaschedule-<T>t")
    parser.add_argument("--pretrained-dir", type=Path, default=PRETRAINED_DIR,
                        help="where the CPU model is read from and --ship writes (default: the package's)")
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    setup_logging()
    torch.manual_seed(args.seed)
    start = time.time()
    space = CPUSpace(args.op)
    shipped, source, _ = load_shipped_model(args.op, "cpu", root=args.pretrained_dir, threads=args.threads)
    log.info("starting from %s", source)
    corpus = load_corpus(args.corpus, min_rows=args.min_rows, max_rows=args.max_rows)
    configs = plan_configs(corpus, space, shipped, feat=args.feat, threads=args.threads, uniform=args.uniform,
                           top=args.top, seed=args.seed)
    backend = MetaScheduleBackend(num_threads=args.threads, rounds=args.rounds)
    collect(backend, args.op, corpus, configs, args.data, feat=args.feat, check=True, seed=args.seed,
            progress=not args.quiet)
    frame = load_frame(args.data)
    frame = frame[(frame["op"] == args.op) & (frame["feat"] == args.feat)]
    groups = [g for g in groups_from_frame(frame, space=space, matrices={e.name: e for e in corpus})
              if np.isfinite(g.times_ms).sum() >= 2]
    split = split_by_matrix(sorted(g.name for g in groups), seed=args.split_seed)
    train, val, test = (select(groups, names) for names in split)
    val_score, lr, model = fine_tune(shipped, train, val, space, args.lrs, args.epochs)
    fixed = baselines.BestFixedRanker().fit(train, space=space)
    results = report({"finetuned": model, "shipped": shipped, "best_fixed": fixed,
                      "random": baselines.RandomRanker(seed=args.seed)}, test, space)
    seconds = time.time() - start
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"results": results, "lr": lr, "val_top1": val_score, "seconds": seconds,
               "split": [list(s) for s in split], "measurements": int(len(frame)),
               "failed": int(frame["time_ms"].isna().sum())}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "summary.md").write_text(markdown(results) + "\n")
    print(markdown(results))
    print(f"lr {lr:g} (validation top-1 {val_score:.3f}); {seconds:.0f} s")
    if args.ship:
        name = f"{args.op}-{threaded_platform(METASCHEDULE_PLATFORM, args.threads)}"
        ship = args.pretrained_dir / name
        model.save(ship)
        (ship / CARD_FILE).write_text(card_text(args, frame, split, results, lr, val_score, seconds, name))
        print(f"shipped {ship}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
