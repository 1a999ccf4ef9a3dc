"""The recipe grids of the learned methods, chosen on validation, and the guarded refit.

Each learned method trains a grid of recipes (frozen parts, learning rate, re-drawn head, L2-SP
anchor; for NTn the learning rate; for XGBoost the extra boosting rounds), scores every one on the
validation matrices, and keeps the best (or the mean of its m best, `RankEnsemble`, where validation
prefers it). With ``refit`` the chosen recipe is trained again on the target training and validation
matrices together, and the refit is kept only if it ranks those matrices no worse (`guarded_refit`).
"""
from __future__ import annotations

import copy
import logging
from typing import Sequence

import numpy as np

from ..data import Group
from ..model import ModelConfig
from ..model.cognate import CognateCostModel, RankingModel
from ..model.ensemble import RankEnsemble
from .evaluation import SUMMARY_KEY, val_score
from .params import Params

logger = logging.getLogger(__name__)


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
    with sizes (1,), the default, this is the grid's first best model, no ensemble). Each
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
    (an SpMM TL20 refit fell to 0.637 of the oracle); a training set it no longer ranks is the sign."""
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
