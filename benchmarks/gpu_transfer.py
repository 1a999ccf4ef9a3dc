"""CPU -> GPU transfer on recorded GPU sweeps, at the paper's protocol scaled to a few dozen matrices.

    python benchmarks/gpu_transfer.py --data 'data/gpu_h200_wide_{op}' --pool-data 'data/gpu_h200_{op}' \\
        --cpu-data 'data/cpu_{op}_1t_znver3' --cpu-corpus synthetic:300:2026 --out docs/results/gpu_model \\
        [--seeds 0 1 2 3 4] [--ks 3 5 7 27] [--ship --ship-k 27]   (docs/gpu.md has the shipped models' command)

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
``cognate_tvm.transfer``; this driver supplies the GPU data and the splits. Outputs under
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

import transfer  # noqa: E402  (the CPU source data and model of benchmarks/transfer.py)
from common import save_png  # noqa: E402

from cognate_tvm import transfer as protocol  # noqa: E402
from cognate_tvm.train import LOSSES  # noqa: E402
from cognate_tvm.transfer.datasets import _sample_group as sample_group  # noqa: E402

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
    fixed_on: list[Group]  # every config of the training and validation matrices of --data: the best fixed config's

    def names(self) -> dict:
        return {part: [g.name for g in getattr(self, part)] for part in ("train", "val", "test")}


class SweepOracle(protocol.OracleRanker):
    """The oracle of `transfer`, keyed by the matrix object (hashing a 13M-nonzero pattern per call is slow)."""

    def __init__(self, groups: Sequence[Group]):
        self.times = {(id(g.matrix), g.feat, c): t for g in groups for c, t in zip(g.configs, g.times_ms)}

    def predict(self, matrix, configs, *, space, feat):
        return np.array([self.times[(id(matrix), feat, c)] for c in configs], dtype=np.float64)


def label(method: str, *, pooled: bool = False) -> str:
    """`protocol.label`, but the best fixed config here is chosen on the TL5 (`pooled`: training) and validation
    matrices."""
    if method != "best_fixed":
        return protocol.label(method)
    return f"best fixed config ({'training' if pooled else 'TL5'} + validation matrices)"


def sampled(groups: Sequence[Group], count: int, seed: int, space) -> list[Group]:
    """`count` seeded configs of each group plus the baseline (count 0: every config)."""
    if count <= 0:
        return list(groups)
    return [sample_group(g, count, seed, space.baseline()) for g in groups]


def fixed_validation(groups: Sequence[Group], count: int, seed: int) -> list[str]:
    """The validation matrices: one seeded draw per nnz stratum, the same for every split seed."""
    return pick_across_sizes({g.name: float(g.matrix.nnz) for g in groups}, count, seed=seed)


def make_split(groups: Sequence[Group], val_names: Sequence[str], seed: int, n_train: int, params, space,
               families: Mapping[str, str] | None = None, pool: Sequence[Group] = ()) -> Split:
    """Seed `seed`'s split: a seeded permutation of the non-validation matrices, the first `n_train` to train.
    With `families` (matrix -> generator family) the permutation is reordered (stably) so that every family's
    first matrix comes before any family's second: the first k cover k families (as many as there are).
    `pool` (matrices of another sweep, never validation or test) follows them in the training matrices, in a
    seeded order."""
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
    pool = sorted(pool, key=lambda g: g.name)
    pool = [pool[i] for i in np.random.default_rng(seed).permutation(len(pool))]
    chosen = [others[i] for i in order[:n_train]]
    train = sampled([*chosen, *pool], params.pool_configs, params.data_seed, space)
    full_val = [g for g in groups if g.name in val_names]
    val = sampled(full_val, params.val_configs, params.data_seed, space)
    return Split(seed, train, val, [others[i] for i in order[n_train:]], [*chosen, *full_val])


def source_models(op: str, params, args, space) -> dict:
    """The CPU-side models: the shipped CPU model, WACO+FA/FM pre-trained on the CPU data, XGBoost."""
    cpu = create_space("cpu", op)
    cpu_train, cpu_val, cpu_info = ([], [], None) if args.no_baselines and args.cpu_model == "shipped" else \
        transfer.cpu_source(op, params, args, args.out, progress=False)
    cpu_model, cpu_model_info = transfer.load_cpu_model(op, args, cpu_train, cpu_val, params)
    cpu_model.config = cpu_model.config.replace(**{"train.select_metric": params.select_metric})
    cpu_model.encoder_for(space)
    models = {"cpu": cpu_model}
    if not args.no_baselines:
        models["waco_fa"] = protocol.pretrain_variant(cpu_model, cpu_train, cpu_val, cpu, params, mapper="none",
                                                      knob_encoder="none")
        models["waco_fm"] = protocol.pretrain_variant(cpu_model, cpu_train, cpu_val, cpu, params,
                                                      mapper="standard", knob_encoder="pad")
        xgb = baselines.create("xgboost", seed=0, xgb_options={"num_threads": params.threads})
        models["xgboost"] = xgb.fit(cpu_train, space=cpu)
    for name in ("cpu", "waco_fa", "waco_fm"):
        if name in models:
            models[name].encoder_for(space)
    return {"models": models, "info": {"cpu_data": cpu_info, "cpu_model": cpu_model_info}}


def run_seed(split: Split, sources: dict, params, space, score, *, baselines_too: bool, ship_k: int = 5,
             pooled: bool = False, ship_method: str = "tl") -> dict:
    """Every method of one split; `score(method, model, target_samples, seconds, recipe)` records each.
    The best fixed config is chosen on the TL5 and validation matrices, or (`pooled`) on every config of the
    training and validation matrices of the split's own dataset. Returns the model to ship: TL or NT at
    `ship_k` (`ship_method` "tl" / "nt"), or ("validation") the one of the two that validates better."""
    cpu_model = sources["cpu"]
    n_val = protocol.samples(split.val)
    five = split.train[:5]
    shipped = None
    for k in params.ks:
        start = time.perf_counter()
        chosen = split.train[:k]
        model, recipe = protocol.finetune_on_validation(cpu_model, chosen, split.val, space, params, split.seed)
        score(f"tl{k}", model, protocol.samples(chosen) + n_val, time.perf_counter() - start,
              {**recipe, "finetune_matrices": [g.name for g in chosen]})
        if k == ship_k:
            shipped = {"tl": (model, recipe)}
    nt_base = CognateCostModel(cpu_model.config.replace(**{"train.train_featurizer": False}), seed=split.seed)
    nt_base.encoder_for(space)
    for n in params.nt_sizes:
        start = time.perf_counter()
        model, recipe = protocol.train_no_transfer(nt_base, split.train[:n], split.val, space, params, split.seed)
        score(f"nt{n}", model, protocol.samples(split.train[:n]) + n_val, time.perf_counter() - start, recipe)
        if n == ship_k:
            shipped["nt"] = (model, recipe)
    if baselines_too:
        for name in ("waco_fa", "waco_fm"):
            start = time.perf_counter()
            model, recipe = protocol.finetune_on_validation(sources[name], five, split.val, space, params, split.seed)
            score(name, model, protocol.samples(five) + n_val, time.perf_counter() - start, recipe)
        start = time.perf_counter()
        model, recipe = protocol.xgboost_on_validation(sources["xgboost"], five, split.val, space, params)
        score("xgboost", model, protocol.samples(five) + n_val, time.perf_counter() - start, recipe)
    fixed_on = split.fixed_on if pooled else [*five, *split.val]
    fixed = baselines.create("best_fixed").finetune(fixed_on, space=space)
    score("best_fixed", fixed, protocol.samples(fixed_on), 0.0, {"config": fixed.best()})
    score("random", baselines.create("random", seed=split.seed), 0.0, 0.0, None)
    score("oracle", SweepOracle(split.test), float("nan"), 0.0, None)
    key = protocol.SUMMARY_KEY[params.select_metric]
    method = max(shipped, key=lambda m: shipped[m][1]["val"][key]) if ship_method == "validation" else ship_method
    return {"model": shipped[method][0], "recipe": shipped[method][1], "split": split, "k": ship_k,
            "method": method}


def run_op(op: str, params, args, on_first_seed=None) -> dict:
    """The protocol for one op over every seed: runs, summary, recipes, per-matrix picks, splits.
    `on_first_seed(candidate, result so far)` is called once the first seed is done (shipping)."""
    space = create_space(PLATFORM, op)
    path = str(args.data).format(op=op)
    groups = load_sweep_groups(path, op=op, platform=PLATFORM)
    pool_path = str(args.pool_data).format(op=op) if args.pool_data else None
    pool = load_sweep_groups(pool_path, op=op, platform=PLATFORM) if pool_path else []
    val_names = fixed_validation(groups, params.val_matrices, args.val_seed)
    n_train = len(groups) - len(val_names) - args.test_matrices if pool else max(params.ks)
    frame = load_frame(path)
    families = None if args.train_draw == "random" else {
        name: json.loads(extra)["family"] for name, extra in zip(frame["matrix"], frame["extra"])}
    sources = source_models(op, params, args, space)
    for model in sources["models"].values():
        if isinstance(model, CognateCostModel):
            protocol.warm_embeddings(model, [*groups, *pool])
    result = {"info": {"op": op, "platform": PLATFORM, "data": path, "matrices": len(groups),
                       "pool_data": pool_path, "pool_matrices": len(pool), "data_train_matrices": n_train,
                       "hardware": frame["backend"].iloc[0], "validation_matrices": val_names,
                       "train_draw": args.train_draw,
                       "splits": {}, **sources["info"], "select_metric": params.select_metric},
              "runs": [], "recipes": {}, "per_matrix": {}}
    for seed in params.seeds:
        split = make_split(groups, val_names, seed, n_train, params, space, families, pool)
        result["info"]["splits"][seed] = split.names()

        def score(method, model, target_samples, seconds, recipe):
            summary, rows = protocol.evaluate_groups(model, split.test, space, params.top_k)
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
                             ship_k=args.ship_k, pooled=bool(pool), ship_method=args.ship_method)
        if on_first_seed is not None and seed == params.seeds[0]:
            result["shipped"] = on_first_seed(candidate, result)
    result["summary"] = protocol.summarize_runs(result["runs"])
    return result


def ship(op: str, candidate, result: dict, params, args, command: str) -> dict:
    """Save the first seed's TLk or NTk model as ``<pretrained root>/<op>-gpu`` with its card, the hardware it was
    trained on and its matrices; its best fixed configs are those of its fine-tune and validation matrices."""
    from cognate_tvm.model.pretrained import CARD_FILE, PRETRAINED_DIR, load_pretrained, pretrained_path
    from cognate_tvm.model.pretrained import write_trained_on

    model, recipe, split, k = candidate["model"], candidate["recipe"], candidate["split"], candidate["k"]
    space = create_space(PLATFORM, op)
    model.remember_fixed(split.fixed_on if result["info"]["pool_matrices"] else [*split.train[:k], *split.val], space)
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
    recipe, split, k, method = candidate["recipe"], candidate["split"], candidate["k"], candidate["method"]
    info, seed = result["info"], split.seed
    rows = {m: next(r for r in result["runs"] if r["method"] == m and r["seed"] == seed)
            for m in dict.fromkeys((f"{method}{k}", f"tl{k}", f"nt{k}", "tl5", "nt5", "best_fixed", "random",
                                    "zero_shot"))}
    pooled = bool(info.get("pool_matrices"))
    table = "\n".join(f"| {label(m, pooled=pooled)} | {r['oracle_fraction_top1']:.3f} | {r['oracle_fraction_topk']:.3f} | "
                      f"{r['pair_accuracy']:.3f} |" for m, r in rows.items())
    chosen = [g.name for g in split.train[:k]]
    draw = info["train_draw"]
    smi, timing = hardware.get("nvidia_smi", ""), hardware.get("timing")
    if isinstance(timing, dict):
        timing = f"{timing.get('method')} (number={timing.get('number')}, repeat={timing.get('repeat')})"
    driver = f"driver {smi.split(', ')[1]}" if smi.count(", ") >= 2 else "the driver version was not recorded"
    pool = (f" and `{info['pool_data']}`, {info['pool_matrices']} more matrices (training only; an older space: "
            "configs it lacks are absent from their groups)") if info.get("pool_matrices") else ""
    origin = (f"the shipped CPU model ({protocol.shown_path(info['cpu_model'].get('path', ''))}), fine-tuned"
              if method == "tl" else "no pre-training: trained from scratch (the CPU model's network, featurizer "
              "frozen at its initialization)")
    steps = (f"frozen {', '.join(recipe['freeze']) or 'nothing'}, head "
             f"{'re-initialized' if recipe.get('head_reinitialized') else 'pre-trained'}, " if method == "tl" else "")
    title = f"COGNATE TL{k} from the CPU model" if method == "tl" else f"COGNATE NT{k}, trained on GPU data only"
    return f"""# cognate-tvm GPU cost model: {op} ({title})

- Platform: gpu (`cuda`, the SparseTIR-style kernels of `cognate_tvm.kernels.cuda`), dense width 128.
  Load with `load_pretrained("{op}", "gpu")`; `tune --target cuda` and `--compile-only` rank with it.
- Device: {hardware.get('device')} ({hardware.get('arch')}), torch {hardware.get('torch')}, CUDA
  {hardware.get('torch_cuda')}, TVM {hardware.get('tvm')} ({hardware.get('compile_mode')}), {driver}.
  Timing: {timing}. `trained_on.json` holds the device and arch: `tune` notes when the
  backend's arch differs.
- Data: `{info['data']}`, {info['matrices']} generated matrices, every config of the space swept{pool}; each
  matrix rebuilt from the generator arguments recorded in the data.
- Model: {origin} on {k} matrices ({params.pool_configs if params.pool_configs > 0 else 'every'} sampled configs +
  the baseline each; split seed {seed}, draw {draw!r}{' (one per generator family)' if draw == 'family' else ''}):
  {', '.join(chosen)}.
- Validation (fixed, {params.val_configs if params.val_configs > 0 else 'every config'} of each):
  {', '.join(g.name for g in split.val)}. It chose the recipe: {steps}lr {recipe['lr']}, epoch
  {recipe['epoch_kept']} of {recipe['epochs_max']} (best validation {params.select_metric.replace('_', ' ')})
  {'and TL over NT' if method == 'tl' else 'and NT over TL'} at {k} matrices{'' if 'ship-method validation' not in command else ' (validation score)'}.
- Best fixed configs (`tune --fixed`): chosen on {'every config of the training and validation matrices of '
  + repr(info['data']) if info.get('pool_matrices') else 'the fine-tune and validation matrices (their measured configs)'}.
- Test: the {len(split.test)} other matrices of `{info['data']}`, every config: {', '.join(g.name for g in split.test)}.

| method (split seed {seed}, test) | top-1 / swept best | top-{params.top_k} / swept best | pair acc. |
|---|---|---|---|
{table}

Rebuild: `{command}` (the first seed's {method.upper()}{k} model).
`split.json` names the training, validation and test matrices; `benchmarks/gpu_tune_eval.py` runs `tune`
on the sweeps of every matrix of `{info['data']}` but the training and validation ones.
"""


def write_markdown(op: str, result: dict, params, path: Path, command: str) -> str:
    """The table (mean ± std over seeds) with the command and the split."""
    methods = ([f"tl{k}" for k in params.ks] + [f"nt{n}" for n in params.nt_sizes]
               + ["zero_shot", "waco_fa", "waco_fm", "xgboost", "best_fixed", "random", "oracle"])
    info = result["info"]
    n_train = info["data_train_matrices"]
    val_configs = f"{params.val_configs} sampled configs" if params.val_configs else "every config"
    fixed_on = ("every config of the training and validation matrices of " + info["data"]
                if info["pool_matrices"] else "the TL5 and validation matrices")
    lines = [f"# CPU -> GPU transfer: {op}", "",
             f"`{command}`", "",
             f"{info['matrices']} swept matrices ({info['data']}); validation (fixed): "
             f"{', '.join(info['validation_matrices'])} ({val_configs} of each); per "
             f"seed {n_train} training matrices of it, then the {info['pool_matrices']} of {info['pool_data']} "
             f"({params.pool_configs or 'every'} sampled configs + the baseline each; TLk/NTk take the first k) and "
             f"{info['matrices'] - len(info['validation_matrices']) - n_train} test matrices (every config); seeds "
             f"{list(params.seeds)}; mean ± std over seeds. Top-k: k = {params.top_k}; random-k: {params.top_k} random "
             f"configs per test matrix; best fixed config: chosen on {fixed_on}. Choices made on validation "
             f"({params.select_metric}).", "",
             *protocol.markdown(op, result, params, methods), ""]
    text = "\n".join(lines).replace(protocol.label("best_fixed"),
                                    label("best_fixed", pooled=bool(info["pool_matrices"])))
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
    save_png(fig, path, dpi=110)
    plt.close(fig)


def parse_args(argv: Sequence[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the GPU sweep dataset ('{op}' is replaced)")
    parser.add_argument("--ops", nargs="+", choices=("spmm", "sddmm"), default=["spmm", "sddmm"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--ks", type=transfer.positive(int), nargs="+", default=[3, 5, 7])
    parser.add_argument("--pool-data", default=None,
                        help="another sweep dataset ('{op}' is replaced) whose matrices join every split's training "
                             "matrices after those of --data (never validation or test)")
    parser.add_argument("--test-matrices", type=transfer.positive(int), default=4,
                        help="with --pool-data: test matrices of --data per split (the others not validation train)")
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
    parser.add_argument("--target-loss", choices=LOSSES, default=None)
    parser.add_argument("--cpu-model", default="shipped")
    parser.add_argument("--cpu-data", required=True, help="CPU dataset directory ('{op}' is replaced)")
    parser.add_argument("--cpu-corpus", required=True, help="the corpus spec the CPU dataset was collected on")
    parser.add_argument("--cpu-min-rows", type=int, default=1000)
    parser.add_argument("--cpu-max-rows", type=int, default=1_000_000)
    parser.add_argument("--no-baselines", action="store_true", help="skip WACO+FA/FM and XGBoost")
    parser.add_argument("--pretrained-root", type=Path, default=None,
                        help="where the CPU models are loaded from and the GPU models shipped to (default: the package's)")
    parser.add_argument("--ship", action="store_true", help="write the first seed's TL models as <op>-gpu")
    parser.add_argument("--ship-k", type=transfer.positive(int), default=5, help="which TLk / NTk --ship writes")
    parser.add_argument("--ship-method", choices=("tl", "nt", "validation"), default="tl",
                        help="--ship writes TLk, NTk, or the one of the two with the better validation score")
    parser.add_argument("--train-draw", choices=("random", "family"), default="random",
                        help="training matrices per seed: the first of a seeded permutation (random), or of it "
                             "reordered so the first k cover k generator families (family)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    args.no_progress = True
    if 5 not in args.ks or args.ship_k not in args.ks:
        parser.error("--ks must hold 5 (the data of WACO, XGBoost and best fixed) and --ship-k")
    params = dataclasses.replace(
        protocol.SIZES["full"], ops=tuple(args.ops), seeds=tuple(args.seeds), ks=tuple(sorted(set(args.ks))),
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
