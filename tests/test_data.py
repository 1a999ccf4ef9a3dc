"""Measurement datasets: resumable collection, failures as rows, grouping, splits, versioning."""
import json

import cognate_tvm

import numpy as np
import pytest

from cognate_tvm.data import (COLUMNS, collect, groups_from_frame, load_frame, matrix_hash, pick_across_sizes,
                              pick_diverse, select, split_by_matrix)
from cognate_tvm.errors import DatasetMismatchError, ModelVersionError
from cognate_tvm.matrix import generate, generate_corpus
from toy_space import FakeBackend, ToySpace, synthetic_time_ms


def _matrices():
    return {f"m{rows}": generate("banded", rows, seed=rows) for rows in (100, 150, 200)}


def test_collect_writes_parquet_with_errors_and_resumes(tmp_path):
    space = ToySpace("spmm")
    configs = space.configs()[:12]
    backend = FakeBackend(space, fail_every=5)
    mats = _matrices()
    collect(backend, "spmm", mats, configs, tmp_path / "ds", feat=16, progress=False)
    frame = load_frame(tmp_path / "ds")
    assert tuple(frame.columns) == COLUMNS and len(frame) == 3 * 12
    failed = frame[frame["error"].notna()]
    assert len(failed) == 3 * 3 and failed["time_ms"].isna().all()  # configs 0, 5, 10 of each matrix
    assert set(frame["matrix_hash"]) == {matrix_hash(m) for m in mats.values()}
    row = frame[(frame["matrix"] == "m150") & frame["error"].isna()].iloc[0]
    config = space.config_from_json(row["config"])
    assert row["time_ms"] == pytest.approx(synthetic_time_ms(mats["m150"], space, config, 16))
    # a rerun measures nothing; a new matrix is appended
    calls = len(backend.calls)
    collect(backend, "spmm", mats, configs, tmp_path / "ds", feat=16, progress=False)
    assert len(backend.calls) == calls
    mats["m250"] = generate("banded", 250, seed=1)
    collect(backend, "spmm", mats, configs, tmp_path / "ds", feat=16, progress=False)
    assert backend.calls[calls:] == [250] and len(load_frame(tmp_path / "ds")) == 4 * 12


def test_killed_collection_resumes(tmp_path):
    space = ToySpace("spmm")
    mats = _matrices()
    crashing = FakeBackend(space, crash_on="150")
    with pytest.raises(RuntimeError, match="simulated crash"):
        collect(crashing, "spmm", mats, space.configs()[:4], tmp_path, feat=8, progress=False)
    assert set(load_frame(tmp_path)["matrix"]) == {"m100"}  # finished before the crash
    assert not list(tmp_path.glob(".*"))  # no half-written part left behind
    backend = FakeBackend(space)
    collect(backend, "spmm", mats, space.configs()[:4], tmp_path, feat=8, progress=False)
    assert sorted(backend.calls) == [150, 200]
    assert set(load_frame(tmp_path)["matrix"]) == set(mats)


def test_per_matrix_config_sampler_and_corpus_entries(tmp_path):
    space = ToySpace("spmm")
    entries = generate_corpus(3, seed=0, min_rows=100, max_rows=300)
    collect(FakeBackend(space), "spmm", entries, lambda name, m: space.sample(5, seed=len(name)), tmp_path,
            feat=32, progress=False)
    frame = load_frame(tmp_path)
    assert sorted(frame["matrix"].unique()) == sorted(e.name for e in entries)
    assert (frame.groupby("matrix").size() == 5).all()


def test_groups_from_frame(tmp_path):
    space = ToySpace("spmm")
    mats = _matrices()
    collect(FakeBackend(space, fail_every=4), "spmm", mats, space.configs()[:8], tmp_path, feat=16, progress=False)
    frame = load_frame(tmp_path)
    groups = groups_from_frame(frame, space=space, matrices=mats)
    assert [g.name for g in groups] == sorted(mats)
    assert all(len(g.configs) == 6 and np.all(np.isfinite(g.times_ms)) for g in groups)
    full = groups_from_frame(frame, space=space, matrices=mats, drop_failed=False)
    assert all(len(g.configs) == 8 and np.isnan(g.times_ms).sum() == 2 for g in full)
    assert [g.name for g in select(groups, ["m200"])] == ["m200"]
    with pytest.raises(KeyError, match="m100"):
        groups_from_frame(frame, space=space, matrices={"m150": mats["m150"]})
    # timings of another matrix than the name builds now are refused, naming the matrix
    changed = dict(mats, m150=generate("banded", 150, seed=7))
    with pytest.raises(DatasetMismatchError, match="'m150'.*collect it again"):
        groups_from_frame(frame, space=space, matrices=changed)
    # or, when the caller asks, left out and reported: every other matrix's groups are unchanged
    reported = []
    kept = groups_from_frame(frame, space=space, matrices=changed,
                             on_mismatch=lambda name, error: reported.append((name, type(error))))
    assert reported == [("m150", DatasetMismatchError)]
    assert [g.name for g in kept] == [g.name for g in groups if g.name != "m150"]
    for g, k in zip([g for g in groups if g.name != "m150"], kept):
        assert k.configs == g.configs and np.array_equal(k.times_ms, g.times_ms)


def test_pick_across_sizes_takes_one_per_size_stratum():
    sizes = {f"m{n}": n * 10 for n in range(20)}  # strata of 4: m0-m3, m4-m7, ...
    picked = pick_across_sizes(sizes, 5, seed=0)
    assert len(picked) == 5 == len(set(picked))
    assert [int(name[1:]) // 4 for name in picked] == [0, 1, 2, 3, 4]
    assert picked == pick_across_sizes(sizes, 5, seed=0)
    assert any(pick_across_sizes(sizes, 5, seed=s) != picked for s in range(1, 6))
    assert pick_across_sizes(sizes, 20, seed=3) == sorted(sizes, key=sizes.get)
    for bad in (0, 21):
        with pytest.raises(ValueError, match=f"cannot pick {bad} of 20"):
            pick_across_sizes(sizes, bad)


def test_pick_diverse_takes_one_matrix_per_cluster_of_embeddings():
    rng = np.random.default_rng(0)
    centres = np.array([[0, 0, 0], [40, 0, 0], [0, 40, 0], [0, 0, 40]], dtype=float)
    # 4 far-apart clusters of 6 embeddings; the cluster of "m13" is its index // 6
    embeddings = {f"m{i:02d}": centres[i // 6] + rng.normal(size=3) for i in range(24)}
    for seed in range(5):
        picked = pick_diverse(embeddings, 4, seed=seed)
        assert sorted(int(name[1:]) // 6 for name in picked) == [0, 1, 2, 3], (seed, picked)
        assert picked == pick_diverse(embeddings, 4, seed=seed)
    assert len(set(pick_diverse(embeddings, 24, seed=1))) == 24  # every matrix, none twice
    for bad in (0, 25):
        with pytest.raises(ValueError, match=f"cannot pick {bad} of 24"):
            pick_diverse(embeddings, bad)
    with pytest.raises(ValueError, match="NaN"):
        pick_diverse({**embeddings, "bad": np.array([np.nan, 0, 0])}, 4)


def test_pick_diverse_with_a_preference_takes_each_clusters_top_scorer():
    rng = np.random.default_rng(1)
    centres = np.array([[0, 0, 0], [40, 0, 0], [0, 40, 0], [0, 0, 40]], dtype=float)
    embeddings = {f"m{i:02d}": centres[i // 6] + rng.normal(size=3) for i in range(24)}
    nnz = {name: float((7 * int(name[1:])) % 6) for name in embeddings}  # each cluster's largest: one member
    largest = sorted(max((n for n in embeddings if int(n[1:]) // 6 == c), key=nnz.get) for c in range(4))
    for seed in range(5):
        assert sorted(pick_diverse(embeddings, 4, seed=seed, prefer=nnz)) == largest, seed
    assert len(set(pick_diverse(embeddings, 24, seed=2, prefer=nnz))) == 24  # every matrix, none twice
    with pytest.raises(ValueError, match="no preference score for"):
        pick_diverse(embeddings, 4, prefer={n: 1.0 for n in list(embeddings)[1:]})


def test_split_by_matrix_is_seeded_and_disjoint():
    names = [f"m{i}" for i in range(40)] + ["m3", "m7"]  # duplicates collapse
    train, val, test = split_by_matrix(names, seed=0)
    assert (len(train), len(val), len(test)) == (28, 6, 6)
    assert not (set(train) & set(val)) and not (set(train) & set(test)) and not (set(val) & set(test))
    assert set(train) | set(val) | set(test) == set(names)
    assert split_by_matrix(names, seed=0) == (train, val, test)
    assert split_by_matrix(names, seed=1) != (train, val, test)
    with pytest.raises(ValueError, match="fractions"):
        split_by_matrix(names, fractions=(0.5, 0.5, 0.5))


def test_dataset_version_mismatch(tmp_path):
    space = ToySpace("spmm")
    collect(FakeBackend(space), "spmm", _matrices(), space.configs()[:2], tmp_path, feat=8, progress=False)
    (tmp_path / "meta.json").write_text(json.dumps({"format_version": 0}))
    with pytest.raises(ModelVersionError, match="dataset format version 0"):
        load_frame(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_frame(tmp_path / "missing")


def test_extras_and_backend_metadata_are_kept(tmp_path):
    from cognate_tvm.backends.base import MeasureResult

    space = ToySpace("spmm")

    class WithExtras(FakeBackend):
        def metadata(self):
            return {"target": "fake", "machine": "test-box"}

        def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
            return [MeasureResult(config=c, time_ms=1.0 + n, correct=True if check else None,
                                  extra={"cycles": 1000 * (n + 1)}) for n, c in enumerate(configs)]

    collect(WithExtras(space), "spmm", _matrices(), space.configs()[:3], tmp_path, feat=8, check=True,
            progress=False)
    frame = load_frame(tmp_path)
    assert [json.loads(e)["cycles"] for e in frame["extra"][:3]] == [1000, 2000, 3000]
    assert json.loads(frame["backend"].iloc[0]) == {"target": "fake", "machine": "test-box",
                                                   "cognate_tvm": cognate_tvm.__version__}
    assert frame["correct"].tolist() == [True] * len(frame)


def test_save_results_writes_collects_format_and_json_where_pyarrow_is_missing(tmp_path, monkeypatch):
    """A sweep measured outside `collect` (benchmarks/gpu_check.py) lands in the same dataset format;
    without pyarrow the part is JSON records of the same columns, which `load_frame` reads alike."""
    import cognate_tvm.data.store as store
    from cognate_tvm.backends.base import MeasureResult
    from cognate_tvm.data import COLUMNS, load_frame, save_results
    from cognate_tvm.matrix import generate
    from cognate_tvm.space import create

    class Backend:
        target, platform = "cuda", "gpu"

        def metadata(self):
            return {"target": "cuda", "platform": "gpu", "timing": {"number": 2}}

    matrix = generate("rmat", 300, 0)
    configs = create("gpu", "spmm").configs()[:4]
    results = [MeasureResult(configs[0], 0.5, extra={"kernel": "k"}), MeasureResult(configs[1], None, error="boom"),
               MeasureResult(configs[2], 0.25, correct=True), MeasureResult(configs[3], 1.0)]
    parquet = save_results(tmp_path / "pq", Backend(), "m", matrix, "spmm", 64, results,
                           metadata={"device": "NVIDIA H200"})
    monkeypatch.setattr(store, "_has_pyarrow", lambda: False)
    written = save_results(tmp_path / "js", Backend(), "m", matrix, "spmm", 64, results,
                           metadata={"device": "NVIDIA H200"})
    assert parquet.suffix == ".parquet" and written.suffix == ".json" and written.stem == parquet.stem
    monkeypatch.undo()
    a, b = load_frame(tmp_path / "pq"), load_frame(tmp_path / "js")
    assert tuple(a.columns) == tuple(b.columns) == COLUMNS and len(a) == len(b) == 4
    for column in ("matrix", "matrix_hash", "op", "platform", "config", "error", "extra", "backend"):
        assert list(a[column]) == list(b[column]), column
    assert np.array_equal(a["time_ms"].to_numpy(), b["time_ms"].to_numpy(), equal_nan=True)
    assert list(b["correct"]) == [None, None, True, None] and int(b["nnz"].iloc[0]) == matrix.nnz
    meta = json.loads(a["backend"].iloc[0])
    assert meta["device"] == "NVIDIA H200" and meta["timing"] == {"number": 2} and "cognate_tvm" in meta
