"""benchmarks/transfer.py --size test: the whole protocol at toy scale (< 60 s).

It measures its own tiny CPU dataset (llvm), pre-trains a CPU model on it
(--cpu-model pretrain), simulates tiny SPADE corpora, runs every method and
ablation for one op, ships the TL5 model into a temporary package root, and
checks what the reports, the split and the shipped model must satisfy.
"""
from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from cognate_tvm import transfer


def _load_benchmark(monkeypatch):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "transfer.py"
    spec = importlib.util.spec_from_file_location("transfer_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # dataclasses look their module up while defining
    spec.loader.exec_module(bench)
    return bench


def test_transfer_benchmark_test_size(tmp_path, monkeypatch):
    bench = _load_benchmark(monkeypatch)
    out, root = tmp_path / "out", tmp_path / "pretrained"
    argv = ["--size", "test", "--ops", "spmm", "--out", str(out), "--cpu-model", "pretrain", "--ablations",
            "--ship", "--pretrained-root", str(root), "--kernel-cache", str(tmp_path / "kernels"),
            "--no-progress", "--threads", "1", "--select-metric", "top1_fraction"]
    assert bench.main(argv) == 0
    params = transfer.SIZES["test"]

    for name in ("transfer_spmm.json", "transfer_spmm.md", "transfer_spmm_per_matrix.png",
                 "transfer_spmm_efficiency.png"):
        assert (out / name).stat().st_size > 0
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads((out / "transfer_spmm.json").read_text())
    summary, info = result["summary"], result["info"]
    expected = set(transfer.main_methods(params)) | set(transfer.ablation_methods({"abl_source_1": 0, "abl_source_3": 0}))
    assert set(summary) == expected
    table = (out / "transfer_spmm.md").read_text()
    for method in expected:
        assert f"| {transfer.label(method)} |" in table

    for method, row in summary.items():
        for key, _ in transfer.COLUMNS:
            assert math.isfinite(row[key]), (method, key)
        assert 0.0 < row["oracle_fraction_top1"] <= row["oracle_fraction_topk"] <= 1.0 + 1e-9, method
        # tune's picks from the ranking start with its first, so they never do worse than it
        assert row["oracle_fraction_top1"] <= row["oracle_fraction_topk_diverse"] <= 1.0 + 1e-9, method
        assert row["speedup_topk"] <= row["speedup_oracle"] + 1e-9, method
    oracle = summary["oracle"]
    assert oracle["oracle_fraction_top1"] == pytest.approx(1.0) and oracle["pair_accuracy"] == pytest.approx(1.0)
    assert oracle["ape_top1"] == pytest.approx(0.0)
    assert info["headroom"]["test_oracle_over_baseline"] == pytest.approx(oracle["speedup_oracle"])
    assert 0.0 < info["headroom"]["test_best_fixed_in_hindsight_over_oracle"] <= 1.0

    # the split: validation and test come from the evaluation corpus, disjoint, all configs on test
    val, test = info["validation_matrices"], info["test_matrices"]
    assert len(val) == params.val_matrices and not set(val) & set(test)
    assert len(val) + len(test) == int(params.eval_corpus.split(":")[1])
    assert info["validation_samples"] == params.val_matrices * (params.val_configs + 1)
    # target samples: fine-tune matrices x their configs + the shared validation samples
    n_val = info["validation_samples"]
    tl = {k: summary[f"tl{k}"]["target_samples"] - n_val for k in params.ks}
    for k in params.ks:
        assert k * params.pool_configs <= tl[k] <= k * (params.pool_configs + 1)
        finetune = result["recipes"][f"tl{k}"]["0"]["finetune_matrices"]
        assert len(finetune) == k and not set(finetune) & (set(val) | set(test))
    assert summary["nt5"]["target_samples"] == summary["tl5"]["target_samples"]
    assert summary["best_fixed"]["target_samples"] == tl[5]
    for method in ("waco_fa", "waco_fm", "xgboost", "abl_random_mapping", "abl_source_1"):
        assert summary[method]["target_samples"] == summary["tl5"]["target_samples"]
    assert summary["zero_shot"]["target_samples"] == summary["random"]["target_samples"] == 0
    assert params.finetune_draw == "random"  # nested: TL3's matrices are among TL5's
    assert set(result["recipes"]["tl3"]["0"]["finetune_matrices"]) < set(result["recipes"]["tl5"]["0"]
                                                                        ["finetune_matrices"])
    # validation picked each recipe: the kept one has the best validation top-1 of its grid (--select-metric;
    # the CPU model pre-trained here selects by pair accuracy, so the flag overrode it)
    assert info["select_metric"] == "top1_fraction"
    for method in ("tl5", "nt10", "waco_fm", "xgboost"):
        recipe = result["recipes"][method]["0"]
        top1 = [r["val"]["oracle_fraction_top1"] for r in recipe["grid"]]
        assert recipe["val"]["oracle_fraction_top1"] == max(top1)
    # TL's grid: no fine-tuning, freezes x lrs, and the head re-initialized x reinit_lrs; the featurizer-trained
    # ablation's grid has no re-initialized recipe
    grid = result["recipes"]["tl5"]["0"]["grid"]
    assert len(grid) == 1 + len(params.freezes) * len(params.lrs) + len(params.reinit_lrs)
    assert [r["lr"] for r in grid if r["head_reinitialized"]] == list(params.reinit_lrs)
    assert not any(r["head_reinitialized"] for r in result["recipes"]["abl_featurizer_trained"]["0"]["grid"])
    assert "TL5 recipes chosen on validation: seed 0: " in table

    # the shipped TL5 model: package-style directory with a card; loads and scores like the reported TL5
    from cognate_tvm.model.pretrained import load_pretrained
    from cognate_tvm.space import create as create_space

    assert "spmm-spade" in result["shipped"]["path"]
    card = (root / "spmm-spade" / "MODEL_CARD.md").read_text()
    assert "Rebuild: `python benchmarks/transfer.py" in card
    assert all(name in card for name in result["shipped"]["finetune_matrices"])
    model = load_pretrained("spmm", "spade", root=root)
    data = transfer.target_data("spmm", params, out / "data", progress=False)
    assert [g.name for g in data.test] == test
    metrics, _ = transfer.evaluate_groups(model, data.test, create_space("spade", "spmm"), params.top_k)
    tl5 = next(r for r in result["runs"] if r["method"] == "tl5" and r["seed"] == 0)
    for key in ("oracle_fraction_top1", "pair_accuracy", "kendall_tau"):
        assert metrics[key] == pytest.approx(tl5[key], abs=1e-9)

    # the SPADE data is reused: nothing is simulated again
    from cognate_tvm.backends.spade import SpadeBackend

    monkeypatch.setattr(SpadeBackend, "measure", lambda *a, **k: pytest.fail("re-simulated a stored matrix"))
    again = transfer.target_data("spmm", params, out / "data", progress=False)
    assert [len(g.configs) for g in again.pool] == [len(g.configs) for g in data.pool]
    assert all(np.array_equal(a.times_ms, b.times_ms) for a, b in zip(again.test, data.test))


def test_reinitialized_redraws_the_head_and_keeps_the_featurizer(monkeypatch):
    import torch

    from cognate_tvm.model.cognate import CognateCostModel
    from cognate_tvm.model import ModelConfig

    base = CognateCostModel(ModelConfig(), seed=0)
    with torch.no_grad():
        for p in base.net.parameters():
            p.add_(1.0)  # stands for pre-training: every weight moved away from its initial draw
    fresh = transfer.reinitialized(base, seed=3)
    same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))  # noqa: E731
    assert same(fresh.net.featurizer, base.net.featurizer)
    assert not any(torch.equal(x, y) for x, y in zip(fresh.net.head.parameters(), base.net.head.parameters()))
    assert not any(torch.equal(x, y) for x, y in zip(fresh.net.config_embedding.parameters(),
                                                     base.net.config_embedding.parameters()))
    assert same(transfer.reinitialized(base, seed=3).net.head, fresh.net.head)  # seeded
    assert not same(transfer.reinitialized(base, seed=4).net.head, fresh.net.head)


def test_finetune_draw_random_is_nested_and_stratified_spans_the_sizes(monkeypatch):
    import scipy.sparse as sp

    from cognate_tvm.data import Group

    # 20 pool groups whose nnz grows with their index: group i has i + 1 nonzeros
    pool = [Group(f"m{i:02d}", sp.eye(40, format="csr")[: i + 1], 32, (), np.zeros(0)) for i in range(20)]
    names = lambda k, seed, draw: [g.name for g in transfer.finetune_draw(pool, k, seed, draw)]  # noqa: E731
    random5 = names(5, 0, "random")
    assert names(3, 0, "random") == random5[:3]  # nested: TL3 within TL5
    assert names(20, 0, "random")[:5] == random5 and sorted(names(20, 0, "random")) == [g.name for g in pool]
    for seed in range(6):
        stratified = transfer.finetune_draw(pool, 5, seed, "stratified")
        # one matrix from each fifth of the sizes (4 groups each), smallest stratum first
        assert [g.matrix.nnz - 1 for g in stratified] == sorted(g.matrix.nnz - 1 for g in stratified)
        assert [(g.matrix.nnz - 1) // 4 for g in stratified] == [0, 1, 2, 3, 4], seed
    assert names(5, 1, "stratified") == names(5, 1, "stratified")  # seeded
    assert len({tuple(names(5, s, "stratified")) for s in range(6)}) > 1
    with pytest.raises(ValueError, match="unknown fine-tune draw"):
        transfer.finetune_draw(pool, 5, 0, "largest")
    # diverse: one per cluster of the (standardized) embeddings; here 4 of 5 dimensions carry nnz parity
    embed = lambda matrix: np.array([matrix.nnz % 2] * 4 + [matrix.nnz / 20.0])  # noqa: E731
    for seed in range(4):
        diverse = transfer.finetune_draw(pool, 2, seed, "diverse", embed)
        assert sorted(g.matrix.nnz % 2 for g in diverse) == [0, 1], seed
    with pytest.raises(ValueError, match="needs the source model's matrix embeddings"):
        transfer.finetune_draw(pool, 5, 0, "diverse")
    # diverse-largest: the same two parity clusters, each sends its largest matrix (m19: odd nnz, m18: even)
    for seed in range(4):
        largest = transfer.finetune_draw(pool, 2, seed, "diverse-largest", embed)
        assert sorted(g.name for g in largest) == ["m18", "m19"], seed
    # include: the named matrices come first, the draw fills the rest from the other pool matrices
    for draw in ("random", "stratified", "diverse", "diverse-largest"):
        got = [g.name for g in transfer.finetune_draw(pool, 5, 2, draw, embed, include=("m19", "m03"))]
        assert got[:2] == ["m19", "m03"] and len(set(got)) == 5, draw
        assert got[2:] == [g.name for g in transfer.finetune_draw([g for g in pool if g.name not in ("m19", "m03")],
                                                               3, 2, draw, embed)]
    assert names(5, 0, "random") == [g.name for g in transfer.finetune_draw(pool, 5, 0, "random", include=())]
    for bad in (("m99",), ("m01", "m01"), tuple(f"m{i:02d}" for i in range(6))):
        with pytest.raises(ValueError, match="cannot include"):
            transfer.finetune_draw(pool, 5, 0, "random", include=bad)


def test_sizes_are_consistent(monkeypatch):
    bench = _load_benchmark(monkeypatch)
    for name, params in transfer.SIZES.items():
        pool = int(params.pool_corpus.split(":")[1])
        evaluation = int(params.eval_corpus.split(":")[1])
        assert 5 in params.ks, name
        assert max(*params.ks, *params.nt_sizes) <= pool, name
        assert params.val_matrices < evaluation, name
        assert len(params.seeds) >= (1 if name == "test" else 3), name
    full = transfer.SIZES["full"]
    assert full.ks == (3, 5, 7) and full.nt_sizes == (5, 100, 1000) and full.eval_max_rows >= 1_000_000
    params, _ = bench.parse_args(["--size", "full", "--pool-matrices", "300", "--eval-matrices", "30"])
    assert params.nt_sizes == (5, 100, 300) and params.pool_corpus.startswith("synthetic:300:")
    assert params.eval_corpus == "synthetic:30:1101"
    assert params.select_metric == "pair_accuracy" and params.finetune_draw == "random"
    assert bench.parse_args(["--size", "full", "--finetune-draw", "stratified"])[0].finetune_draw == "stratified"
    assert bench.parse_args(["--size", "full", "--finetune-draw", "diverse"])[0].finetune_draw == "diverse"
    assert bench.parse_args(["--size", "full", "--finetune-draw", "diverse-largest"])[0].finetune_draw == \
        "diverse-largest"
    assert bench.parse_args(["--size", "full", "--finetune-include", "a_1", "b_2"])[0].finetune_include == ("a_1", "b_2")
    assert bench.parse_args(["--size", "full"])[0].finetune_include == ()
    assert params.target_knob_encoder == "latent"
    assert bench.parse_args(["--size", "full", "--target-knob-encoder", "pad"])[0].target_knob_encoder == "pad"
    assert params.anchors == (0.0,)
    assert bench.parse_args(["--size", "full", "--anchors", "0", "0.1"])[0].anchors == (0.0, 0.1)
    assert params.pool_max_rows == 100_000
    params, _ = bench.parse_args(["--size", "full", "--pool-max-rows", "1000000"])
    assert params.pool_max_rows == 1_000_000 and params.eval_max_rows == 1_000_000
    params, _ = bench.parse_args(["--size", "full", "--finetune-epochs", "150", "--lrs", "5e-4", "5e-3",
                                  "--reinit-lrs", "--nt-epochs", "100", "--nt-lrs", "1e-2"])
    assert (params.finetune_epochs, params.lrs, params.reinit_lrs) == (150, (5e-4, 5e-3), ())
    assert (params.nt_epochs, params.nt_lrs) == (100, (1e-2,))
    assert bench.parse_args(["--size", "full"])[0].lrs == full.lrs
    for bad in (["--finetune-epochs", "0"], ["--lrs", "1e-3", "-1e-3"], ["--nt-lrs", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args(["--size", "full", *bad])
    with pytest.raises(SystemExit):
        bench.parse_args(["--cpu-data", "/nowhere"])  # needs --cpu-corpus too


def test_size_options_and_curve_only(tmp_path, monkeypatch):
    """--ks / --nt-sizes set the curve's points (explicit NT sizes win over the pool cap); --curve-only
    runs TLk, NTn and the free rows, loads no CPU data, and writes transfer_<op>_curve.*. With --refit,
    validation still chooses each recipe and epoch (validation held out), and the model returned is that
    recipe trained again, to the chosen epoch, on the fine-tune and validation matrices together."""
    from cognate_tvm.model.cognate import CognateCostModel

    bench = _load_benchmark(monkeypatch)
    assert bench.parse_args(["--size", "full"])[0].refit is False
    calls = []  # (method, matrices, val_groups, epochs) of every training call
    for name in ("fit", "finetune"):
        original = getattr(CognateCostModel, name)

        def spy(self, groups, *, _original=original, _name=name, **kwargs):
            calls.append((_name, {g.name for g in groups}, kwargs.get("val_groups"), kwargs.get("epochs")))
            return _original(self, groups, **kwargs)

        monkeypatch.setattr(CognateCostModel, name, spy)
    params, _ = bench.parse_args(["--size", "full", "--pool-matrices", "100", "--ks", "100", "5", "20",
                                  "--nt-sizes", "20", "5", "100"])
    assert params.ks == (5, 20, 100) and params.nt_sizes == (5, 20, 100)
    for bad in (["--ks", "0"], ["--nt-sizes", "-5"], ["--curve-only", "--ablations"], ["--curve-only", "--ship"]):
        with pytest.raises(SystemExit):
            bench.parse_args(["--size", "full", *bad])
    out = tmp_path / "out"
    argv = ["--size", "test", "--ops", "spmm", "--out", str(out), "--curve-only", "--ks", "3", "5", "8",
            "--nt-sizes", "5", "8", "--no-progress", "--threads", "1", "--refit"]
    monkeypatch.setattr(bench, "cpu_source", lambda *a, **k: pytest.fail("--curve-only loaded CPU data"))
    assert bench.main(argv) == 0
    result = json.loads((out / "transfer_spmm_curve.json").read_text())
    validation = set(result["info"]["validation_matrices"])
    assert all(not (validation & c[1]) for c in calls if c[2] is not None)  # choices made with validation held out
    refits = [c for c in calls if c[2] is None and validation <= c[1]]
    for method, recipe in ((m, r["0"]) for m, r in result["recipes"].items() if m[:2] in ("tl", "nt")):
        assert recipe["refit"] is True, method
        if recipe["epochs_max"] == 0:
            continue  # validation chose no fine-tuning: nothing to train again
        assert isinstance(recipe["refit_kept"], bool), method  # the guard judged the refit
        matrices = validation | set(recipe.get("finetune_matrices", ()))
        match = [c for c in refits if c[0] == ("finetune" if method.startswith("tl") else "fit")
                 and matrices <= c[1] and c[3] == recipe["epoch_kept"] + 1]
        assert match, f"{method}: no refit on its matrices and validation to epoch {recipe['epoch_kept'] + 1}"
    assert result["summary"]["best_fixed"]["target_samples"] == result["summary"]["tl5"]["target_samples"]
    assert "Refit:" in (out / "transfer_spmm_curve.md").read_text()
    assert set(result["summary"]) == {"zero_shot", "oracle", "tl3", "tl5", "tl8", "nt5", "nt8", "best_fixed",
                                      "random"}
    assert result["summary"]["tl8"]["target_samples"] > result["summary"]["tl5"]["target_samples"]
    assert (out / "transfer_spmm_curve_efficiency.png").stat().st_size > 0
    assert "none loaded (none of this run's rows needs them)" in (out / "transfer_spmm_curve.md").read_text()
    with pytest.raises(ValueError, match="k = 5"):
        bench.main(["--size", "test", "--ops", "spmm", "--out", str(out), "--curve-only", "--ks", "3", "8",
                    "--no-progress", "--threads", "1"])


def test_ship_only_with_refit_loads_no_cpu_data(tmp_path, monkeypatch):
    """--ship-only builds TL5 of the first seed from the CPU model alone; with --refit the shipped model is
    the refit one, its card says so, and the package root gets a loadable model. With --target-knob-encoder
    pad its SPADE knobs go in raw while the CPU model keeps its latent encoder, and both survive loading."""
    from cognate_tvm.model.pretrained import CARD_FILE, load_pretrained

    bench = _load_benchmark(monkeypatch)
    monkeypatch.setattr(bench, "cpu_source", lambda *a, **k: pytest.fail("--ship-only loaded CPU data"))
    out, root = tmp_path / "out", tmp_path / "pretrained"
    shutil.copytree(Path(bench.PRETRAINED_DIR) / "spmm-cpu", root / "spmm-cpu")  # the CPU source, as shipped
    assert bench.main(["--size", "test", "--ops", "spmm", "--out", str(out), "--ship-only", "--ship", "--refit",
                       "--pretrained-root", str(root), "--no-progress", "--threads", "1",
                       "--target-knob-encoder", "pad"]) == 0
    result = json.loads((out / "transfer_spmm_ship.json").read_text())
    assert result["params"]["target_knob_encoder"] == "pad"
    assert "SPADE knob encoder: pad" in (out / "transfer_spmm_ship.md").read_text()
    assert set(result["summary"]) == {"oracle", "tl5"}
    recipe = result["shipped"]["recipe"]
    assert recipe["refit"] is True
    card = (root / "spmm-spade" / CARD_FILE).read_text()
    assert "SPADE knob encoder: pad." in card
    assert ("fine-tune and validation matrices together" in card) == bool(recipe["epochs_max"])
    model = load_pretrained("spmm", "spade", root=root)
    assert {p: model.net.get_encoder(p).kind for p in ("cpu", "spade")} == {"cpu": "latent", "spade": "pad"}


def test_xgboost_refit_boosts_the_chosen_rounds_on_finetune_and_validation(monkeypatch):
    """XGBoost's count of extra rounds is chosen on validation (held out); with refit, the returned model
    boosts that many rounds again on the fine-tune and validation matrices together."""
    bench = _load_benchmark(monkeypatch)

    class Recorder:
        finetune_rounds = 0
        calls: list = []

        def finetune(self, groups, *, space):
            Recorder.calls.append((self.finetune_rounds, list(groups)))
            return self

    # validation prefers 25 rounds (its score: minus the distance of the model's rounds from 25)
    monkeypatch.setattr(transfer.recipes, "val_score", lambda model, val, space, k: {
        "pair_accuracy": -abs(model.finetune_rounds - 25), "oracle_fraction_top1": 0.0})
    params = bench.dataclasses.replace(transfer.SIZES["test"], xgb_rounds=(0, 25, 100), refit=True)
    model, recipe = transfer.xgboost_on_validation(Recorder(), ["f1", "f2"], ["v1"], None, params)
    assert recipe["rounds"] == 25 and recipe["refit"] is True
    assert Recorder.calls[:2] == [(25, ["f1", "f2"]), (100, ["f1", "f2"])]  # the grid: validation held out
    assert Recorder.calls[2:] == [(25, ["f1", "f2", "v1"])]  # the refit
    assert model.finetune_rounds == 25
    Recorder.calls.clear()
    params = bench.dataclasses.replace(params, refit=False)
    transfer.xgboost_on_validation(Recorder(), ["f1", "f2"], ["v1"], None, params)
    assert all(groups == ["f1", "f2"] for _, groups in Recorder.calls)


def test_cpu_data_of_another_corpus_is_a_clear_error(tmp_path, monkeypatch):
    """The corpus draws each matrix's size from its row bounds, so other bounds name other matrices: a CPU
    dataset that shares no matrix with the given corpus is an error that says so, not an empty source."""
    import argparse

    bench = _load_benchmark(monkeypatch)
    data = Path(__file__).resolve().parents[1] / "data" / "cpu_spmm_2t"
    args = argparse.Namespace(cpu_data=str(data), cpu_corpus="synthetic:3:2026", cpu_min_rows=1000,
                              cpu_max_rows=2000)
    with pytest.raises(ValueError, match=r"none of the 196 matrices .* --cpu-max-rows"):
        bench.cpu_source("spmm", transfer.SIZES["test"], args, tmp_path, progress=False)


def test_guarded_refit_keeps_the_validated_model_when_the_refit_ranks_its_training_matrices_worse(monkeypatch):
    import scipy.sparse as sp

    from cognate_tvm.data import Group
    from cognate_tvm.space import create as create_space

    spade = create_space("spade", "spmm")
    rng = np.random.default_rng(0)
    configs = (spade.baseline(), *[c for c in spade.configs()[:30] if c != spade.baseline()])
    seen = [Group(f"m{i}", sp.random(50 + i, 40, density=0.1, format="csr", random_state=i), 32, configs,
                  rng.uniform(1.0, 2.0, len(configs))) for i in range(3)]

    class Reversed(transfer.OracleRanker):  # ranks the slowest config first
        def predict(self, matrix, configs, *, space, feat):
            return -super().predict(matrix, configs, space=space, feat=feat)

    good, bad = transfer.OracleRanker(seen), Reversed(seen)
    params = transfer.SIZES["test"]
    model, guard = transfer.guarded_refit(good, bad, seen, spade, params)
    assert model is good and guard["refit_kept"] is False
    assert guard["refit_fit"]["refit"] < guard["refit_fit"]["validated"]
    model, guard = transfer.guarded_refit(bad, good, seen, spade, params)
    assert model is good and guard["refit_kept"] is True
    model, guard = transfer.guarded_refit(good, transfer.OracleRanker(seen), seen, spade, params)  # a tie keeps the refit
    assert guard["refit_kept"] is True and model is not good
    assert "refit rejected" in transfer.recipe_text({"epochs_max": 5, "freeze": ["featurizer"], "lr": 1e-3,
                                                  "epoch_kept": 3, "refit": True, "refit_kept": False})


def test_groups_hold_the_pattern_without_values(monkeypatch):
    """The pool's groups keep 1 byte per nonzero (a 1000-matrix pool at 1k-1M rows does not fit as float64),
    with the pattern, and so the content hash and the featurizer's input, of the entry's matrix."""
    from cognate_tvm.data import matrix_hash
    from cognate_tvm.matrix.corpus import load_corpus
    from cognate_tvm.model.featurizer import pattern_of

    for entry in load_corpus("synthetic:4:1102", min_rows=300, max_rows=2000):
        full, lean = entry.build(), transfer.datasets._Structure(entry).build()
        assert lean.dtype == np.bool_ and lean.data.all() and lean.nnz == full.nnz and lean.shape == full.shape
        assert matrix_hash(lean) == matrix_hash(full)
        a, b = pattern_of(lean, max_points=64), pattern_of(full, max_points=64)
        assert a.level == b.level and np.array_equal(a.coords.numpy(), b.coords.numpy())
        assert np.array_equal(a.counts.numpy(), b.counts.numpy())


def test_validation_chooses_an_ensemble_only_where_it_validates_better(monkeypatch):
    """Two rankers that each see half of the cost (times = x + y; one scores x, the other y) rank validation
    worse than their mean does: with --ensemble-sizes 1 2 validation takes the mean of both, each member
    refit; with the default (1,) it takes the best single ranker."""
    import scipy.sparse as sp

    from cognate_tvm.data import Group
    from cognate_tvm.model.cognate import RankingModel
    from cognate_tvm.model.ensemble import RankEnsemble
    from cognate_tvm.space import create as create_space

    bench = _load_benchmark(monkeypatch)
    spade = create_space("spade", "spmm")
    configs = (spade.baseline(), *[c for c in spade.configs()[:39] if c != spade.baseline()])
    rng = np.random.default_rng(1)
    x, y = rng.permutation(len(configs)) + 1.0, rng.permutation(len(configs)) + 1.0
    part = {"x": dict(zip((c.to_json() for c in configs), x)), "y": dict(zip((c.to_json() for c in configs), y))}
    val = [Group(f"v{i}", sp.random(40, 40, density=0.1, format="csr", random_state=i), 32, configs, x + y)
           for i in range(2)]

    class Part(RankingModel):
        def __init__(self, key):
            self.key, self.refit = key, False

        def fit(self, groups, *, space):
            return self

        def finetune(self, groups, *, space):
            return self

        def predict(self, matrix, configs, *, space, feat):
            return np.array([part[self.key][c.to_json()] for c in configs])

    def tried():
        return [(model, {"name": model.key, "val": transfer.val_score(model, val, spade, 5)})
                for model in (Part("x"), Part("y"))]

    def refit(model, recipe):
        model.refit = True
        return model, {**recipe, "refit_kept": True}

    params = bench.dataclasses.replace(transfer.SIZES["test"], refit=True, ensemble_sizes=(1, 2))
    candidates = tried()
    best_single = max(r["val"]["pair_accuracy"] for _, r in candidates)
    assert best_single < 0.9
    model, recipe = transfer.chosen_on_validation(candidates, refit, val, spade, params)
    assert isinstance(model, RankEnsemble) and [m.key for m in model.members] == sorted(
        ("x", "y"), key=lambda k: -next(r["val"]["pair_accuracy"] for m, r in candidates if m.key == k))
    assert all(m.refit for m in model.members)
    assert recipe["ensemble_size"] == 2 and recipe["val"]["pair_accuracy"] == pytest.approx(1.0)
    assert [r["refit_kept"] for r in recipe["ensemble"]] == [True, True] and len(recipe["grid"]) == 2
    assert transfer.val_score(model, val, spade, 5)["oracle_fraction_top1"] == pytest.approx(1.0)

    params = bench.dataclasses.replace(params, ensemble_sizes=(1,))
    model, recipe = transfer.chosen_on_validation(tried(), refit, val, spade, params)
    assert isinstance(model, Part) and model.refit and recipe["ensemble_size"] == 1 and "ensemble" not in recipe
    assert recipe["val"]["pair_accuracy"] == pytest.approx(best_single)
    text = transfer.recipe_text({"refit": True, "ensemble": [
        {"epochs_max": 5, "freeze": ["featurizer"], "lr": 1e-3, "epoch_kept": 3}, {"epochs_max": 0}]})
    assert text == ("mean of the 2 best on validation (pre-trained head, frozen featurizer, lr 0.001, epoch 3, "
                    "refit / no fine-tuning)")


def test_ship_refuses_an_ensemble(monkeypatch):
    bench = _load_benchmark(monkeypatch)
    with pytest.raises(SystemExit):
        bench.parse_args(["--size", "test", "--ship", "--ensemble-sizes", "1", "3"])
    params, _ = bench.parse_args(["--size", "test", "--ensemble-sizes", "3", "1"])
    assert params.ensemble_sizes == (3, 1) and transfer.SIZES["full"].ensemble_sizes == (1,)


def test_curve_with_ensembles_records_each_choice(tmp_path, monkeypatch):
    """--ensemble-sizes at toy scale: each learned row records the ensemble size validation chose; a chosen
    ensemble validates strictly better than the grid's best single model and lists its members' recipes."""
    bench = _load_benchmark(monkeypatch)
    out = tmp_path / "out"
    argv = ["--size", "test", "--ops", "spmm", "--out", str(out), "--curve-only", "--ks", "5", "--nt-sizes", "5",
            "--no-progress", "--threads", "1", "--ensemble-sizes", "1", "2", "3", "--lrs", "1e-3", "3e-3"]
    assert bench.main(argv) == 0
    result = json.loads((out / "transfer_spmm_curve.json").read_text())
    assert result["params"]["ensemble_sizes"] == [1, 2, 3]
    for method in ("tl5", "nt5"):
        recipe = result["recipes"][method]["0"]
        size, grid = recipe["ensemble_size"], recipe["grid"]
        assert 1 <= size <= min(3, len(grid)), method
        best_single = max(r["val"]["pair_accuracy"] for r in grid)
        if size == 1:
            assert recipe["val"]["pair_accuracy"] == best_single and "ensemble" not in recipe
        else:
            assert recipe["val"]["pair_accuracy"] > best_single and len(recipe["ensemble"]) == size
    assert "Ensembles: validation chose" in (out / "transfer_spmm_curve.md").read_text()


def test_target_loss_and_grid_audit(tmp_path, monkeypatch):
    """--target-loss listwise: TLk's fine-tuning and NTn's training both use the listwise loss (counted calls),
    and the JSON and markdown say which loss the run used. --audit-grid: every grid point carries its test
    scores; without refit the chosen grid point's audit is the row's own test score."""
    bench = _load_benchmark(monkeypatch)
    import cognate_tvm.train as train

    assert transfer.target_loss(transfer.SIZES["test"]) == {}  # by default each network keeps its source's loss
    with pytest.raises(SystemExit):  # a temperature without the listwise loss would be silently ignored
        bench.parse_args(["--listwise-temperature", "0.3"])
    calls = []
    real = train.listwise_loss
    monkeypatch.setattr(train, "listwise_loss", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    seen = []
    real_fit = bench.CognateCostModel.fit
    real_finetune = bench.CognateCostModel.finetune
    loss_of = lambda model: (model.config.train.loss, model.config.train.listwise_temperature)  # noqa: E731
    monkeypatch.setattr(bench.CognateCostModel, "fit",
                        lambda self, *a, **kw: seen.append(("fit", loss_of(self))) or real_fit(self, *a, **kw))
    monkeypatch.setattr(bench.CognateCostModel, "finetune",
                        lambda self, *a, **kw: seen.append(("finetune", loss_of(self)))
                        or real_finetune(self, *a, **kw))
    out = tmp_path / "out"
    argv = ["--size", "test", "--ops", "spmm", "--out", str(out), "--curve-only", "--ks", "5", "--nt-sizes", "5",
            "--no-progress", "--threads", "1", "--target-loss", "listwise", "--listwise-temperature", "0.3",
            "--lrs", "1e-3", "--audit-grid"]
    assert bench.main(argv) == 0
    assert {kind for kind, _ in seen} == {"fit", "finetune"}  # NT5 fits, TL5 fine-tunes
    assert {loss for _, loss in seen} == {("listwise", 0.3)} and calls
    result = json.loads((out / "transfer_spmm_curve.json").read_text())
    assert result["params"]["target_loss"] == "listwise"
    assert result["params"]["listwise_temperature"] == 0.3
    markdown = (out / "transfer_spmm_curve.md").read_text()
    assert "Loss of every network trained on SPADE data: listwise (temperature 0.3)" in markdown
    for method in ("tl5", "nt5"):
        recipe = result["recipes"][method]["0"]
        audits = [point["audit"] for point in recipe["grid"]]
        assert audits and all(0 < a["oracle_fraction_top1"] <= 1 for a in audits)
        run = next(r for r in result["runs"] if r["method"] == method)
        chosen = [p for p in recipe["grid"] if transfer.same_point(p, recipe)]
        assert len(chosen) == 1 and chosen[0]["audit"]["oracle_fraction_top1"] == run["oracle_fraction_top1"]
        assert max(a["oracle_fraction_top1"] for a in audits) >= run["oracle_fraction_top1"]
    assert "### Grid audit" in markdown and "| tl5 |" in markdown and "| nt5 |" in markdown
