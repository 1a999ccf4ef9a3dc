"""CPU -> SPADE transfer at the paper's protocol, for SpMM and SDDMM.

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
(docs/transfer.md: it helps TL5, and can collapse beyond with no data left
to stop it). A refit that ranks the matrices it was trained on worse than the validated
model does is rejected, and the validated model kept (`guarded_refit`).

``--ensemble-sizes 1 2 3 5``: validation may choose, per learned method and seed, to score with the
mean of the standardized scores of its grid's m best models (`RankEnsemble`) instead of the best one;
a larger m must validate strictly better. With ``--refit`` each member is refit (and guarded) on its
own. Default 1: no ensembles (docs/transfer.md: they narrow the worst case, not the gap).

``--target-loss listwise``: every network trained on SPADE data uses ListNet's loss, which weighs each
matrix's fastest configs (``--listwise-temperature``), instead of its source model's own (the shipped
CPU models': slowdown). ``--audit-grid``: every grid point of TLk and NTn is also scored on the test
matrices after validation has chosen (recorded, never used for a choice): what a perfect choice among
the grid would reach (docs/transfer.md).

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
from pathlib import Path
from typing import Sequence

import numpy as np

from cognate_tvm import baselines
from cognate_tvm.space.sampling import config_sample
from cognate_tvm.data import Group, collect, groups_from_frame, load_frame, select, split_by_matrix
from cognate_tvm.matrix.corpus import load_corpus
from cognate_tvm.model import ModelConfig
from cognate_tvm.model.cognate import CognateCostModel, RankingModel
from cognate_tvm.model.pretrained import CARD_FILE, PRETRAINED_DIR, load_pretrained, model_card, pretrained_path
from cognate_tvm.space import create as create_space
from cognate_tvm.train import LOSSES
from cognate_tvm.transfer import (COLUMNS, SIZES, OracleRanker, Params, evaluate_groups, finetune_draw,
                                  finetune_on_validation, label, pretrain_from_scratch, pretrain_variant,
                                  refit_text, samples, shown_path, source_sizes, summarize_runs, target_data,
                                  train_no_transfer, warm_embeddings, with_eval_matrices, with_pool_matrices,
                                  write_markdown, xgboost_on_validation)
from common import figure, setup_logging

logger = logging.getLogger("transfer")


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
        pool = cpu.sample_covering(max(24, 2 * params.cpu_configs), seed=params.data_seed)  # >= every knob value
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
    facts = [
        f"Platform: spade (the C++ SPADE model, `backends.create(\"spade\")`, default hardware), dense width "
        f"{params.feat}.\n  Format: `CognateCostModel.save`; load with `load_pretrained(\"{op}\", \"spade\")`.\n"
        f"  SPADE knob encoder: {model.net.get_encoder('spade').kind}.",
        f"Pre-trained: the CPU model {shown_path(info['cpu_model'].get('path', info['cpu_model']['source']))}\n"
        f"  (weights sha1 {info['cpu_model'].get('weights_sha1', 'n/a')}).",
        f"Fine-tuned on 5 SPADE matrices x {params.pool_configs} sampled configs (+ the baseline config), drawn\n"
        f"  ({params.finetune_draw}) with seed {params.seeds[0]} from the pool `{params.pool_corpus}` "
        f"({params.pool_min_rows}-{params.pool_max_rows} rows):\n  {', '.join(names)}.",
        f"Validation: {len(info['validation_matrices'])} matrices of `{params.eval_corpus}`\n"
        f"  ({params.eval_min_rows}-{params.eval_max_rows} rows) x {params.val_configs} sampled configs\n"
        f"  ({info['validation_samples']} samples); it chose the recipe: frozen "
        f"{', '.join(recipe['freeze']) or 'nothing'},\n"
        f"  head {'re-initialized' if recipe.get('head_reinitialized') else 'pre-trained'},\n"
        f"  lr {recipe['lr']}, epoch {recipe['epoch_kept']} of {recipe['epochs_max']} (best validation\n"
        f"  {info['select_metric'].replace('_', ' ')}){refit_text(recipe)}.",
        f"Target samples used: {test_row['target_samples']:.0f} (fine-tune + validation).",
        f"Test: {len(info['test_matrices'])} other matrices of the evaluation corpus, all 256 configs each; oracle / "
        f"baseline\n  config {info['headroom']['test_oracle_over_baseline']:.3f}x, best fixed config in hindsight / "
        f"oracle\n  {info['headroom']['test_best_fixed_in_hindsight_over_oracle']:.3f}."]
    table = f"| metric (top-k: k = {params.top_k}) | validation | test |\n|---|---|---|\n{metric_rows}"
    card = model_card(title=f"cognate-tvm SPADE cost model: {op} (COGNATE TL5)", facts=facts, table=table,
                      command=command, rebuild_note=" (docs/transfer.md).")
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


def plot(op: str, result: dict, params: Params, out: Path, stem: str) -> None:
    seed = params.seeds[0]
    pm = result["per_matrix"]
    oracle = pm["oracle"][seed]
    base = np.array([r["baseline_ms"] for r in oracle])
    order = np.argsort(base / np.array([r["oracle_ms"] for r in oracle]))
    tl = "tl5"
    nt_mid = f"nt{params.nt_sizes[len(params.nt_sizes) // 2]}"
    with figure(out / f"{stem}_per_matrix.png", figsize=(9, 3.8)) as (_, ax):
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
    if not any(m.startswith("nt") for m in result["summary"]):
        return

    summary = result["summary"]
    with figure(out / f"{stem}_efficiency.png", figsize=(6, 3.8)) as (_, ax):
        plot_efficiency(ax, op, summary, params)


def plot_efficiency(ax, op: str, summary: dict, params: Params) -> None:
    """Top-1 oracle fraction against target samples: COGNATE TLk and NTn, with the baselines as lines."""
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


# -- CLI -----------------------------------------------------------------------------------------
# Params fields that the flag of the same name replaces: when it is set, or for the recipe grid's,
# when it is given at all (a list becomes the tuple Params holds)
OVERRIDES = ("ops", "seeds", "threads", "select_metric", "finetune_draw", "finetune_include", "refit",
             "target_knob_encoder", "target_loss", "listwise_temperature", "pool_max_rows")
GRID_OVERRIDES = ("finetune_epochs", "lrs", "reinit_lrs", "nt_epochs", "nt_lrs", "anchors", "ensemble_sizes")


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
    changes = {name: getattr(args, name) for name in OVERRIDES if getattr(args, name)}
    changes.update({name: getattr(args, name) for name in GRID_OVERRIDES if getattr(args, name) is not None})
    changes = {name: tuple(value) if isinstance(value, list) else value for name, value in changes.items()}
    if args.pool_matrices:
        params = with_pool_matrices(params, args.pool_matrices)
    if args.curve_only and (args.ablations or args.ablations_only or args.ship_only or args.ship):
        parser.error("--curve-only runs neither ablations nor shipping")
    if args.ship and args.ensemble_sizes and max(args.ensemble_sizes) > 1:
        parser.error("--ship writes one network: it does not go with --ensemble-sizes above 1")
    if args.eval_matrices:
        params = with_eval_matrices(params, args.eval_matrices)
    # explicit sizes win over the pool cap above (run_op rejects sizes beyond the pool)
    if args.ks:
        changes["ks"] = tuple(sorted(set(args.ks)))
    if args.nt_sizes:
        changes["nt_sizes"] = tuple(sorted(set(args.nt_sizes)))
    return dataclasses.replace(params, **changes), args


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    params, args = parse_args(argv)
    setup_logging()
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
