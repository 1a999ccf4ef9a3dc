"""Pre-training: the best-fixed baseline, benchmarks/pretrain.py end to end, shipped-model loading."""
import argparse
import json
import runpy
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from cognate_tvm import baselines, space
from cognate_tvm.model.loading import load_shipped_model
from cognate_tvm.space.sampling import config_sample
from cognate_tvm.data import collect, load_frame
from cognate_tvm.errors import ModelVersionError, PretrainedNotFoundError
from cognate_tvm.matrix.corpus import load_corpus
from cognate_tvm.model import available_pretrained, load_pretrained, pretrained_path
from toy_space import FakeBackend, ToySpace, measured_groups, small_corpus

ROOT = Path(__file__).resolve().parent.parent


def test_best_fixed_picks_the_config_closest_to_each_best():
    toy = ToySpace("spmm")
    groups = measured_groups(toy, small_corpus(2, seed=1))
    model = baselines.create("best_fixed").fit(groups, space=toy)
    configs = list(groups[0].configs)
    mean_slowdown = np.mean([np.log(g.times_ms / g.times_ms.min()) for g in groups], axis=0)
    assert model.best() == configs[int(np.argmin(mean_slowdown))].to_json()
    scores = model.predict(groups[0].matrix, configs, space=toy, feat=32)
    assert np.allclose(scores, mean_slowdown)
    # a config never measured ranks after every measured one
    partial = [g.__class__(g.name, g.matrix, g.feat, g.configs[1:], g.times_ms[1:]) for g in groups]
    model.fit(partial, space=toy)
    assert model.predict(groups[0].matrix, configs, space=toy, feat=32).argmax() == 0
    # fine-tuning re-chooses on the new groups only
    only = measured_groups(toy, {"one": groups[3].matrix})
    model.finetune(only, space=toy)
    assert model.best() == configs[int(np.argmin(only[0].times_ms))].to_json()


def run_pretrain(argv: list[str]) -> None:
    """benchmarks/pretrain.py as a script with `argv`; it must exit 0."""
    old = sys.argv
    sys.argv = argv
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(ROOT / "benchmarks" / "pretrain.py"), run_name="__main__")
        assert done.value.code == 0
    finally:
        sys.argv = old


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """benchmarks/pretrain.py run on a small synthetic-time CPU dataset; returns its dirs."""
    tmp = tmp_path_factory.mktemp("pretrain")
    cpu = space.create("cpu", "spmm")
    corpus = "synthetic:12:3"
    entries = load_corpus(corpus, min_rows=100, max_rows=400)
    pool = cpu.sample_covering(100, seed=0)
    configs = {e.name: config_sample(cpu, 30, 0, e.name, pool) for e in entries}
    collect(FakeBackend(cpu), "spmm", entries, configs, tmp / "data", feat=32, progress=False)
    # a second dataset at another dense width over some of the same matrices (--data takes both)
    collect(FakeBackend(cpu), "spmm", entries[::3], configs, tmp / "data64", feat=64, progress=False)
    hparams = tmp / "hparams.json"
    hparams.write_text(json.dumps({"featurizer.stem_channels": 8, "featurizer.stage_channels": [8, 8, 8],
                                   "featurizer.max_points": 1024, "predictor.hidden": [64, 32],
                                   "train.batch_matrices": 4}))
    argv = ["pretrain.py", "--op", "spmm", "--data", str(tmp / "data"), str(tmp / "data64"), "--corpus", corpus, "--min-rows", "100",
            "--max-rows", "400", "--epochs", "10", "--lr", "3e-3", "--hparams", str(hparams),
            "--ship", str(tmp / "models" / "spmm-cpu"), "--out", str(tmp / "out"), "--quiet"]
    run_pretrain(argv)
    return tmp


def test_pretrain_writes_model_card_report_and_plot(shipped):
    report = json.loads((shipped / "out" / "pretrain_spmm.json").read_text())
    assert set(report["test"]) == {"cognate", "xgboost", "best_fixed", "random"}
    split = report["split"]
    assert not set(split["train"]) & set(split["test"]) and not set(split["validation"]) & set(split["test"])
    test = report["test"]
    # both datasets were read: the report has each dense width, and the groups of a matrix stay in one split
    assert {"all", "N=32"} <= set(test["cognate"]) and report["measurements"] == 12 * 31 + 4 * 31
    # the synthetic times are a known function of the shared coordinates: a trained model orders
    # unseen matrices' configs far better than chance
    assert test["cognate"]["all"]["pair_accuracy"] > 0.62
    assert test["random"]["all"]["pair_accuracy"] < 0.58
    card = (shipped / "models" / "spmm-cpu" / "MODEL_CARD.md").read_text()
    assert "Rebuild: `python benchmarks/pretrain.py --op spmm" in card and "top-1 / best" in card
    assert "Data: 12 matrices (corpus `synthetic:12:3`" in card
    assert (shipped / "out" / "pretrain_spmm.png").stat().st_size > 1000
    model = load_pretrained("spmm", "cpu", root=shipped / "models")
    assert available_pretrained(root=shipped / "models") == [("spmm", "cpu")]
    matrix = load_corpus("synthetic:2:9", min_rows=100, max_rows=300)[0].build()
    cpu = space.create("cpu", "spmm")
    assert np.all(np.isfinite(model.predict(matrix, cpu.sample(50, seed=0), space=cpu, feat=32)))


def test_pretrain_on_two_corpora_splits_each_and_reports_each(shipped, tmp_path):
    cpu = space.create("cpu", "spmm")
    realistic = "realistic:6:5:300-400"
    entries = load_corpus(realistic)
    pool = cpu.sample_covering(100, seed=0)
    collect(FakeBackend(cpu), "spmm", entries, {e.name: config_sample(cpu, 30, 0, e.name, pool) for e in entries},
            tmp_path / "real", feat=32, progress=False)
    argv = ["pretrain.py", "--op", "spmm", "--data", str(shipped / "data"), str(tmp_path / "real"),
            "--corpus", "synthetic:12:3", realistic, "--min-rows", "100", "--max-rows", "400", "--epochs", "2",
            "--init", str(shipped / "models" / "spmm-cpu"), "--ship", str(tmp_path / "both"),
            "--out", str(tmp_path / "out"), "--quiet"]
    run_pretrain(argv)
    report = json.loads((tmp_path / "out" / "pretrain_spmm.json").read_text())
    # each corpus is split on its own: the generated matrices keep the parts the one-corpus run gave them
    alone = json.loads((shipped / "out" / "pretrain_spmm.json").read_text())["split"]
    names = {e.name for e in entries}
    for part in ("train", "validation", "test"):
        assert [n for n in report["split"][part] if n not in names] == alone[part]
    card = (tmp_path / "both" / "MODEL_CARD.md").read_text()
    assert f"Data: 18 matrices, 12 of `synthetic:12:3` and 6 of `{realistic}`" in card
    tested = {spec for spec in ("synthetic:12:3", realistic)
              if any(n in report["split"]["test"] for n in ({e.name for e in load_corpus(spec, min_rows=100,
                                                                                         max_rows=400)}))}
    assert tested and tested <= set(report["test"]["cognate"])


def test_locality_widens_the_init_model_and_ships_a_model_that_reads_the_profile(shipped, tmp_path):
    from cognate_tvm.model import CognateCostModel

    argv = ["pretrain.py", "--op", "spmm", "--data", str(shipped / "data"), "--corpus", "synthetic:12:3",
            "--min-rows", "100", "--max-rows", "400", "--epochs", "2", "--lr", "1e-3", "--locality",
            "--init", str(shipped / "models" / "spmm-cpu"), "--ship", str(tmp_path / "loc"),
            "--out", str(tmp_path / "out"), "--quiet"]
    run_pretrain(argv)
    init, wide = CognateCostModel.load(shipped / "models" / "spmm-cpu"), CognateCostModel.load(tmp_path / "loc")
    assert wide.config.featurizer.locality and not init.config.featurizer.locality
    assert wide.net.featurizer.stats_mlp[0].in_features > init.net.featurizer.stats_mlp[0].in_features
    report = json.loads((tmp_path / "out" / "pretrain_spmm.json").read_text())
    assert set(report["test"]) == {"cognate", "init", "xgboost", "best_fixed", "random"}
    assert "--locality" in (tmp_path / "loc" / "MODEL_CARD.md").read_text()
    # training a model that reads the profile further, with --locality again, starts from it as it is
    again = [*argv[:argv.index("--init")], "--init", str(tmp_path / "loc"), "--ship", str(tmp_path / "loc2"),
             "--out", str(tmp_path / "out2"), "--quiet"]
    run_pretrain(again)
    assert CognateCostModel.load(tmp_path / "loc2").config.featurizer.locality


def test_the_model_keeps_the_train_splits_best_fixed_configs_and_fixed_only_rebuilds_them(shipped, tmp_path):
    from cognate_tvm.model.cognate import FIXED_COUNT, FIXED_MIN_GROUPS

    cpu = space.create("cpu", "spmm")
    model = load_pretrained("spmm", "cpu", root=shipped / "models")
    fixed = model.fixed_configs(cpu)
    assert len(fixed) == FIXED_COUNT
    # they are the best fixed baseline's order over the train split, among configs timed on 3+ of its matrices
    # and ranked by tune on the data's thread count
    report = json.loads((shipped / "out" / "pretrain_spmm.json").read_text())
    frame = pd.concat([load_frame(d) for d in (shipped / "data", shipped / "data64")])
    train = frame[frame["matrix"].isin(report["split"]["train"])]
    tables = [dict(zip(g["config"], g["time_ms"])) for _, g in train.groupby(["matrix", "feat"])]
    scores = baselines.mean_log_slowdown(tables, min_tables=FIXED_MIN_GROUPS)
    serial = {c.to_json() for c in cpu.candidates(1)}  # the configs tune ranks for 1-thread data
    assert [c.to_json() for c in fixed] == sorted(set(scores) & serial, key=scores.get)[:FIXED_COUNT]
    card = (shipped / "models" / "spmm-cpu" / "MODEL_CARD.md").read_text()
    assert "## Best fixed configs" in card and f"1. `{fixed[0].to_json()}`" in card
    # a model saved without the list gets it from --fixed-only, weights and the rest of its card untouched
    old = tmp_path / "spmm-cpu"
    shutil.copytree(shipped / "models" / "spmm-cpu", old)
    meta = json.loads((old / "meta.json").read_text())
    del meta["fixed_configs"]
    (old / "meta.json").write_text(json.dumps(meta))
    (old / "MODEL_CARD.md").write_text(card.split("## Best fixed configs")[0])
    run_pretrain(["pretrain.py", "--op", "spmm", "--data", str(shipped / "data"), str(shipped / "data64"),
                  "--corpus", "synthetic:12:3", "--min-rows", "100", "--max-rows", "400", "--fixed-only",
                  "--ship", str(old)])
    assert load_pretrained("spmm", "cpu", root=tmp_path).fixed_configs(cpu) == fixed
    assert (old / "model.pt").read_bytes() == (shipped / "models" / "spmm-cpu" / "model.pt").read_bytes()
    rebuilt = (old / "MODEL_CARD.md").read_text()
    assert rebuilt.count("## Best fixed configs") == 1
    assert rebuilt.split("## Best fixed")[0] == card.split("## Best fixed")[0] and "--fixed-only" in rebuilt


class TwoThreadBackend(FakeBackend):
    """Fake timings recorded as taken on 2 threads (what `Backend.metadata` stores)."""

    def metadata(self):
        return {"target": "fake", "num_threads": 2}


def test_init_fine_tunes_a_shipped_model_on_two_thread_data_shipped_as_its_own_variant(shipped, tmp_path):


    cpu = space.create("cpu", "spmm")
    corpus = "synthetic:12:3"
    entries = load_corpus(corpus, min_rows=100, max_rows=400)
    configs = {e.name: config_sample(cpu, 24, 0, e.name, candidates=cpu.candidates(2)) for e in entries}
    assert all(c.parallel for sample in configs.values() for c in sample)
    collect(TwoThreadBackend(cpu), "spmm", entries, configs, tmp_path / "data2t", feat=32, progress=False)
    models = tmp_path / "models"
    shutil.copytree(shipped / "models" / "spmm-cpu", models / "spmm-cpu")  # the 1-thread model ships beside it
    argv = ["pretrain.py", "--op", "spmm", "--data", str(tmp_path / "data2t"), "--corpus", corpus,
            "--min-rows", "100", "--max-rows", "400", "--epochs", "3", "--lr", "1e-3",
            "--init", str(models / "spmm-cpu"), "--out", str(tmp_path / "out"), "--quiet",
            "--ship", str(models / "spmm-cpu-2t")]
    run_pretrain(argv)
    report = json.loads((tmp_path / "out" / "pretrain_spmm.json").read_text())
    assert set(report["test"]) == {"cognate", "init", "xgboost", "best_fixed", "random"}
    # the split is the corpus's: each matrix sits where the 1-thread run put it
    first = json.loads((shipped / "out" / "pretrain_spmm.json").read_text())["split"]
    assert report["split"] == first
    card = (models / "spmm-cpu-2t" / "MODEL_CARD.md").read_text()
    assert "timed on 2 thread(s)" in card and "spmm-cpu-2t" in card and "--init" in card
    assert available_pretrained(root=models) == [("spmm", "cpu"), ("spmm", "cpu-2t")]
    # tune and CognateModel load the variant of the kernels' thread count, else the closest, with a note
    _, source, notes = load_shipped_model("spmm", "cpu", root=models, threads=2)
    assert source == str(models / "spmm-cpu-2t") and notes == []
    _, source, notes = load_shipped_model("spmm", "cpu", root=models, threads=8)
    assert source == str(models / "spmm-cpu-2t") and "trained on 2-thread timings" in notes[0]
    _, source, notes = load_shipped_model("spmm", "cpu", root=models, threads=1)
    assert source == str(models / "spmm-cpu") and notes == []
    _, source, notes = load_shipped_model("spmm", "cpu", root=shipped / "models", threads=2)
    assert source == str(shipped / "models" / "spmm-cpu") and "trained on 1-thread timings" in notes[0]


def test_missing_pair_and_other_version_give_clear_errors(shipped):
    root = shipped / "models"
    with pytest.raises(PretrainedNotFoundError, match=r"'sddmm' on platform 'cpu'.*shipped: spmm/cpu"):
        load_pretrained("sddmm", "cpu", root=root)
    meta_path = root / "spmm-cpu" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["format_version"] = 1
    old = root / "old" / "spmm-cpu"
    old.mkdir(parents=True)
    for f in (root / "spmm-cpu").iterdir():
        (old / f.name).write_bytes(f.read_bytes())
    (old / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ModelVersionError, match="format version 1"):
        load_pretrained("spmm", "cpu", root=root / "old")


@pytest.mark.parametrize("platform", ["cpu", "cpu-2t"])
@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_shipped_cpu_models_load_and_rank(op, platform):
    """The package ships a pre-trained CPU model of each op for 1 and 2 threads, small, with a model card;
    tune loads the one of the kernels' thread count."""


    model = load_pretrained(op, platform)
    path = pretrained_path(op, platform)
    threads = 2 if platform == "cpu-2t" else 1
    assert load_shipped_model(op, "cpu", threads=threads)[1:] == (str(path), [])
    assert sum(f.stat().st_size for f in path.iterdir()) < 10 * 2**20
    assert "Rebuild: `python benchmarks/pretrain.py" in (path / "MODEL_CARD.md").read_text()
    cpu = space.create("cpu", op)
    matrix = load_corpus("synthetic:1:5", min_rows=2000, max_rows=2000)[0].build()
    scores = model.predict(matrix, cpu.sample(200, seed=1), space=cpu, feat=128)
    assert np.all(np.isfinite(scores)) and np.unique(scores).size > 100
    # each keeps the best fixed configs of its training data, configs that tune ranks on its thread count
    fixed = model.fixed_configs(cpu)
    assert len(fixed) == 5 and set(fixed) <= set(cpu.candidates(threads))


def test_pretrain_leaves_out_a_matrix_timed_on_another_pattern_only_when_asked(shipped, tmp_path):
    # a copy of the dataset whose first matrix's recorded pattern hash is another: its timings were taken
    # on a matrix this machine does not build (a CPU-dependent numbering does that)
    data = tmp_path / "data"
    shutil.copytree(shipped / "data", data)
    stale = sorted(load_frame(data)["matrix"].unique())[0]
    for table in data.rglob("*.parquet"):
        part = pd.read_parquet(table)
        part.loc[part["matrix"] == stale, "matrix_hash"] = "0" * 40
        part.to_parquet(table, index=False)
    argv = ["pretrain.py", "--op", "spmm", "--data", str(data), "--corpus", "synthetic:12:3", "--min-rows", "100",
            "--max-rows", "400", "--epochs", "1", "--init", str(shipped / "models" / "spmm-cpu"),
            "--ship", str(tmp_path / "model"), "--out", str(tmp_path / "out"), "--quiet"]
    with pytest.raises(Exception, match=f"{stale!r}.*collect it again"):
        run_pretrain(argv)
    assert not (tmp_path / "model").exists()
    run_pretrain(argv + ["--skip-mismatched"])
    report = json.loads((tmp_path / "out" / "pretrain_spmm.json").read_text())
    assert report["left_out_mismatched"] == [stale]
    assert all(stale not in names for names in report["split"].values())
    assert sum(len(names) for names in report["split"].values()) == 11
    card = (tmp_path / "model" / "MODEL_CARD.md").read_text()
    assert "Left out (`--skip-mismatched`): 1 matrices" in card and stale in card


def test_init_shipped_is_the_package_model_of_the_data_thread_count():
    """--init shipped on 2-thread data starts from spmm-cpu-2t, not the 1-thread model."""
    load_init = runpy.run_path(str(ROOT / "benchmarks" / "pretrain.py"))["load_init"]
    init = load_init(argparse.Namespace(init="shipped", op="spmm"), "cpu-2t")
    expected = load_pretrained("spmm", "cpu-2t").net.state_dict()
    one_thread = load_pretrained("spmm", "cpu").net.state_dict()
    got = init.net.state_dict()
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in got)
    assert any(k not in one_thread or not torch.equal(got[k], one_thread[k]) for k in got)
