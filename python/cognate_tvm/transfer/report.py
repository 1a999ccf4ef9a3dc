"""The protocol's report: labels and the markdown tables (the benchmark draws the plots)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .evaluation import COLUMNS
from .params import Params
from .recipes import epochs_trained

LABELS = {"zero_shot": "zero-shot (CPU model only)", "waco_fa": "WACO+FA", "waco_fm": "WACO+FM",
          "xgboost": "XGBoost", "random": "random-k", "best_fixed": "best fixed config (TL5 matrices)",
          "oracle": "oracle", "abl_reference": "COGNATE, head re-pre-trained (reference)",
          "abl_no_mapper": "no mapper (= WACO+FA)", "abl_random_mapping": "random-permutation mapping",
          "abl_no_latent": "no latent encoder (knobs dropped)", "abl_raw_knobs": "raw knobs (= WACO+FM)",
          "abl_featurizer_trained": "featurizer trained in fine-tuning"}


def label(method: str) -> str:
    if method.startswith("tl"):
        return f"COGNATE TL{method[2:]}"
    if method.startswith("nt"):
        return f"NT{method[2:]}"
    if method.startswith("abl_source_"):
        return f"CPU source: {method.rsplit('_', 1)[1]} matrices"
    return LABELS.get(method, method)


def shown_path(path: str) -> str:
    """`path` relative to the working directory when inside it: cards name no machine's paths."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


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
