"""Training loops (pre-training, fine-tuning) and the evaluation protocol.

The ranking loss is WACO's and COGNATE's pairwise margin loss: for two configs
of the same matrix with times t_a > t_b (a slower), the model should score
``s_a - s_b >= margin``; the loss is ``relu(margin - (s_a - s_b))`` averaged over
sampled pairs. Pairs never mix matrices or dense widths.

Evaluation (the protocol of docs/transfer.md): matrices are split by name
(`cognate_tvm.data.split_by_matrix`), choices are made on validation only, and
`transfer_experiment` repeats a whole pre-train / fine-tune / test run over
seeds so results carry a spread.

The loops take any model whose ``net`` is a module with ``components`` (what may be frozen),
``component(name)`` (their modules) and ``score``; they import no model, so the model's ``fit``
and ``finetune`` import them (not the other way round).
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from .data import Group, matrix_hash
from .metrics import evaluate_group, summarize
from .space.base import Space

logger = logging.getLogger(__name__)


@dataclass
class _Prepared:
    """A group's tensors, computed once per training run."""

    group: Group
    key: str
    shared: torch.Tensor
    knobs: torch.Tensor
    log2_feat: torch.Tensor
    times: torch.Tensor


def _prepare(model, groups: Sequence[Group], space: Space) -> list[_Prepared]:
    out = []
    for group in groups:
        group = group.ok()
        if len(group.configs) < 2:
            logger.warning("group %r has fewer than 2 successful configs; skipped", group.name)
            continue
        rows, cols = group.matrix.shape
        shared, knobs, log2_feat = model.inputs(space, group.configs, rows=rows, cols=cols, feat=group.feat)
        out.append(_Prepared(group, matrix_hash(group.matrix), shared, knobs, log2_feat,
                             torch.as_tensor(group.times_ms, dtype=torch.float32)))
    return out


PAIR_WEIGHTINGS = ("uniform", "log_ratio")
LOG_RATIO_CAP = 1.0  # |ln t_a/t_b| above this (2.7x) weighs no more: gross mistakes are not the hard ones


def pairwise_margin_loss(scores: torch.Tensor, times: torch.Tensor, *, pairs: int, margin: float,
                         generator: torch.Generator, weighting: str = "uniform") -> torch.Tensor:
    """Mean hinge loss over `pairs` random pairs with different times (lower score = faster).

    weighting "log_ratio" weighs each pair by min(|ln t_a/t_b|, LOG_RATIO_CAP): a
    pair within timing noise of a tie barely counts, so the loss is not spent
    ordering configs that are equally fast.
    """
    if weighting not in PAIR_WEIGHTINGS:
        raise ValueError(f"unknown pair weighting {weighting!r}; valid: {', '.join(PAIR_WEIGHTINGS)}")
    n = scores.shape[0]
    a = torch.randint(n, (pairs,), generator=generator)
    b = torch.randint(n, (pairs,), generator=generator)
    sign = torch.sign(times[a] - times[b])
    keep = sign != 0
    if not keep.any():
        return scores.sum() * 0.0
    a, b, sign = a[keep], b[keep], sign[keep]
    hinge = torch.relu(margin - sign * (scores[a] - scores[b]))
    if weighting == "uniform":
        return hinge.mean()
    weight = torch.log(times[a] / times[b]).abs().clamp(max=LOG_RATIO_CAP)
    return (hinge * weight).sum() / weight.sum().clamp(min=1e-12)


LOSSES = ("pairwise", "slowdown", "listwise")
SLOWDOWN_CAP = 3.0  # ln(t / t_best) above this (20x) counts as 20x: timeouts and outliers do not dominate


def slowdown_loss(scores: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
    """Mean squared error between scores and ln(t / t_best) of one group (capped at SLOWDOWN_CAP).

    The target is the best fixed config's statistic (its mean over matrices), so
    a model can learn that config-only order and correct it per matrix; the
    score stays a ranking score (lower = faster).
    """
    target = torch.log(times / times.min()).clamp(max=SLOWDOWN_CAP)
    return torch.mean((scores - target) ** 2)


def listwise_loss(scores: torch.Tensor, times: torch.Tensor, temperature: float) -> torch.Tensor:
    """ListNet's cross-entropy (Cao et al., ICML 2007) between softmax(-scores) and a target distribution
    softmax(-ln(t / t_best) / temperature) over one group's configs.

    Uniform random pairs spend most of a pairwise loss ordering the middle of the ranking; top-1 is decided
    among the fastest few configs, and here a config 2x slower than the best weighs (1/2)^(1/temperature)
    of it (0.001 at 0.1), so the gradient goes to the top.
    """
    if not temperature > 0:
        raise ValueError(f"listwise temperature must be > 0, got {temperature}")
    target = torch.softmax(-torch.log(times / times.min()) / temperature, dim=0)
    return -(target * torch.log_softmax(-scores, dim=0)).sum()


def group_loss(scores: torch.Tensor, times: torch.Tensor, train, generator: torch.Generator) -> torch.Tensor:
    """The training loss of one group's scores under TrainConfig `train`."""
    if train.loss == "slowdown":
        return slowdown_loss(scores, times)
    if train.loss == "listwise":
        return listwise_loss(scores, times, train.listwise_temperature)
    return pairwise_margin_loss(scores, times, pairs=train.pairs_per_matrix, margin=train.margin,
                                generator=generator, weighting=train.pair_weighting)


def _set_trainable(model, frozen: set[str]) -> list[torch.nn.Parameter]:
    components = model.net.components
    unknown = frozen - set(components)
    if unknown:
        raise ValueError(f"unknown component(s) to freeze {sorted(unknown)}; valid: {', '.join(components)}")
    params = []
    for name in components:
        for module in model.net.component(name):
            for p in module.parameters():
                p.requires_grad_(name not in frozen)
                if name not in frozen:
                    params.append(p)
    return params


def train_ranking(model, groups: Sequence[Group], *, space: Space, epochs: int, lr: float,
                  frozen: set[str], val_groups: Sequence[Group] | None = None,
                  phase: str = "train", anchor: float = 0.0) -> list[dict]:
    """Train `model` (a CognateCostModel) on `groups` of `space`; returns one history row per epoch.

    Components named in `frozen` ("featurizer", "config", "head", "latent") keep their
    weights; a frozen featurizer lets every matrix embedding be computed once and cached.
    With `val_groups`, each epoch's validation pair accuracy is recorded and the weights
    of the best epoch are kept (the number of epochs is chosen on validation, never on test).
    `anchor` > 0 adds anchor * sum((w - w_start)^2) over the trained weights (L2-SP).
    """
    from tqdm.auto import tqdm

    t = model.config.train
    if t.loss not in LOSSES:
        raise ValueError(f"unknown loss {t.loss!r}; valid: {', '.join(LOSSES)}")
    if t.select_metric not in SELECT_METRICS:
        raise ValueError(f"unknown select_metric {t.select_metric!r}; valid: {', '.join(SELECT_METRICS)}")
    if anchor < 0 or not np.isfinite(anchor):
        raise ValueError(f"anchor must be a finite number >= 0, got {anchor}")
    encoder = model.encoder_for(space)
    data = _prepare(model, groups, space)
    if not data:
        raise ValueError(f"{phase}: no group with at least 2 successful configs to train on")
    params = _set_trainable(model, frozen)
    train_featurizer = "featurizer" not in frozen
    history: list[dict] = []
    if not params or epochs <= 0:
        return history
    start_weights = [p.detach().clone() for p in params] if anchor else []
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=t.weight_decay)
    generator = torch.Generator().manual_seed(model.seed)
    best: tuple[float, int, dict | None] = (-np.inf, -1, None)
    order_rng = np.random.default_rng(model.seed)
    for epoch in tqdm(range(epochs), desc=phase, disable=not model.progress):
        model.net.train()
        encoder.eval()
        losses = []
        order = order_rng.permutation(len(data))
        for start in range(0, len(order), t.batch_matrices):
            optimizer.zero_grad()
            batch = [data[i] for i in order[start:start + t.batch_matrices]]
            # one forward over the whole batch: each config row carries its matrix's embedding
            embs = [model.embedding(item.group.matrix, key=item.key, grad=train_featurizer) for item in batch]
            sizes = [item.shared.shape[0] for item in batch]
            emb_rows = torch.cat([e.reshape(1, -1).expand(n, -1) for e, n in zip(embs, sizes)])
            scores = model.net.score(emb_rows, torch.cat([item.shared for item in batch]),
                                     torch.cat([item.log2_feat for item in batch]),
                                     torch.cat([item.knobs for item in batch]), encoder)
            loss = sum(group_loss(part, item.times, t, generator)
                       for part, item in zip(torch.split(scores, sizes), batch)) / len(batch)
            if anchor:
                loss = loss + anchor * sum(((p - p0) ** 2).sum() for p, p0 in zip(params, start_weights))
            loss.backward()
            total = loss.item()
            optimizer.step()
            losses.append(total)
        if train_featurizer:
            model.clear_embedding_cache()
        model.net.eval()
        row = {"phase": phase, "epoch": epoch, "loss": float(np.mean(losses))}
        if val_groups:
            row.update(validation_metrics(model, val_groups, space=space))
            if row[f"val_{t.select_metric}"] > best[0]:
                best = (row[f"val_{t.select_metric}"], epoch, copy.deepcopy(model.net.state_dict()))
        history.append(row)
        logger.debug("%s epoch %d: %s", phase, epoch, row)
    if best[2] is not None:
        # validation picks the epoch: restore the weights of the best one
        model.net.load_state_dict(best[2])
        model.clear_embedding_cache()
        logger.info("%s: kept epoch %d (validation %s %.3f)", phase, best[1], t.select_metric, best[0])
    for p in model.net.parameters():
        p.requires_grad_(True)
    for enc in model.net.encoders.values():
        for p in enc.parameters():
            p.requires_grad_(False)
    return history


SELECT_METRICS = ("pair_accuracy", "top1_fraction")


def validation_metrics(model, groups: Sequence[Group], *, space: Space) -> dict[str, float]:
    """Validation pair accuracy (mean) and top-1 fraction (geomean of best time / top-scored config's time)."""
    from .metrics import geomean, ordered_pair_accuracy, top_k_time

    pairs, top1 = [], []
    for g in groups:
        times = np.asarray(g.times_ms, dtype=float)
        scores = np.asarray(model.predict(g.matrix, list(g.configs), space=space, feat=g.feat))
        ok = np.isfinite(times)
        pairs.append(ordered_pair_accuracy(times, scores))
        if ok.any():
            top1.append(times[ok].min() / top_k_time(times[ok], scores[ok], 1, float("nan")))
    return {"val_pair_accuracy": float(np.nanmean(pairs)) if pairs else float("nan"),
            "val_top1_fraction": geomean(top1)}


def pair_accuracy(model, groups: Sequence[Group], *, space: Space) -> float:
    """Mean ordered-pair accuracy of `model` over `groups`."""
    return validation_metrics(model, groups, space=space)["val_pair_accuracy"]


def evaluate(model, groups: Sequence[Group], *, space: Space, k: int = 5,
             baseline_ms: Mapping[tuple[str, int], float] | None = None) -> dict[str, float]:
    """Metrics of `model` on measured `groups` (see cognate_tvm.metrics).

    The baseline time of a group is `baseline_ms[(name, feat)]` if given, else the
    measured time of `space.baseline()` among the group's configs; a group with
    neither raises KeyError naming it.
    """
    results = []
    base_config = space.baseline()
    for g in groups:
        configs = list(g.configs)
        if baseline_ms is not None and (g.name, g.feat) in baseline_ms:
            base = float(baseline_ms[(g.name, g.feat)])
        elif base_config in configs and np.isfinite(g.times_ms[configs.index(base_config)]):
            base = float(g.times_ms[configs.index(base_config)])
        else:
            raise KeyError(f"group ({g.name!r}, feat={g.feat}) has no measured baseline config")
        scores = model.predict(g.matrix, configs, space=space, feat=g.feat)
        results.append(evaluate_group(g.times_ms, scores, baseline_ms=base, k=k))
    return summarize(results)


def transfer_experiment(make_model: Callable[[int], object], *, source: Sequence[Group], source_space: Space,
                        target_train: Sequence[Group], target_test: Sequence[Group], target_space: Space,
                        seeds: Sequence[int] = (0, 1, 2), k: int = 5) -> pd.DataFrame:
    """Pre-train on `source`, fine-tune on `target_train`, evaluate on `target_test`, once per seed.

    `make_model(seed)` builds a fresh RankingModel. Returns one row per seed plus
    ``mean`` and ``std`` rows; ``target_samples`` counts the target measurements used.
    """
    rows = []
    samples = int(sum(len(g.ok().configs) for g in target_train))
    for seed in seeds:
        model = make_model(seed)
        model.fit(source, space=source_space)
        model.finetune(target_train, space=target_space)
        row = evaluate(model, target_test, space=target_space, k=k)
        row.update(seed=seed, target_samples=samples)
        rows.append(row)
    frame = pd.DataFrame(rows)
    numeric = frame.drop(columns=["seed"])
    summary = pd.DataFrame([numeric.mean().rename("mean"), numeric.std(ddof=0).rename("std")])
    return pd.concat([frame.set_index("seed"), summary])
