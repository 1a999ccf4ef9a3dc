"""Recorded GPU sweeps as datasets: rebuilt matrices, failures as rows, metadata, the import script."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from cognate_tvm.data import COLUMNS, groups_from_frame, load_frame, matrix_hash
from cognate_tvm.errors import ShapeError
from cognate_tvm.matrix import generate_corpus
from cognate_tvm.space import create as create_space
from cognate_tvm.sweeps import NO_TIME, sweep_frames, write_sweep

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
