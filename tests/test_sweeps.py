"""cognate_tvm.sweeps: running a sweep (every config of a space on matrices, into a dataset, inside a
deadline, on a fake clock) and importing a recorded one (rebuilt matrices, failures as rows, metadata,
the import script)."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from cognate_tvm import sweeps
from cognate_tvm.backends.base import MeasureResult
from cognate_tvm.data import COLUMNS, groups_from_frame, load_frame, matrix_hash
from cognate_tvm.errors import ShapeError
from cognate_tvm.matrix import generate_corpus
from cognate_tvm.space import create as create_space
from cognate_tvm.sweeps import (COST_OFFSET_NNZ, NO_TIME, SWEEP_CHUNK, MatrixSpecError, Sweep, named_matrices,
                                sweep_frames, write_sweep)

OPS = ("spmm", "sddmm")


class ClockedBackend:
    """Made-up times, every config costing time on a fake clock: as `Sweep` predicts it, times
    `slow` on matrices of at least `slow_rows` rows."""

    target, platform = "cuda", "gpu"

    def __init__(self, clock, per_config, slow_rows, slow):
        self.clock, self.per_config, self.slow_rows, self.slow = clock, per_config, slow_rows, slow

    def metadata(self):
        return {"target": self.target, "platform": self.platform}

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        slow = self.slow if matrix.shape[0] >= self.slow_rows else 1.0
        self.clock[0] += self.per_config * len(configs) * (matrix.nnz + COST_OFFSET_NNZ) * slow
        return [MeasureResult(c, 1.0 + 0.1 * c.parts) for c in configs]


def test_named_matrices_are_generator_recipes():
    entries = named_matrices("rmat:131072:101, stencil2d:262144:102:perm")
    assert [e.name for e in entries] == ["rmat_131072_101", "stencil2d_262144_102_perm"]
    assert entries[1].permuted and entries[0].seed == 101 and entries[0].family == "rmat"
    with pytest.raises(MatrixSpecError, match="family:rows:seed"):
        named_matrices("rmat:100")


def test_sweep_skips_what_does_not_fit_and_keeps_a_matrix_cut_short(monkeypatch, tmp_path):
    clock = [0.0]
    monkeypatch.setattr(sweeps.time, "perf_counter", lambda: clock[0])
    corpus = named_matrices("banded:300:1,rmat:60000:2,road:400:3,uniform:300:4")
    first, big = corpus[0].build(), corpus[1].build()
    assert big.nnz > 10 * first.nnz
    total = sum(len(create_space("gpu", op).configs()) for op in OPS)
    first_cost = 1e-9 * total * (first.nnz + COST_OFFSET_NNZ)
    # the road matrix (400 rows) costs 3x what the first one's rate predicts for it
    backend = ClockedBackend(clock, 1e-9, slow_rows=400, slow=3.0)
    sweeper = Sweep(backend, ops=OPS, feat=8, seed=0, deadline=2.6 * first_cost, dataset=tmp_path / "ds",
                    archive=tmp_path / "ds.tar.gz", metadata={"device": "fake"})
    rows, truncated = sweeper.run(corpus)
    assert truncated and [r["name"] for r in rows] == ["banded_300_1", "road_400_3"]
    # predicted not to fit: skipped, and the next (smaller) matrix was tried; out of time: skipped
    assert [s["name"] for s in sweeper.skipped] == ["rmat_60000_2", "uniform_300_4"]
    assert sweeper.skipped[0]["nnz"] == big.nnz and sweeper.skipped[0]["predicted_s"] > sweeper.skipped[0]["left_s"]
    # the deadline fell inside the road matrix: what was timed is kept (and saved), the rest is NaN
    road = rows[1]
    swept = [road["ops"][op]["swept"] for op in OPS]
    assert 0 < sum(swept) < total and all(n % SWEEP_CHUNK == 0 or n == len(create_space("gpu", op).configs())
                                          for n, op in zip(swept, OPS))
    assert np.isnan(road["ops"]["sddmm"]["times_ms"][swept[1]:]).all()
    frame = load_frame(tmp_path / "ds")
    assert len(frame[frame["matrix"] == "road_400_3"]) == sum(swept)
    assert len(frame[frame["matrix"] == "banded_300_1"]) == total
    recipe = json.loads(frame[frame["matrix"] == "road_400_3"]["backend"].iloc[0])["matrix_recipe"]
    assert recipe == {"generator": "cognate_tvm.matrix.generate", "family": "road", "rows": 400, "seed": 3,
                      "permute": False}
    import tarfile

    with tarfile.open(tmp_path / "ds.tar.gz") as tar:  # packed after each matrix: both are in it
        assert {n.split("-")[0] for n in tar.getnames() if n.endswith(".parquet")} == {"ds/banded_300_1",
                                                                                       "ds/road_400_3"}


ARGS = {"matrices": 3, "seed": 4, "min_rows": 300, "max_rows": 900, "feat": 32}


def _sweep() -> dict:
    """A small sweep of 3 generated matrices: 6 configs per op, the second SpMM config without a time."""
    rows = []
    for n, entry in enumerate(generate_corpus(3, seed=4, min_rows=300, max_rows=900)):
        matrix = entry.build()
        row = {"name": entry.name, "family": entry.family, "shape": list(matrix.shape), "nnz": int(matrix.nnz)}
        for op in ("spmm", "sddmm"):
            configs = [c.to_dict() for c in create_space("gpu", op).configs()[:6]]
            times = [0.1 * (n + 1) + 0.01 * i for i in range(6)]
            if op == "spmm":
                times[1] = None
            row[op] = {"configs": configs, "times_ms": times}
        rows.append(row)
    return {"args": dict(ARGS), "rows": rows}


def _load_script():
    path = Path(__file__).resolve().parent.parent / "scripts" / "import_gpu_sweep.py"
    spec = importlib.util.spec_from_file_location("import_gpu_sweep", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sweep_frames_rebuild_the_matrices_and_record_failures(tmp_path):
    sweep = _sweep()
    frames = sweep_frames(sweep, platform="gpu", target="cuda", metadata={"device": "GPU X", "arch": "sm_00"},
                          timestamp="2000-01-01T00:00:00+00:00")
    assert len(frames) == 6
    written = write_sweep(frames, {"spmm": tmp_path / "spmm", "sddmm": tmp_path / "sddmm"}, platform="gpu")
    assert written == {"spmm": 18, "sddmm": 18}
    frame = load_frame(tmp_path / "spmm")
    assert tuple(frame.columns) == COLUMNS and set(frame["platform"]) == {"gpu"} and set(frame["target"]) == {"cuda"}
    failed = frame[frame["error"].notna()]
    assert len(failed) == 3 and failed["time_ms"].isna().all() and set(failed["error"]) == {NO_TIME}
    entries = {e.name: e for e in generate_corpus(3, seed=4, min_rows=300, max_rows=900)}
    assert set(frame["matrix_hash"]) == {matrix_hash(e.build()) for e in entries.values()}
    backend = json.loads(frame["backend"].iloc[0])
    assert backend["device"] == "GPU X" and backend["feat"] == 32
    assert backend["generator"] == {"function": "cognate_tvm.matrix.generate_corpus", "count": 3, "seed": 4,
                                    "min_rows": 300, "max_rows": 900}
    groups = groups_from_frame(frame, space=create_space("gpu", "spmm"), matrices=entries)
    first = next(g for g in groups if g.name == sweep["rows"][0]["name"])
    assert len(first.configs) == 5 and np.allclose(first.times_ms, [0.1, 0.12, 0.13, 0.14, 0.15])


def test_sweep_frames_refuse_a_matrix_the_generator_does_not_rebuild():
    sweep = _sweep()
    sweep["rows"][0]["nnz"] += 1
    with pytest.raises(ShapeError, match="rebuilt"):
        sweep_frames(sweep, platform="gpu", target="cuda", metadata={}, timestamp="t")
    sweep = _sweep()
    sweep["args"]["seed"] = 5  # other matrices: the recorded names are not in that corpus
    with pytest.raises(KeyError, match="not in generate_corpus"):
        sweep_frames(sweep, platform="gpu", target="cuda", metadata={}, timestamp="t")


def test_import_script_reads_the_environment_beside_the_sweep(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "gpu_sweep.json").write_text(json.dumps(_sweep()))
    (folder / "gpu_check.json").write_text(json.dumps({"arch": "sm_90", "environment": {
        "device": "NVIDIA H200", "torch": "2.11.0+cu130", "torch_cuda": "13.0", "secret": "not copied"}}))
    script = _load_script()
    assert script.main([str(folder / "gpu_sweep.json"), "--spmm-out", str(tmp_path / "s"), "--sddmm-out",
                        str(tmp_path / "d"), "--timing", "2 launches", "--timestamp", "2000-01-01T00:00:00"]) == 0
    backend = json.loads(load_frame(tmp_path / "d")["backend"].iloc[0])
    assert backend["device"] == "NVIDIA H200" and backend["arch"] == "sm_90" and backend["torch_cuda"] == "13.0"
    assert backend["timing"] == "2 launches" and backend["source"] == "run" and "secret" not in backend
    (folder / "gpu_check.json").unlink()
    with pytest.raises(ValueError, match="--device and --arch"):
        script.main([str(folder / "gpu_sweep.json"), "--spmm-out", str(tmp_path / "s"), "--sddmm-out",
                     str(tmp_path / "d"), "--timing", "x", "--timestamp", "t"])


def test_an_imported_sweep_loads_as_groups_with_its_matrices_rebuilt(tmp_path):
    from cognate_tvm.sweeps import load_sweep_groups

    frames = sweep_frames(_sweep(), platform="gpu", target="cuda", metadata={"device": "GPU X"}, timestamp="t")
    write_sweep(frames, {"spmm": tmp_path / "spmm", "sddmm": tmp_path / "sddmm"}, platform="gpu")
    groups = load_sweep_groups(tmp_path / "sddmm", op="sddmm")
    entries = {e.name: e for e in generate_corpus(3, seed=4, min_rows=300, max_rows=900)}
    assert sorted(g.name for g in groups) == sorted(entries)
    assert all(matrix_hash(g.matrix) == matrix_hash(entries[g.name].build()) and len(g.configs) == 6
               for g in groups)
    with pytest.raises(ValueError, match="no spmm rows"):
        load_sweep_groups(tmp_path / "sddmm", op="spmm")


def test_a_sweep_of_the_sweep_module_rebuilds_each_matrix_from_its_recipe():
    import pandas as pd

    from cognate_tvm.sweeps import RECIPE_GENERATOR, frame_corpus

    frames = sweep_frames(_sweep(), platform="gpu", target="cuda", metadata={"device": "GPU X"}, timestamp="t")
    frame = pd.concat(list(frames.values()))
    entries = {e.name: e for e in generate_corpus(3, seed=4, min_rows=300, max_rows=900)}
    frame["backend"] = [json.dumps({"device": "GPU X", "matrix_recipe": {
        "generator": RECIPE_GENERATOR, "family": entries[name].family, "rows": entries[name].rows,
        "seed": entries[name].seed, "permute": entries[name].permuted}}) for name in frame["matrix"]]
    assert frame_corpus(frame) == entries
    frame["backend"] = json.dumps({"device": "GPU X"})
    with pytest.raises(ValueError, match="no generator arguments"):
        frame_corpus(frame)
