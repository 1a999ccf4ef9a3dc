"""CPU -> GPU transfer on recorded GPU sweeps, at the paper's protocol scaled to a few dozen matrices.

    python benchmarks/gpu_transfer.py --data 'data/gpu_h200_{op}' --cpu-data 'data/cpu_{op}_1t_znver3' \\
        --cpu-corpus synthetic:300:2026 --out docs/results/gpu_transfer [--seeds 0 1 2 3 4] [--ship DIR]

Target data: an imported sweep dataset per op (`cognate_tvm.sweeps`: every config of the
GPU space timed on each matrix, the matrices rebuilt from their generator arguments).
Splits are by matrix: a fixed validation set (``--val-matrices``, one seeded draw per nnz
stratum, the same for every seed, ``--val-configs`` sampled configs each); for each seed a
seeded permutation of the other matrices gives the training matrices (the first
max(ks)) and the test matrices (the rest, every config). TLk fine-tunes the shipped CPU
model on the first k training matrices (nested), each with ``--train-configs`` sampled
configs plus the baseline; NTk trains the same network on them from scratch (NT at the
largest k: on all training matrices). WACO+FA/FM and XGBoost are pre-trained on the CPU
data and fine-tuned on the TL5 matrices; the best fixed config is chosen on the TL5 and
validation matrices; random-k measures as many configs as top-k; the oracle is the swept
best. Validation makes every choice (recipe, epoch, boosting rounds); test is only scored.

The protocol's pieces (recipe grids, validation choice, scoring, tables) are those of
``benchmarks/transfer.py``; this driver supplies the GPU data and the splits. Outputs under
``--out``: ``gpu_transfer_<op>.json`` (everything, with each seed's matrices),
``gpu_transfer_<op>.md`` (mean ± std over seeds, the command) and ``gpu_transfer_<op>.png``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import transfer  # noqa: E402

from cognate_tvm import baselines  # noqa: E402
from cognate_tvm.data import Group, load_frame, pick_across_sizes  # noqa: E402
from cognate_tvm.model.cognate import CognateCostModel  # noqa: E402
from cognate_tvm.space import create as create_space  # noqa: E402
from cognate_tvm.sweeps import load_sweep_groups  # noqa: E402

logger = logging.getLogger("gpu_transfer")
PLATFORM = "gpu"
SPLIT_FILE = "split.json"  # the shipped model's matrices (benchmarks/gpu_tune_eval.py holds out the others)


@dataclasses.dataclass
class Split:
    """One seed's matrices: training (TLk takes the first k), validation (fixed) and test."""

    seed: int
    train: list[Group]
    val: list[Group]
    test: list[Group]

    def names(self) -> dict:
        return {part: [g.name for g in getattr(self, part)] for part in ("train", "val", "test")}


class SweepOracle(transfer.OracleRanker):
    """The oracle of `transfer`, keyed by the matrix object (hashing a 13M-nonzero pattern per call is slow)."""

    def __init__(self, groups: Sequence[Group]):
        self.times = {(id(g.matrix), g.feat, c): t for g in groups for c, t in zip(g.configs, g.times_ms)}

    def predict(self, matrix, configs, *, space, feat):
        return np.array([self.times[(id(matrix), feat, c)] for c in configs], dtype=np.float64)


def label(method: str) -> str:
    """`transfer.label`, but the best fixed config here is chosen on the TL5 and validation matrices."""
    return "best fixed config (TL5 + validation matrices)" if method == "best_fixed" else transfer.label(method)


def sampled(groups: Sequence[Group], count: int, seed: int, space) -> list[Group]:
    """`count` seeded configs of each group plus the baseline (count 0: every config)."""
    if count <= 0:
        return list(groups)
    return [transfer._sample_group(g, count, seed, space.baseline()) for g in groups]


def fixed_validation(groups: Sequence[Group], count: int, seed: int) -> list[str]:
    """The validation matrices: one seeded draw per nnz stratum, the same for every split seed."""
    return pick_across_sizes({g.name: float(g.matrix.nnz) for g in groups}, count, seed=seed)


def make_split(groups: Sequence[Group], val_names: Sequence[str], seed: int, n_train: int, params, space,
               families: Mapping[str, str] | None = None) -> Split:
    """Seed `seed`'s split: a seeded permutation of the non-validation matrices, the first `n_train` to train.
    With `families` (matrix -> generator family) the permutation is reordered (stably) so that every family's
    first matrix comes before any family's second: the first k cover k families (as many as there are)."""
    others = sorted((g for g in groups if g.name not in val_names), key=lambda g: g.name)
    if n_train >= len(others):
        raise ValueError(f"{n_train} training matrices asked, only {len(others)} are not validation matrices")
    order = list(np.random.default_rng(seed).permutation(len(others)))
    if families is not None:
        count: dict[str, int] = {}
        rank = {}
        for i in order:  # the how-manieth of its family in the permutation
            family = families[others[i].name]
            rank[i] = count.get(family, 0)
            count[family] = rank[i] + 1
        order = sorted(order, key=rank.__getitem__)
    train = sampled([others[i] for i in order[:n_train]], params.pool_configs, params.data_seed, space)
    val = sampled([g for g in groups if g.name in val_names], params.val_configs, params.data_seed, space)
    return Split(seed, train, val, [others[i] for i in order[n_train:]])


def source_models(op: str, params, args, space) -> dict:
    """The CPU-side models: the shipped CPU model, WACO+FA/FM pre-trained on the CPU data, XGBoost."""
    cpu = create_space("cpu", op)
    cpu_train, cpu_val, cpu_info = transfer.cpu_source(op, params, args, args.out, progress=False)
    cpu_model, cpu_model_info = transfer.load_cpu_model(op, args, cpu_train, cpu_val, params)
    cpu_model.config = cpu_model.config.replace(**{"train.select_metric": params.select_metric})
    cpu_model.encoder_for(space)
    models = {"cpu": cpu_model}
    if not args.no_baselines:
        models["waco_fa"] = transfer.pretrain_variant(cpu_model, cpu_train, cpu_val, cpu, params, mapper="none",
                                                      knob_encoder="none")
        models["waco_fm"] = transfer.pretrain_variant(cpu_model, cpu_train, cpu_val, cpu, params,
                                                      mapper="standard", knob_encoder="pad")
        xgb = baselines.create("xgboost", seed=0, xgb_options={"num_threads": params.threads})
        models["xgboost"] = xgb.fit(cpu_train, space=cpu)
    for name in ("cpu", "waco_fa", "waco_fm"):
        if name in models:
            models[name].encoder_for(space)
    return {"models": models, "info": {"cpu_data": cpu_info, "cpu_model": cpu_model_info}}


def run_seed(split: Split, sources: dict, params, space, score, *, baselines_too: bool, ship_k: int = 5) -> dict:
    """Every method of one split; `score(method, model, target_samples, seconds, recipe)` records each."""
    cpu_model = sources["cpu"]
    n_val = transfer.samples(split.val)
    five = split.train[:5]
    shipped = None
    for k in params.ks:
        start = time.perf_counter()
        chosen = split.train[:k]
        model, recipe = transfer.finetune_on_validation(cpu_model, chosen, split.val, space, params, split.seed)
        score(f"tl{k}", model, transfer.samples(chosen) + n_val, time.perf_counter() - start,
              {**recipe, "finetune_matrices": [g.name for g in chosen]})
        if k == ship_k:
            shipped = (model, recipe)
    nt_base = CognateCostModel(cpu_model.config.replace(**{"train.train_featurizer": False}), seed=split.seed)
    nt_base.encoder_for(space)
    for n in params.nt_sizes:
        start = time.perf_counter()
        model, recipe = transfer.train_no_transfer(nt_base, split.train[:n], split.val, space, params, split.seed)
        score(f"nt{n}", model, transfer.samples(split.train[:n]) + n_val, time.perf_counter() - start, recipe)
    if baselines_too:
        for name in ("waco_fa", "waco_fm"):
            start = time.perf_counter()
            model, recipe = transfer.finetune_on_validation(sources[name], five, split.val, space, params, split.seed)
            score(name, model, transfer.samples(five) + n_val, time.perf_counter() - start, recipe)
        start = time.perf_counter()
        model, recipe = transfer.xgboost_on_validation(sources["xgboost"], five, split.val, space, params)
        score("xgboost", model, transfer.samples(five) + n_val, time.perf_counter() - start, recipe)
    fixed = baselines.create("best_fixed").finetune([*five, *split.val], space=space)
    score("best_fixed", fixed, transfer.samples([*five, *split.val]), 0.0, {"config": fixed.best()})
    score("random", baselines.create("random", seed=split.seed), 0.0, 0.0, None)
    score("oracle", SweepOracle(split.test), float("nan"), 0.0, None)
    return {"model": shipped[0], "recipe": shipped[1], "split": split, "k": ship_k}


def run_op(op: str, params, args, on_first_seed=None) -> dict:
    """The protocol for one op over every seed: runs, summary, recipes, per-matrix picks, splits.
    `on_first_seed(candidate, result so far)` is called once the first seed is done (shipping)."""
    space = create_space(PLATFORM, op)
    path = str(args.data).format(op=op)
    groups = load_sweep_groups(path, op=op, platform=PLATFORM)
    val_names = fixed_validation(groups, params.val_matrices, args.val_seed)
    frame = load_frame(path)
    families = None if args.train_draw == "random" else {
        name: json.loads(extra)["family"] for name, extra in zip(frame["matrix"], frame["extra"])}
    sources = source_models(op, params, args, space)
    for model in sources["models"].values():
        if isinstance(model, CognateCostModel):
            transfer.warm_embeddings(model, groups)
    result = {"info": {"op": op, "platform": PLATFORM, "data": path, "matrices": len(groups),
                       "hardware": frame["backend"].iloc[0], "validation_matrices": val_names,
                       "train_draw": args.train_draw,
                       "splits": {}, **sources["info"], "select_metric": params.select_metric},
              "runs": [], "recipes": {}, "per_matrix": {}}
    for seed in params.seeds:
        split = make_split(groups, val_names, seed, max(params.ks), params, space, families)
        result["info"]["splits"][seed] = split.names()

        def score(method, model, target_samples, seconds, recipe):
            summary, rows = transfer.evaluate_groups(model, split.test, space, params.top_k)
            result["runs"].append({"method": method, "seed": seed, **summary, "target_samples": target_samples,
                                   "seconds": seconds})
            result["per_matrix"].setdefault(method, {})[seed] = rows
            if recipe is not None:
                result["recipes"].setdefault(method, {})[seed] = recipe
            logger.info("%s seed %d %-10s top-1/oracle %.3f top-5/oracle %.3f pair %.3f (%.1f s)", op, seed,
                        method, summary["oracle_fraction_top1"], summary["oracle_fraction_topk"],
                        summary["pair_accuracy"], seconds)

        score("zero_shot", sources["models"]["cpu"], 0.0, 0.0, None)
        candidate = run_seed(split, sources["models"], params, space, score, baselines_too=not args.no_baselines,
                             ship_k=args.ship_k)
        if on_first_seed is not None and seed == params.seeds[0]:
            result["shipped"] = on_first_seed(candidate, result)
    result["summary"] = transfer.summarize_runs(result["runs"])
    return result


def ship(op: str, candidate, result: dict, params, args, command: str) -> dict:
    """Save the first seed's TLk model as ``<pretrained root>/<op>-gpu`` with its card, the hardware it was
    trained on and its matrices; its best fixed configs are those of its fine-tune and validation matrices."""
    from cognate_tvm.model.pretrained import CARD_FILE, PRETRAINED_DIR, load_pretrained, pretrained_path
    from cognate_tvm.model.pretrained import write_trained_on

    model, recipe, split, k = candidate["model"], candidate["recipe"], candidate["split"], candidate["k"]
    space = create_space(PLATFORM, op)
    model.remember_fixed([*split.train[:k], *split.val], space)
    path = model.save(pretrained_path(op, PLATFORM, root=args.pretrained_root or PRETRAINED_DIR))
    hardware = json.loads(result["info"]["hardware"])
    write_trained_on(path, {key: hardware[key] for key in ("target", "arch", "device") if key in hardware})
    test = split.test[0]
    reloaded = load_pretrained(op, PLATFORM, root=path.parent)
    if not np.allclose(reloaded.predict(test.matrix, list(test.configs), space=space, feat=test.feat),
                       model.predict(test.matrix, list(test.configs), space=space, feat=test.feat), atol=1e-5):
        raise RuntimeError(f"{path}: the reloaded model scores differently from the one saved")
    (path / CARD_FILE).write_text(card_text(op, candidate, result, params, command, hardware))
    seen = {"finetune": [g.name for g in split.train[:k]], "validation": [g.name for g in split.val],
            "test": [g.name for g in split.test]}
    (path / SPLIT_FILE).write_text(json.dumps(seen, indent=1))
    return {"path": str(path), "finetune_matrices": [g.name for g in split.train[:k]],
            "test_matrices": [g.name for g in split.test]}


def card_text(op: str, candidate, result: dict, params, command: str, hardware: dict) -> str:
    """The shipped model's MODEL_CARD.md: device, data, split, recipe, metrics, the rebuild command."""
    recipe, split, k = candidate["recipe"], candidate["split"], candidate["k"]
    seed = split.seed
    rows = {m: next(r for r in result["runs"] if r["method"] == m and r["seed"] == seed)
            for m in dict.fromkeys((f"tl{k}", f"nt{k}", "tl5", "nt5", "best_fixed", "random", "zero_shot"))}
    table = "\n".join(f"| {label(m)} | {r['oracle_fraction_top1']:.3f} | {r['oracle_fraction_topk']:.3f} | "
                      f"{r['pair_accuracy']:.3f} |" for m, r in rows.items())
    chosen = [g.name for g in split.train[:k]]
    draw = result["info"]["train_draw"]
    return f"""# cognate-tvm GPU cost model: {op} (COGNATE TL{k} from the CPU model)

- Platform: gpu (`cuda`, the SparseTIR-style kernels of `cognate_tvm.kernels.cuda`), dense width 128.
  Load with `load_pretrained("{op}", "gpu")`; `tune --target cuda` and `--compile-only` rank with it.
- Device: {hardware.get('device')} ({hardware.get('arch')}), torch {hardware.get('torch')}, CUDA
  {hardware.get('torch_cuda')}, TVM {hardware.get('tvm')} ({hardware.get('compile_mode')}); the driver
  version was not recorded. Timing: {hardware.get('timing')}. `trained_on.json` holds the device and arch:
  `tune` notes when the backend's arch differs.
- Data: `{result['info']['data']}`, {result['info']['matrices']} generated matrices, every config swept
  (`scripts/import_gpu_sweep.py`; each matrix rebuilt by `generate_corpus` from the arguments in the data).
- Pre-trained: the shipped CPU model ({transfer.shown_path(result['info']['cpu_model'].get('path', ''))}).
- Fine-tuned on {k} matrices ({params.pool_configs if params.pool_configs > 0 else 'every'} sampled configs +
  the baseline each; split seed {seed}, draw {draw!r}{' (one per generator family)' if draw == 'family' else ''}):
  {', '.join(chosen)}.
- Validation (fixed, {params.val_configs if params.val_configs > 0 else 'every config'} of each):
  {', '.join(g.name for g in split.val)}. It chose the recipe: frozen {', '.join(recipe['freeze']) or 'nothing'},
  head {'re-initialized' if recipe.get('head_reinitialized') else 'pre-trained'}, lr {recipe['lr']}, epoch
  {recipe['epoch_kept']} of {recipe['epochs_max']} (best validation {params.select_metric.replace('_', ' ')}).
- Best fixed configs (`tune --fixed`): chosen on the fine-tune and validation matrices (their measured configs).
- Test: the {len(split.test)} other matrices, every config: {', '.join(g.name for g in split.test)}.

| method (split seed {seed}, test) | top-1 / swept best | top-{params.top_k} / swept best | pair acc. |
|---|---|---|---|
{table}

Rebuild: `{command}` (the first seed's TL{k} model).
`split.json` names the fine-tune, validation and test matrices; `benchmarks/gpu_tune_eval.py` runs `tune`
on the sweeps of every matrix but the fine-tune and validation ones.
"""


def write_markdown(op: str, result: dict, params, path: Path, command: str) -> str:
    """The table (mean ± std over seeds) with the command and the split."""
    methods = ([f"tl{k}" for k in params.ks] + [f"nt{n}" for n in params.nt_sizes]
               + ["zero_shot", "waco_fa", "waco_fm", "xgboost", "best_fixed", "random", "oracle"])
    info = result["info"]
    lines = [f"# CPU -> GPU transfer: {op}", "",
             f"`{command}`", "",
             f"{info['matrices']} swept matrices ({info['data']}); validation (fixed): "
             f"{', '.join(info['validation_matrices'])} ({params.val_configs} sampled configs each); per seed "
             f"{max(params.ks)} training matrices ({params.pool_configs} sampled configs + the baseline each; TLk/NTk "
             f"take the first k) and {info['matrices'] - len(info['validation_matrices']) - max(params.ks)} test "
             f"matrices (every config); seeds {list(params.seeds)}; mean ± std over seeds. Top-k: k = "
             f"{params.top_k}; random-k: {params.top_k} random configs per test matrix; best fixed config: chosen on "
             f"the TL5 and validation matrices. Choices made on validation ({params.select_metric}).", "",
             *transfer.markdown(op, result, params, methods), ""]
    text = "\n".join(lines).replace(transfer.label("best_fixed"), label("best_fixed"))
    path.write_text(text)
    return text


def plot(op: str, result: dict, params, path: Path) -> None:
    """Top-1 and top-5 / oracle per method (mean ± std over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = result["summary"]
    methods = [m for m in summary if m != "oracle"]
    x = np.arange(len(methods))
    fig, ax = plt.subplots(figsize=(10, 4))
    for offset, (key, title) in zip((-0.2, 0.2), (("oracle_fraction_top1", "top-1"),
                                                  ("oracle_fraction_topk", f"top-{params.top_k}"))):
        ax.bar(x + offset, [summary[m][key] for m in methods], 0.4, yerr=[summary[m][key + "_std"] for m in methods],
               label=f"{title} / swept best", capsize=2)
    ax.axhline(summary["best_fixed"]["oracle_fraction_top1"], color="gray", ls="--", lw=1, label="best fixed (top-1)")
    ax.set_xticks(x, [label(m) for m in methods], rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction of the swept best (geomean)")
    ax.set_title(f"CPU -> GPU transfer, {op}, {len(params.seeds)} splits")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: Sequence[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the GPU sweep dataset ('{op}' is replaced)")
    parser.add_argument("--ops", nargs="+", choices=("spmm", "sddmm"), default=["spmm", "sddmm"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--ks", type=transfer.positive(int), nargs="+", default=[3, 5, 7])
    parser.add_argument("--val-matrices", type=transfer.positive(int), default=4)
    parser.add_argument("--val-seed", type=int, default=0, help="seeds the (fixed) validation draw")
    parser.add_argument("--val-configs", type=int, default=100, help="sampled configs per validation matrix")
    parser.add_argument("--train-configs", type=int, default=100,
                        help="sampled configs per training matrix (0: every config)")
    parser.add_argument("--select-metric", choices=("pair_accuracy", "top1_fraction"), default="pair_accuracy")
    parser.add_argument("--finetune-epochs", type=transfer.positive(int), default=150)
    parser.add_argument("--lrs", type=transfer.positive(float), nargs="+", default=[5e-4, 2e-3, 5e-3])
    parser.add_argument("--reinit-lrs", type=transfer.positive(float), nargs="*", default=[3e-3, 1e-2])
    parser.add_argument("--freezes", nargs="+", default=["featurizer", "featurizer,config"],
                        help="parts frozen per fine-tuning recipe, comma-separated ('' for none)")
    parser.add_argument("--nt-epochs", type=transfer.positive(int), default=100)
    parser.add_argument("--nt-lrs", type=transfer.positive(float), nargs="+", default=[3e-3, 1e-2])
    parser.add_argument("--target-loss", choices=transfer.LOSSES, default=None)
    parser.add_argument("--cpu-model", default="shipped")
    parser.add_argument("--cpu-data", required=True, help="CPU dataset directory ('{op}' is replaced)")
    parser.add_argument("--cpu-corpus", required=True, help="the corpus spec the CPU dataset was collected on")
    parser.add_argument("--cpu-min-rows", type=int, default=1000)
    parser.add_argument("--cpu-max-rows", type=int, default=1_000_000)
    parser.add_argument("--no-baselines", action="store_true", help="skip WACO+FA/FM and XGBoost")
    parser.add_argument("--pretrained-root", type=Path, default=None,
                        help="where the CPU models are loaded from and the GPU models shipped to (default: the package's)")
    parser.add_argument("--ship", action="store_true", help="write the first seed's TL models as <op>-gpu")
    parser.add_argument("--ship-k", type=transfer.positive(int), default=5, help="which TLk --ship writes")
    parser.add_argument("--train-draw", choices=("random", "family"), default="random",
                        help="training matrices per seed: the first of a seeded permutation (random), or of it "
                             "reordered so the first k cover k generator families (family)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    args.no_progress = True
    if 5 not in args.ks or args.ship_k not in args.ks:
        parser.error("--ks must hold 5 (the data of WACO, XGBoost and best fixed) and --ship-k")
    params = dataclasses.replace(
        transfer.SIZES["full"], ops=tuple(args.ops), seeds=tuple(args.seeds), ks=tuple(sorted(set(args.ks))),
        nt_sizes=tuple(sorted(set(args.ks))), val_matrices=args.val_matrices, val_configs=args.val_configs,
        pool_configs=args.train_configs, select_metric=args.select_metric, finetune_epochs=args.finetune_epochs,
        lrs=tuple(args.lrs), reinit_lrs=tuple(args.reinit_lrs),
        freezes=tuple(tuple(p for p in f.split(",") if p) for f in args.freezes), nt_epochs=args.nt_epochs,
        nt_lrs=tuple(args.nt_lrs), target_loss=args.target_loss, threads=args.threads)
    return params, args


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    params, args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(params.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/gpu_transfer.py " + " ".join(sys.argv[1:] if argv is None else argv)
    for op in params.ops:
        start = time.perf_counter()
        shipper = (lambda candidate, so_far, op=op: ship(op, candidate, so_far, params, args, command)) \
            if args.ship else None
        result = run_op(op, params, args, on_first_seed=shipper)
        payload = {"params": dataclasses.asdict(params), "command": command, **result,
                   "wall_seconds": time.perf_counter() - start}
        (args.out / f"gpu_transfer_{op}.json").write_text(json.dumps(payload, indent=1, default=float))
        print(write_markdown(op, result, params, args.out / f"gpu_transfer_{op}.md", command))
        plot(op, result, params, args.out / f"gpu_transfer_{op}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
