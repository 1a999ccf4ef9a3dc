"""The COGNATE cost model: training on a synthetic dataset, transfer, save/load, versioning."""
import copy
import json

import numpy as np
import pytest
import torch

from cognate_tvm.baselines import RandomRanker
from cognate_tvm.errors import ModelVersionError
from cognate_tvm.model import CognateCostModel
from cognate_tvm.train import (SLOWDOWN_CAP, evaluate, listwise_loss, pair_accuracy, pairwise_margin_loss,
                               slowdown_loss, validation_metrics)
from toy_space import ToyAccelSpace, ToySpace, fast_model_config, measured_groups, real_spaces, small_corpus

torch.set_num_threads(1)  # small ops: one thread is faster on a shared 2-core machine


@pytest.fixture(scope="module")
def corpus():
    mats = small_corpus(3, seed=0)
    names = sorted(mats)
    order = np.random.default_rng(0).permutation(len(names))
    train = {names[i]: mats[names[i]] for i in order[:18]}
    test = {names[i]: mats[names[i]] for i in order[18:]}
    return train, test


@pytest.fixture(scope="module")
def trained(corpus):
    train, test = corpus
    space = ToySpace("spmm")
    model = CognateCostModel(fast_model_config(), seed=0)
    model.fit(measured_groups(space, train, configs_per_matrix=48), space=space)
    return model, space, measured_groups(space, test)


def test_training_lowers_loss_and_beats_random(trained):
    model, space, test = trained
    losses = [h["loss"] for h in model.history if h["phase"] == "pretrain"]
    assert len(losses) == model.config.train.epochs
    assert np.mean(losses[-3:]) < 0.7 * np.mean(losses[:3])
    acc = pair_accuracy(model, test, space=space)
    rand = pair_accuracy(RandomRanker(seed=0), test, space=space)
    assert 0.4 < rand < 0.6
    assert acc > 0.7 and acc > rand + 0.15, (acc, rand)
    metrics = evaluate(model, test, space=space, k=5)
    assert metrics["speedup_top1"] > 1.0 and metrics["oracle_fraction_topk"] > 0.8, metrics


def test_rank_and_top_k(trained):
    model, space, test = trained
    g = test[0]
    configs = list(g.configs)
    ranked = model.rank(g.matrix, configs, space=space, feat=g.feat)
    assert sorted(map(str, ranked)) == sorted(map(str, configs))
    scores = model.predict(g.matrix, configs, space=space, feat=g.feat)
    assert ranked[0] == configs[int(np.argmin(scores))]
    assert model.top_k(g.matrix, configs, 3, space=space, feat=g.feat) == ranked[:3]
    with pytest.raises(ValueError, match="k must be >= 1"):
        model.top_k(g.matrix, configs, 0, space=space, feat=g.feat)


def test_embedding_cache_is_used(trained):
    model, space, test = trained
    g = test[1]
    model.predict(g.matrix, list(g.configs), space=space, feat=g.feat)
    first = model.embedding(g.matrix)
    assert model.embedding(g.matrix.copy()) is first  # same content hash, same cached tensor


def test_copies_share_patterns_not_embeddings_and_a_new_model_can_adopt_them(trained):
    model, space, test = trained
    g = test[0]
    model.embedding(g.matrix)
    clone = copy.deepcopy(model)
    assert clone._patterns is model._patterns  # weight-free: one cache for every copy
    assert clone._embeddings is not model._embeddings
    with torch.no_grad():  # a copy's new weights must not reach the original's embeddings
        for p in clone.net.featurizer.parameters():
            p.add_(1.0)
    clone.clear_embedding_cache()
    assert not torch.allclose(clone.embedding(g.matrix), model.embedding(g.matrix))

    fresh = CognateCostModel(model.config, seed=5)
    fresh.adopt_patterns(model)
    assert fresh._patterns is model._patterns
    assert fresh.pattern(g.matrix) is model.pattern(g.matrix)
    other = CognateCostModel(model.config.replace(**{"featurizer.max_points": 64}), seed=5)
    with pytest.raises(ValueError, match="cannot share patterns"):
        other.adopt_patterns(model)
    with pytest.raises(ValueError, match="locality True"):  # a pattern without the profile would not do
        CognateCostModel(model.config.replace(**{"featurizer.locality": True})).adopt_patterns(model)


def test_with_locality_stats_scores_as_before_until_trained(trained, tmp_path):
    model, space, test = trained
    wider = model.with_locality_stats()
    assert wider.config.featurizer.locality and not model.config.featurizer.locality
    for g in test[:3]:
        assert np.array_equal(model.predict(g.matrix, list(g.configs), space=space, feat=g.feat),
                              wider.predict(g.matrix, list(g.configs), space=space, feat=g.feat))
    with pytest.raises(ValueError, match="already reads"):
        wider.with_locality_stats()
    loaded = CognateCostModel.load(wider.save(tmp_path / "wide"))
    assert loaded.config.featurizer.locality
    # training the featurizer end to end (as pre-training does) reaches the new inputs
    tuned = copy.deepcopy(wider)
    tuned.config = tuned.config.replace(**{"train.train_featurizer": True, "train.epochs": 2})
    tuned.fit(test[:4], space=space)
    first = tuned.net.featurizer.stats_mlp[0].weight[:, 4:]
    assert first.abs().sum() > 0 and model.net.featurizer.stats_mlp[0].weight.shape[1] == 4


def test_save_load_round_trip(trained, tmp_path):
    model, space, test = trained
    model.save(tmp_path / "m")
    loaded = CognateCostModel.load(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "hparams.json").read_text())["train"]["epochs"] == model.config.train.epochs
    assert loaded.config == model.config
    for g in test[:3]:
        a = model.predict(g.matrix, list(g.configs), space=space, feat=g.feat)
        b = loaded.predict(g.matrix, list(g.configs), space=space, feat=g.feat)
        assert np.array_equal(a, b)
    assert loaded.encoder_reports == model.encoder_reports


def test_version_mismatch_is_a_clear_error(trained, tmp_path):
    model, _, _ = trained
    path = model.save(tmp_path / "old")
    meta = json.loads((path / "meta.json").read_text())
    meta["format_version"] = 999
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ModelVersionError, match="model format version 999"):
        CognateCostModel.load(path)
    with pytest.raises(FileNotFoundError, match="no saved model"):
        CognateCostModel.load(tmp_path / "nothing")


def test_finetune_on_a_new_platform(corpus, tmp_path):
    train, test = corpus
    source, target = ToySpace("spmm"), ToyAccelSpace("spmm")
    model = CognateCostModel(fast_model_config(), seed=1)
    model.fit(measured_groups(source, train, configs_per_matrix=48), space=source)
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    few = dict(list(sorted(train.items()))[:5])
    model.finetune(measured_groups(target, few, configs_per_matrix=40), space=target)
    after = model.net.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("featurizer."))
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("head."))
    assert model.net.platforms() == ["toy", "toyaccel"]
    assert model.encoder_reports["toyaccel"].exact_fraction == 1.0
    held_out = measured_groups(target, test)
    acc = pair_accuracy(model, held_out, space=target)
    assert acc > pair_accuracy(RandomRanker(seed=1), held_out, space=target) + 0.1, acc
    # both platforms survive a save/load
    loaded = CognateCostModel.load(model.save(tmp_path / "ft"))
    g = held_out[0]
    assert np.array_equal(loaded.predict(g.matrix, list(g.configs), space=target, feat=g.feat),
                          model.predict(g.matrix, list(g.configs), space=target, feat=g.feat))


def test_freeze_everything_but_head_and_unknown_component(corpus):
    train, _ = corpus
    space = ToySpace("spmm")
    groups = measured_groups(space, dict(list(sorted(train.items()))[:3]), configs_per_matrix=20)
    model = CognateCostModel(fast_model_config(), seed=2)
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    model.finetune(groups, space=space, freeze=("featurizer", "config"), epochs=2)
    after = model.net.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith(("featurizer.", "config_")))
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("head."))
    with pytest.raises(ValueError, match="unknown component"):
        model.finetune(groups, space=space, freeze=("everything",), epochs=1)


def test_l2sp_anchor_keeps_finetuned_weights_near_the_pretrained_ones(corpus):
    train, _ = corpus
    source, target = ToySpace("spmm"), ToyAccelSpace("spmm")
    base = CognateCostModel(fast_model_config(), seed=3)
    base.fit(measured_groups(source, train, configs_per_matrix=24), space=source)
    few = measured_groups(target, dict(list(sorted(train.items()))[:4]), configs_per_matrix=24)
    start = {k: v.clone() for k, v in base.net.state_dict().items() if k.startswith("head.")}

    def drift(anchor: float) -> float:
        model = copy.deepcopy(base)
        model.config = model.config.replace(**{"train.finetune_anchor": anchor})
        model.finetune(few, space=target, freeze=("featurizer", "config"), epochs=15, lr=1e-2)
        after = model.net.state_dict()
        return float(sum(((after[k] - v) ** 2).sum() for k, v in start.items()))

    free, anchored = drift(0.0), drift(10.0)
    assert free > 0 and anchored < 0.5 * free, (free, anchored)
    model = CognateCostModel(fast_model_config(), seed=3)
    model.config = model.config.replace(**{"train.finetune_anchor": -1.0})
    with pytest.raises(ValueError, match="anchor must be a finite number >= 0"):
        model.finetune(few, space=target, epochs=1)


def test_end_to_end_training_updates_featurizer_and_is_seeded(corpus):
    train, test = corpus
    space = ToySpace("spmm")
    groups = measured_groups(space, dict(list(sorted(train.items()))[:4]), configs_per_matrix=16)
    config = fast_model_config(**{"train.train_featurizer": True, "train.epochs": 2})
    scores = []
    for _ in range(2):
        model = CognateCostModel(config, seed=7)
        stem = model.net.featurizer.stem.weight.detach().clone()
        model.fit(groups, space=space)
        assert not torch.equal(stem, model.net.featurizer.stem.weight)
        g = groups[0]
        scores.append(model.predict(g.matrix, list(g.configs), space=space, feat=g.feat))
    assert np.array_equal(scores[0], scores[1])


@pytest.mark.parametrize("space", real_spaces(), ids=repr)
def test_scores_every_config_of_a_real_space(space, corpus):
    train, _ = corpus
    matrix = next(iter(sorted(train.items())))[1]
    model = CognateCostModel(fast_model_config(), seed=0)
    configs = space.configs()
    scores = model.predict(matrix, configs, space=space, feat=64)
    assert scores.shape == (len(configs),) and np.all(np.isfinite(scores))
    assert len(np.unique(scores)) > 1
    if space.knob_names:
        assert model.encoder_reports[space.platform].exact_fraction == 1.0


@pytest.fixture(scope="module")
def toy_split(corpus):
    """ToySpace SpMM groups: 12 training matrices and the rest for validation, 32 configs each."""
    train, _ = corpus
    space = ToySpace("spmm")
    names = sorted(train)
    groups = measured_groups(space, {n: train[n] for n in names[:12]}, configs_per_matrix=32)
    val = measured_groups(space, {n: train[n] for n in names[12:]}, configs_per_matrix=32)
    return space, groups, val


def test_validation_keeps_the_best_epoch(toy_split):
    space, groups, val = toy_split
    model = CognateCostModel(fast_model_config(**{"train.epochs": 6}), seed=3)
    model.fit(groups, space=space, val_groups=val)
    accs = [h["val_pair_accuracy"] for h in model.history]
    assert len(accs) == 6
    assert pair_accuracy(model, val, space=space) == pytest.approx(max(accs))


def test_validation_can_keep_the_best_top1_epoch(toy_split):
    space, groups, val = toy_split
    config = fast_model_config(**{"train.epochs": 5, "train.select_metric": "top1_fraction",
                                  "train.pair_weighting": "log_ratio"})
    model = CognateCostModel(config, seed=3).fit(groups, space=space, val_groups=val)
    top1 = [h["val_top1_fraction"] for h in model.history]
    assert len(top1) == 5 and all(0 < v <= 1 for v in top1)
    assert validation_metrics(model, val, space=space)["val_top1_fraction"] == pytest.approx(max(top1))
    bad = CognateCostModel(fast_model_config(**{"train.epochs": 1, "train.select_metric": "loss"}), seed=0)
    with pytest.raises(ValueError, match="unknown select_metric 'loss'"):
        bad.fit(groups, space=space, val_groups=val)


def test_log_ratio_weighting_ignores_near_ties():
    times = torch.tensor([1.0, 1.0001, 3.0])
    wrong_on_tie = torch.tensor([1.0, 0.0, 5.0])  # orders the near-tie wrongly, the clear pairs rightly
    wrong_on_gap = torch.tensor([5.0, 6.0, 0.0])  # orders the near-tie rightly, the clear pairs wrongly
    loss = lambda s, w: pairwise_margin_loss(s, times, pairs=4000, margin=1.0,  # noqa: E731
                                             generator=torch.Generator().manual_seed(0), weighting=w)
    assert loss(wrong_on_tie, "log_ratio") < 0.01 < loss(wrong_on_tie, "uniform")
    assert loss(wrong_on_gap, "log_ratio") > 1.0
    with pytest.raises(ValueError, match="unknown pair weighting"):
        loss(wrong_on_tie, "square")


def test_slowdown_loss_targets_log_slowdown_and_trains(toy_split):
    times = torch.tensor([2.0, 1.0, 4.0, 1e6])
    exact = torch.log(times / times.min()).clamp(max=SLOWDOWN_CAP)
    assert slowdown_loss(exact, times) == pytest.approx(0.0)
    assert slowdown_loss(exact + 1.0, times) == pytest.approx(1.0)
    space, groups, val = toy_split
    model = CognateCostModel(fast_model_config(**{"train.epochs": 8, "train.loss": "slowdown"}), seed=1)
    model.fit(groups, space=space, val_groups=val)
    assert model.history[-1]["loss"] < model.history[0]["loss"]
    assert pair_accuracy(model, val, space=space) > 0.6
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        CognateCostModel(fast_model_config(**{"train.loss": "hinge"}), seed=0).fit(groups, space=space)


def test_listwise_loss_puts_its_weight_on_the_fastest_configs(toy_split):
    times = torch.tensor([1.0, 1.3, 2.0, 4.0])
    right_top = torch.tensor([0.0, 1.0, 9.0, 5.0])  # the two fastest first, the slow tail misordered
    wrong_top = torch.tensor([1.0, 0.0, 5.0, 9.0])  # the two fastest swapped, the tail in order
    wrong_best = torch.tensor([9.0, 5.0, 0.0, 1.0])  # the slowest first
    loss = lambda s: float(listwise_loss(s, times, temperature=0.1))  # noqa: E731
    assert loss(right_top) < loss(wrong_top) < loss(wrong_best)
    # a misordered slow tail (2x and 4x the best) costs far less than a swap at the top at temperature 0.1
    ordered = loss(torch.tensor([0.0, 1.0, 5.0, 9.0]))
    assert loss(right_top) - ordered < 0.01 * (loss(wrong_top) - ordered)
    # a shift of every score changes nothing: it is a ranking loss
    assert loss(right_top + 7.0) == pytest.approx(loss(right_top))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        listwise_loss(right_top, times, temperature=0.0)
    space, groups, val = toy_split
    model = CognateCostModel(fast_model_config(**{"train.epochs": 8, "train.loss": "listwise"}), seed=1)
    model.fit(groups, space=space, val_groups=val)
    assert model.history[-1]["loss"] < model.history[0]["loss"]
    assert pair_accuracy(model, val, space=space) > 0.6


def _timed_groups(space, times_per_matrix):
    """Groups on a 30x30 matrix: each row of `times_per_matrix` times the first configs of `space`."""
    from cognate_tvm.data import Group
    from cognate_tvm.matrix import generate

    matrix, configs = generate("uniform", 30, seed=0), space.configs()
    return [Group(name=f"m{n}", matrix=matrix, feat=8, configs=tuple(configs[:len(times)]),
                  times_ms=np.array(times, dtype=np.float64))
            for n, times in enumerate(times_per_matrix)]


def test_best_fixed_configs_are_remembered_saved_and_kept_through_a_one_matrix_finetune(trained, tmp_path):
    import copy

    from cognate_tvm.model.cognate import FIXED_MIN_GROUPS

    model, space, _ = trained
    model = copy.deepcopy(model)
    configs = space.configs()
    # ln slowdowns by hand: config 1 is 1.2x the best on every matrix, config 0 is best on two but 3x on
    # the third (mean ln 3 / 3 = 0.37 > ln 1.2 = 0.18), config 3 is the best on the one matrix that timed it.
    groups = _timed_groups(space, [[1.0, 1.2, 2.0], [1.0, 1.2, 4.0], [3.0, 1.2, 1.0, 0.5]])
    assert FIXED_MIN_GROUPS == 3
    assert model.remember_fixed(groups, space) == [configs[1], configs[0], configs[2]]
    path = model.save(tmp_path / "m")
    assert CognateCostModel.load(path).fixed_configs(space) == [configs[1], configs[0], configs[2]]
    # fine-tuning on one matrix (tune --budget) keeps the list; training on three replaces it
    model.finetune(_timed_groups(space, [[1.0, 9.0, 9.0]]), space=space, epochs=1)
    assert model.fixed_configs(space)[0] == configs[1]
    model.finetune(_timed_groups(space, [[1.0, 9.0, 9.0]] * 3), space=space, epochs=1)
    assert model.fixed_configs(space)[0] == configs[0]
    # a model saved before models kept the list loads with none
    meta = json.loads((path / "meta.json").read_text())
    del meta["fixed_configs"]
    (path / "meta.json").write_text(json.dumps(meta))
    assert CognateCostModel.load(path).fixed_configs(space) == []
