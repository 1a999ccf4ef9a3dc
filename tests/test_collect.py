"""The collect CLI: a resumable, chunked dataset that survives kill -9 and bad input."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from cognate_tvm import space
from cognate_tvm.collect import main
from cognate_tvm.space.sampling import config_sample
from cognate_tvm.data import collect, load_frame
from cognate_tvm.matrix.corpus import CorpusSpecError, load_corpus
from cognate_tvm.matrix import generate, save_matrix
from toy_space import FakeBackend, ToySpace

ARGS = ["--target", "spade", "--op", "spmm", "--configs-per-matrix", "12", "--chunk", "5",
        "--max-rows", "3000", "--quiet"]


def _expected_rows(corpus: str, seed: int = 0) -> set[tuple[str, str]]:
    spade = space.create("spade", "spmm")
    return {(e.name, c.to_json()) for e in load_corpus(corpus, max_rows=3000)
            for c in config_sample(spade, 12, seed, e.name)}


def test_cli_writes_expected_rows_and_metadata(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(ARGS + ["--corpus", "synthetic:3:5", "--out", str(out), "--feat", "16,32"]) == 0
    report = json.loads(capsys.readouterr().out)
    frame = load_frame(out)
    assert report == {"out": str(out), "matrices": 3, "rows": len(frame), "failed": 0}
    assert {(m, c) for m, c in zip(frame["matrix"], frame["config"])} == _expected_rows("synthetic:3:5")
    assert len(frame) == len(_expected_rows("synthetic:3:5"))   # no duplicates
    assert sorted(frame.groupby("matrix")["feat"].first()) == [16, 16, 32]
    assert (frame["nnz"] > 0).all() and (frame["rows"] >= 1000).all()
    meta = json.loads(frame["backend"].iloc[0])
    assert meta["platform"] == "spade" and "model_version" in meta and "cognate_tvm" in meta
    assert frame["timestamp"].str.match(r"\d{4}-\d\d-\d\dT").all()
    # parts per chunk: 13 configs (12 + baseline) in chunks of 5 -> 3 parts per matrix
    assert len(list(out.glob("*.parquet"))) == 3 * 3
    # a rerun measures nothing new and leaves the data as it was
    assert main(ARGS + ["--corpus", "synthetic:3:5", "--out", str(out), "--feat", "16,32"]) == 0
    assert load_frame(out).sort_values(["matrix", "config"]).reset_index(drop=True).equals(
        frame.sort_values(["matrix", "config"]).reset_index(drop=True))


def test_kill_9_then_resume_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "ds"
    corpus = "synthetic:16:9"
    cmd = [sys.executable, "-m", "cognate_tvm.collect", *ARGS, "--corpus", corpus, "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and len(list(out.glob("*.parquet"))) < 4:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = len(list(out.glob("*.parquet")))
    assert 4 <= written < 16 * 3, "the kill should land mid-run"
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    frame = load_frame(out)
    keys = list(zip(frame["matrix"], frame["config"]))
    assert len(keys) == len(set(keys)) and set(keys) == _expected_rows(corpus)
    assert not [p for p in os.listdir(out) if p.startswith(".")], "half-written parts left behind"


def test_failing_configs_are_rows_and_chunks_resume(tmp_path):
    toy = ToySpace("spmm")
    mats = {f"m{n}": generate("banded", 100 + n, seed=n) for n in range(3)}
    backend = FakeBackend(toy, fail_every=4)
    collect(backend, "spmm", mats, toy.configs()[:10], tmp_path, feat=8, progress=False, chunk=3)
    frame = load_frame(tmp_path)
    assert len(frame) == 30 and len(list(tmp_path.glob("*.parquet"))) == 3 * 4
    # FakeBackend fails the first config of every call: one per chunk
    assert frame["error"].notna().sum() == 3 * 4 and frame.loc[frame["error"].notna(), "time_ms"].isna().all()
    calls = len(backend.calls)
    collect(backend, "spmm", mats, toy.configs()[:10], tmp_path, feat=8, progress=False, chunk=3)
    assert len(backend.calls) == calls


@pytest.mark.parametrize("extra, message", [
    (["--corpus", "/no/such/dir"], "neither 'synthetic:N[:SEED]' nor an existing directory"),
    (["--corpus", "synthetic:x"], "expected 'synthetic:N'"),
    (["--corpus", "synthetic:2", "--feat", "0"], "--feat widths must be >= 1"),
    (["--corpus", "synthetic:2", "--feat", "a,b"], "--feat must be N or N,N"),
    (["--corpus", "synthetic:2", "--pool", "-1"], "--pool must be >= 0"),
    (["--corpus", "synthetic:2", "--subset-max-rows", "10"], "no matrix of the corpus has a row count in that range"),
    (["--corpus", "synthetic:2", "--subset-min-rows", "10000000"], "no matrix of the corpus has a row count"),
    (["--corpus", "synthetic:2", "--stratify", "colour"], "--stratify 'colour': not a field"),
    (["--corpus", "synthetic:2", "--stratify", "block_rows", "--pool", "8"], "does not take --pool"),
])
def test_bad_arguments_exit_2_with_a_clear_message(tmp_path, capsys, extra, message):
    assert main(ARGS + ["--out", str(tmp_path / "ds")] + extra) == 2
    assert message in capsys.readouterr().err


def test_subset_keeps_the_corpus_names_and_measures_only_the_matrices_in_range(tmp_path, capsys):
    corpus = load_corpus("synthetic:6:5", max_rows=3000)
    cut = sorted(e.rows for e in corpus)[2]
    out = tmp_path / "ds"
    assert main(ARGS + ["--corpus", "synthetic:6:5", "--out", str(out), "--subset-max-rows", str(cut)]) == 0
    small = {e.name for e in corpus if e.rows <= cut}
    assert set(load_frame(out)["matrix"]) == small and len(small) == 3
    # its rows are the full run's rows of those matrices: same names, same config samples
    assert {(m, c) for m, c in zip(load_frame(out)["matrix"], load_frame(out)["config"])} == \
        {(m, c) for m, c in _expected_rows("synthetic:6:5") if m in small}
    save_matrix(generate("rmat", 300, seed=1), tmp_path / "g.mtx")
    assert main(ARGS + ["--corpus", str(tmp_path), "--out", str(tmp_path / "files"),
                        "--subset-max-rows", "500"]) == 2
    assert "--subset-max-rows need a synthetic" in capsys.readouterr().err
    # --subset-min-rows: the other matrices of the same corpus, with the same rows as the full run's
    large = tmp_path / "large"
    assert main(ARGS + ["--corpus", "synthetic:6:5", "--out", str(large), "--subset-min-rows", str(cut + 1)]) == 0
    assert set(load_frame(large)["matrix"]) == {e.name for e in corpus} - small
    assert {(m, c) for m, c in zip(load_frame(large)["matrix"], load_frame(large)["config"])} == \
        {(m, c) for m, c in _expected_rows("synthetic:6:5") if m not in small}


def test_directory_corpus_and_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusSpecError, match="holds no matrix files"):
        load_corpus(tmp_path / "empty")
    save_matrix(generate("rmat", 300, seed=1), tmp_path / "g.mtx")
    entries = load_corpus(tmp_path)
    assert [e.name for e in entries] == ["g"] and entries[0].build().shape == (300, 300)


def test_pool_sample_is_seeded_per_matrix():
    cpu = space.create("cpu", "spmm")
    pool = cpu.sample_covering(200, seed=0)
    a, b = config_sample(cpu, 50, 0, "a", pool), config_sample(cpu, 50, 0, "b", pool)
    assert a[0] == cpu.baseline() and set(a[1:]) <= set(pool) and a != b
    assert a == config_sample(cpu, 50, 0, "a", pool)
    assert np.all([c in pool or c == cpu.baseline() for c in b])


def test_thread_candidates_sample_only_what_tune_ranks_on_that_many_threads(tmp_path, capsys):
    cpu = space.create("cpu", "spmm")
    parallel = cpu.candidates(2)
    pool = cpu.sample_covering(60, seed=0, configs=parallel)
    assert all(c.parallel for c in pool) and len(set(pool)) == 60
    assert all(c.parallel for c in config_sample(cpu, 40, 0, "a", candidates=parallel))
    # the CLI: llvm on 2 threads, a 2-config sample from a parallel-only pool per matrix
    out = tmp_path / "ds"
    assert main(["--target", "llvm", "--op", "spmm", "--corpus", "synthetic:2:5", "--min-rows", "200",
                 "--max-rows", "400", "--configs-per-matrix", "2", "--pool", "40", "--feat", "16",
                 "--threads", "2", "--thread-candidates", "--repeats", "1", "--quiet", "--out", str(out)]) == 0
    frame = load_frame(out)
    configs = [cpu.config_from_json(c) for c in frame["config"]]
    assert len(frame) == 6 and frame["time_ms"].notna().all() and all(c.parallel for c in configs)
    assert {json.loads(b)["num_threads"] for b in frame["backend"]} == {2}


def test_cuda_collect_builds_for_the_arch_it_is_given():
    """`collect --target cuda --arch sm_90` (what scripts/gpu_run.sh collect passes on an H200)."""
    from cognate_tvm.collect import backend_options, make_backend, make_parser

    base = ["--target", "cuda", "--op", "spmm", "--corpus", "synthetic:1", "--configs-per-matrix", "1", "--out", "x"]
    assert backend_options(make_parser().parse_args(base)) == {}
    args = make_parser().parse_args(base + ["--arch", "sm_90"])
    assert make_backend(args, **backend_options(args)).arch == "sm_90"


def test_stratified_sample_gives_each_value_its_share():
    """--stratify block_rows: a third of each matrix's sample per block size, seeded by matrix name."""
    cpu = space.create("cpu", "spmm")
    candidates = cpu.candidates(2)
    sample = config_sample(cpu, 30, 0, "m1", None, candidates, "block_rows")
    assert sample[0] == cpu.baseline() and len(sample) == 31
    counts = {r: sum(c.block_rows == r for c in sample[1:]) for r in (1, 2, 4)}
    assert counts == {1: 10, 2: 10, 4: 10}
    assert all(c in set(candidates) for c in sample[1:]) and len(set(sample)) == len(sample)
    assert config_sample(cpu, 30, 0, "m1", None, candidates, "block_rows") == sample
    assert config_sample(cpu, 30, 0, "m2", None, candidates, "block_rows") != sample
