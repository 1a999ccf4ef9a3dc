"""benchmarks/cpu_vendor.py at test size, and MKL's SpMM into a preallocated output (`MKLLibrary(preallocated=True)`)."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from cognate_tvm import space
from cognate_tvm.backends.vendor import MKLLibrary, mkl_available
from cognate_tvm.matrix import generate
from cognate_tvm.ops import SPMM
from tiny_models import ship, tiny_cpu_model

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(monkeypatch):
    spec = importlib.util.spec_from_file_location("cpu_vendor", BENCH / "cpu_vendor.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its worker functions are pickled by module name
    spec.loader.exec_module(module)
    return module


def test_mkl_is_available():
    assert mkl_available(), "sparse_dot_mkl and mkl are pinned in requirements.txt: MKL must load"


def test_mkl_preallocated_output_is_overwritten_not_accumulated():
    matrix = generate("rmat", 300, seed=3)
    b = np.random.default_rng(0).standard_normal((matrix.shape[1], 16), dtype=np.float32)
    expected = matrix @ b
    library = MKLLibrary(num_threads=1, preallocated=True)
    for garbage in (7.0, np.nan):  # what the output held must not survive
        out = np.full((matrix.shape[0], 16), garbage, dtype=np.float32)
        for _ in range(3):  # a second call into the same output catches MKL's default C += A @ B
            assert library.spmm_into(matrix, b, out) is out
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    call = library.timed_call(SPMM, matrix, [b])  # what time_ms times: one output made before the calls
    first = call()
    second = call()
    assert first is second
    np.testing.assert_allclose(second, expected, rtol=1e-4, atol=1e-4)
    fresh = library.run(SPMM, matrix, [b])  # run returns a new array each time
    assert fresh is not library.run(SPMM, matrix, [b])
    np.testing.assert_allclose(fresh, expected, rtol=1e-4, atol=1e-4)
    assert library.check(SPMM, matrix, 16)
    assert "out_scalar=0.0" in library.method(SPMM) and "out_scalar" not in MKLLibrary().method(SPMM)


def test_mkl_preallocated_survives_pickling_and_isolation():
    library = MKLLibrary(num_threads=1, preallocated=True)
    assert pickle.loads(pickle.dumps(library)).preallocated
    isolated = library.isolated_copy()
    assert isolated.isolated and isolated.preallocated and isolated.isolated_copy(False).preallocated
    assert not pickle.loads(pickle.dumps(MKLLibrary())).preallocated
    state = MKLLibrary().__getstate__()
    del state["preallocated"]  # a library pickled before the option existed
    old = MKLLibrary.__new__(MKLLibrary)
    old.__setstate__(state)
    assert not old.preallocated
    matrix = generate("uniform", 200, seed=1)
    assert isolated.check(SPMM, matrix, 8)  # in a worker process, two calls into one output
    assert isolated.time_ms(SPMM, matrix, 8) > 0


@dataclasses.dataclass(frozen=True)
class _Config:
    i_tile: int
    vector: int
    block_rows: int = 1
    balanced: bool = False


def test_knob_variants_vary_only_the_new_knobs(monkeypatch):
    bench = _load(monkeypatch)
    every = [_Config(i, v, b, c) for i in (1, 2) for v in (4, 8) for b in (1, 2, 4) for c in (False, True)]
    best = _Config(2, 8, 1, False)
    variants = bench.knob_variants(best, every)
    assert len(variants) == 5 and best not in variants
    assert all((c.i_tile, c.vector) == (2, 8) for c in variants)
    assert bench.new_knobs(best) == ["block_rows", "balanced"]

    @dataclasses.dataclass(frozen=True)
    class Old:  # a config without the knobs has no variants
        i_tile: int

    assert bench.knob_variants(Old(1), [Old(1), Old(2)]) == []


def test_sample_is_the_baseline_and_seeded_distinct_candidates(monkeypatch):
    from cognate_tvm import space

    bench = _load(monkeypatch)
    cpu = space.create("cpu", "spmm")
    candidates = cpu.candidates(2)
    sample = bench.sample_configs(cpu, candidates, 10, seed=1)
    assert sample[0] == cpu.baseline() and len(set(sample)) == 11 and set(sample) <= set(candidates)
    assert sample == bench.sample_configs(cpu, candidates, 10, seed=1) != bench.sample_configs(cpu, candidates, 10, 2)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    model = tiny_cpu_model()
    model.fixed["cpu"] = [FIXED.to_json()]  # the training data's best fixed config, as far as tune knows
    return ship(model, tmp_path_factory.mktemp("pretrained"), ops=("spmm",))


FIXED = space.create("cpu", "spmm").candidates(2)[7]


def test_random_same_draws_the_baseline_and_measurements_minus_one_from_the_sample(monkeypatch):
    bench = _load(monkeypatch)
    ok = lambda name, ms: SimpleNamespace(config=name, ok=True, correct=True, time_ms=ms)  # noqa: E731
    results = [ok("baseline", 10.0), ok("a", 1.0), ok("b", 2.0), ok("c", 3.0), ok("variant", 0.5)]
    # every sampled config drawn: the fastest of the sample, never a knob variant measured after it
    assert bench.random_same_pick(results, 4, 4, seed=0) == "a"
    assert bench.random_same_pick(results, 4, 1, seed=0) == "baseline"  # tune measured only the baseline
    picks = {bench.random_same_pick(results, 4, 2, seed=s) for s in range(20)}
    assert picks == {"a", "b", "c"}  # one draw beside the baseline, seeded
    wrong = [SimpleNamespace(config="baseline", ok=True, correct=False, time_ms=0.1)] + results[1:]
    assert bench.random_same_pick(wrong, 4, 4, seed=0) == "a"  # a wrong output is never picked


def test_benchmark_at_test_size(tmp_path, monkeypatch, shipped):
    bench = _load(monkeypatch)
    out = tmp_path / "out"
    argv = ["--scale", "0.005", "--matrices", "rmat", "--sample", "2", "--finalists", "2", "--rounds", "1",
            "--feat", "16", "--bandwidth-mb", "16", "--gemm-size", "256", "--pretrained-dir", str(shipped), "--out", str(out)]
    assert bench.main(argv) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["threads"] == 2 and result["feat"] == 16
    assert "--scale 0.005" in result["command"] and result["machine"]["cpu_model"]
    assert "4 (M + 1) + 8 nnz" in result["floor_definition"]
    bandwidth = result["bandwidth"]
    assert bandwidth["gb_per_s"] == max(bandwidth["before"]["gb_per_s"], bandwidth["after"]["gb_per_s"]) > 0
    assert bandwidth["before"]["bytes_per_copy"] == 2 * 16 * (1 << 20)
    # the faster of torch's copy and the streaming-store copy
    before = bandwidth["before"]
    assert before["gb_per_s"] == max(before["torch_copy_gb_per_s"], before["stream_copy_gb_per_s"])
    assert before["stream_copy_gb_per_s"] > 0 and "streaming stores" in result["floor_definition"]
    assert bandwidth["gemm_gflops"] == max(bandwidth["before"]["gemm_gflops"], bandwidth["after"]["gemm_gflops"]) > 0
    assert bandwidth["before"]["gemm_size"] == 256

    (row,) = result["rows"]
    matrix = bench.build_matrix("rmat", 0.005)
    assert (row["matrix"], row["rows"], row["nnz"]) == ("rmat", matrix.shape[0], matrix.nnz)
    m, k = matrix.shape
    assert row["minimal_bytes"] == 4 * (m + 1) + 8 * matrix.nnz + 4 * k * 16 + 4 * m * 16
    assert row["floor_ms"] == pytest.approx(row["minimal_bytes"] / (bandwidth["gb_per_s"] * 1e9) * 1e3)
    # the roofline: the higher of the bandwidth floor and SpMM's flops at the GEMM rate
    assert row["compute_floor_ms"] == pytest.approx(2 * matrix.nnz * 16 / (bandwidth["gemm_gflops"] * 1e9) * 1e3)
    assert row["roofline_ms"] == max(row["floor_ms"], row["compute_floor_ms"])

    # MKL: both outputs checked against scipy, both timed
    assert row["mkl_prealloc_correct"] is True and row["mkl_alloc_correct"] is True
    assert row["mkl_prealloc_ms"] > 0 and row["mkl_alloc_ms"] > 0 and "out_scalar=0.0" in row["mkl_prealloc_method"]
    # the sweep: the baseline and 2 sampled candidates, then the new knobs' variants of its best
    assert row["sample_configs"] == 3 and row["measured"] == 3 + row["variant_configs"]
    assert row["measured_correct"] >= 1 and row["tune_measurements"] >= 2
    # the re-timing: the sample's best is the fastest finalist (the baseline is one), so no slower than the
    # baseline; the best found is the fastest of everything re-timed, so no slower than tune's pick either
    finalists = {json.dumps(f["config"], sort_keys=True): f["ms"] for f in row["finalists"]}
    assert json.dumps(row["baseline_config"], sort_keys=True) in finalists
    assert row["sample_best_ms"] == min(t for t in finalists.values() if t is not None)
    assert finalists[json.dumps(row["sample_best_config"], sort_keys=True)] == row["sample_best_ms"]
    assert row["sample_best_ms"] <= row["baseline_ms"]
    retimed = [row["sample_best_ms"], row["tune_ms"], row["fixed_ms"], row["random_same_ms"]]
    assert row["best_ms"] == min(t for t in retimed if t is not None)
    assert row["best_ms"] <= row["tune_ms"] and row["tune_vs_best"] <= 1
    assert row["tune_config"] is not None and row["tune_ms"] > 0
    # beside tune: the model's best fixed config and random search with tune's measurements, re-timed too
    assert space.create("cpu", "spmm").config_from_dict(row["fixed_config"]) == FIXED and row["fixed_ms"] > 0
    assert row["random_same_config"] is not None and row["random_same_ms"] > 0
    for kernel in ("mkl_alloc", "baseline", "sample_best", "best", "tune", "fixed", "random_same"):
        assert row[f"{kernel}_vs_mkl_prealloc"] == pytest.approx(row["mkl_prealloc_ms"] / row[f"{kernel}_ms"])
    for kernel in ("mkl_prealloc", "mkl_alloc", "baseline", "sample_best", "best", "tune", "fixed", "random_same"):
        assert row[f"{kernel}_floor_fraction"] == pytest.approx(row["floor_ms"] / row[f"{kernel}_ms"])
        assert row[f"{kernel}_roofline_fraction"] == pytest.approx(row["roofline_ms"] / row[f"{kernel}_ms"])
    assert row["best_vs_baseline"] == pytest.approx(row["baseline_ms"] / row["best_ms"]) and row["best_vs_baseline"] >= 1
    if row.get("bf16_ms") is not None:  # the llvm backend takes a dtype
        assert row["bf16_speedup"] == pytest.approx(row["bf16_fp32_ms"] / row["bf16_ms"])
        # tune measuring in bfloat16: its pick re-timed beside float32 tune's, and one of the bfloat16 candidates
        assert row["bf16_tune_speedup"] == pytest.approx(row["bf16_tune_fp32_ms"] / row["bf16_tune_ms"])
        assert row["bf16_ms"] <= row["bf16_tune_ms"] and row["bf16_tune_config"]
        assert row["bf16_floor_fraction"] == pytest.approx(row["floor_ms"] / row["bf16_ms"])
        assert row["bf16_roofline_fraction"] == pytest.approx(
            max(row["bf16_floor_ms"], row["compute_floor_ms"]) / row["bf16_ms"])
    else:
        assert "skipped" in result["bf16"] or row.get("bf16_note")

    summary = result["summary"]  # one matrix: every geomean is its value
    assert summary["matrices"] == 1
    for key in ("sample_best_vs_mkl_prealloc", "best_vs_mkl_prealloc", "tune_vs_mkl_prealloc", "best_floor_fraction",
                "best_roofline_fraction", "bf16_speedup"):
        if row.get(key) is None:
            assert summary[f"{key}_geomean"] is None
        else:
            assert summary[f"{key}_geomean"] == pytest.approx(row[key])
    table = (out / "summary.md").read_text()
    assert "| rmat | " in table and "| geomean |" in table and "Fraction of the roofline" in table and "MKL prealloc ms" in table and "bf16 / fp32" in table
    assert "best of sample ms | best found ms" in table
    assert (out / "cpu_vendor.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stream_benchmark_at_test_size(tmp_path, monkeypatch):
    """benchmarks/cpu_stream.py: each config beside its stream twin, both checked, in both dtypes; with a
    cpu_vendor results.json its best found joins where the space has its stream twin."""
    import cpu_stream

    best = dataclasses.replace(cpu_stream.REGISTER_ROWS, i_tile=8, j_tile=64)
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"rows": [{"matrix": "rmat", "best_config": best.to_dict(),
                                             "tune_config": space.create("cpu", "spmm").baseline().to_dict()}]}))
    out = tmp_path / "out"
    argv = ["--scale", "0.005", "--matrices", "rmat", "--rounds", "2", "--feat", "32", "--results", str(results),
            "--out", str(out)]
    assert cpu_stream.main(argv) == 0
    result = json.loads((out / "results.json").read_text())
    labels = {(r["config_label"], r["dtype"]) for r in result["rows"]}
    # the baseline (tune's pick here) updates C per nonzero: it has no stream twin and is left out
    assert labels == {(label, dtype) for label in ("register rows", "register blocks", "best found")
                      for dtype in cpu_stream.DTYPES}
    for row in result["rows"]:
        assert not row["errors"] and row["stream_speedup"] == pytest.approx(row["plain_ms"] / row["stream_ms"])
    assert "| rmat | best found | bfloat16 |" in (out / "summary.md").read_text()
    assert (out / "cpu_stream.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gather_kernel_matches_numpy_on_edge_cases():
    """benchmarks/cpu_gather.py's gather (each thread sums the B rows of its share of the nonzeros) against
    numpy: a rectangular matrix with empty rows, a single nonzero (one thread has none), N not a multiple of
    the vector width."""
    import scipy.sparse as sp

    import cpu_gather

    rectangular = sp.random(40, 70, density=0.05, format="lil", random_state=1)
    rectangular[5:9] = 0  # empty rows
    rectangular = rectangular.tocsr()
    assert rectangular[5:9].nnz == 0 and rectangular.nnz > 0
    single = sp.csr_matrix(([1.0], ([3], [6])), shape=(8, 9))
    for matrix, feat in ((rectangular, 16), (single, 16), (rectangular, 20)):
        got = cpu_gather.time_gather(matrix, feat=feat, threads=2, repeats=1)
        assert got["gather_correct"] is True and got["gather_ms"] > 0
    sums = cpu_gather.expected_sums(np.array([2, 0, 2]), np.arange(6.0).reshape(3, 2), 2)
    assert sums.tolist() == [[4.0, 5.0], [4.0, 6.0]]  # thread 0: nonzero 0; thread 1: nonzeros 1 and 2


def test_gather_benchmark_at_test_size(tmp_path):
    """benchmarks/cpu_gather.py: the gather bound beside a cpu_vendor run's best found and tune's pick."""
    import cpu_gather

    picks = {"best_config": json.loads(space.create("cpu", "spmm").baseline().to_json()),
             "tune_config": json.loads(dataclasses.replace(FIXED, i_tile=8).to_json())}
    results = tmp_path / "picks.json"
    results.write_text(json.dumps({"rows": [{"matrix": "rmat", **picks}]}))
    out = tmp_path / "out"
    argv = ["--scale", "0.005", "--matrices", "rmat", "--rounds", "1", "--repeats", "2", "--feat", "16",
            "--bandwidth-mb", "16", "--results", str(results), "--out", str(out)]
    assert cpu_gather.main(argv) == 0
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    assert row["gather_correct"] is True and row["gather_ms"] > 0
    assert row["gather_bound_ms"] == max(row["gather_ms"], row["floor_ms"])
    for kernel in ("best", "tune"):
        assert row[f"{kernel}_config"] == picks[f"{kernel}_config"] and row[f"{kernel}_ms"] > 0
        assert row[f"{kernel}_gather_fraction"] == pytest.approx(row["gather_bound_ms"] / row[f"{kernel}_ms"])
        assert row[f"{kernel}_floor_fraction"] == pytest.approx(row["floor_ms"] / row[f"{kernel}_ms"])
    assert "| rmat | " in (out / "summary.md").read_text()
    assert (out / "cpu_gather.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
