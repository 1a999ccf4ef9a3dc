"""scripts/gpu_run.sh without a GPU: staging across calls, the prepared run's budget, collect.

A payload may reach the GPU host in several copies, each bringing some of its parts into
.gpu_bundle/cpXY/callN/ and possibly replacing the last ones; gpu_run.sh keeps the parts on a stage
outside the repository. These tests replay two runs that each bring one part of a (tiny, fake)
payload, on this machine's Python.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_run.sh"


def fake_payload(gb, root: Path) -> Path:
    """A payload of one group (a package `fakepkg`) cut over two calls, as `gpu_bundle.py build` lays it out."""
    site = root / "site-src"
    (site / "fakepkg").mkdir(parents=True)
    (site / "fakepkg" / "__init__.py").write_text("VALUE = 42\n" + "# padding\n" * 400)
    archive = root / "fake.tar.xz"
    gb.make_archive(site, archive, gb.XZSettings(preset=1))
    size = archive.stat().st_size
    bundle = root / "bundle"
    (bundle / "all").mkdir(parents=True)
    parts = gb.split_file(archive, bundle / "all", [size // 2, size - size // 2])
    manifest = {"groups": {"fake": gb.group_entry(archive, parts)},
                "calls": [["call1/" + parts[0].name], ["call2/" + parts[1].name]]}
    for n, part in enumerate(parts, 1):
        (bundle / f"call{n}").mkdir()
        part.rename(bundle / f"call{n}" / part.name)
        (bundle / f"call{n}" / "manifest.json").write_text(json.dumps(manifest))
    (bundle / "all").rmdir()
    return bundle


def run(mode: str, *args: str, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), mode, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COGNATE_GPU_PYTHON": sys.executable, **env})


def call_env(tmp_path: Path, carried: Path) -> dict:
    return {"COGNATE_GPU_BUNDLE": str(carried), "COGNATE_GPU_STAGE": str(tmp_path / "stage"),
            "OUT": str(tmp_path / "out"), "COGNATE_GPU_ARCH": "sm_90"}


def carry(bundle: Path, tmp_path: Path, n: int) -> Path:
    """What call `n` brings: only its own callN directory (the earlier call's files are gone)."""
    carried = tmp_path / "carried"
    shutil.rmtree(carried, ignore_errors=True)
    shutil.copytree(bundle / f"call{n}", carried / f"call{n}")
    return carried


def test_parts_of_two_calls_meet_on_the_stage_outside_the_repository(gb, tmp_path):
    bundle = fake_payload(gb, tmp_path)
    first = run("stage", env=call_env(tmp_path, carry(bundle, tmp_path, 1)))
    assert first.returncode == 0, first.stderr
    parts = tmp_path / "stage" / "parts"
    assert sorted(p.name for p in parts.iterdir()) == ["fake.tar.xz.part-00", "manifest.json"]
    assert "python:" in first.stdout  # the probe of the machine
    # the second call carries only its part; a selftest-less setup still unpacks from the stage
    env = call_env(tmp_path, carry(bundle, tmp_path, 2))
    second = run("stage", env=env)
    assert second.returncode == 0, second.stderr
    assert sorted(p.name for p in parts.iterdir()) == ["fake.tar.xz.part-00", "fake.tar.xz.part-01", "manifest.json"]
    gb.unpack(parts / "manifest.json", [parts], tmp_path / "stage" / "site")
    assert "VALUE = 42" in (tmp_path / "stage" / "site" / "fake" / "fakepkg" / "__init__.py").read_text()


def test_a_stage_inside_the_repository_is_refused(tmp_path):
    out = run("stage", env={"COGNATE_GPU_STAGE": str(REPO / ".gpu_bundle" / "stage"), "OUT": str(tmp_path)})
    assert out.returncode == 2 and "outside the repository" in out.stderr


def test_the_prepared_run_splits_its_budget_and_records_every_step(gb, tmp_path):
    bundle = fake_payload(gb, tmp_path)
    run("stage", env=call_env(tmp_path, carry(bundle, tmp_path, 1)))
    env = {**call_env(tmp_path, carry(bundle, tmp_path, 2)), "COGNATE_GPU_DRY_RUN": "1",
           "COGNATE_GPU_BUDGET_S": "400", "COGNATE_GPU_MATRICES": "rmat:3000:1,banded:2000:2"}
    out = run("all", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    results = tmp_path / "out"
    steps = [line.split("\t") for line in (results / "gpu_run_steps.tsv").read_text().splitlines()]
    assert steps[0] == ["step", "exit_status", "seconds", "limit_s"]
    assert [s[0] for s in steps[1:]] == ["selftest", "gpu_check", "tune_cli"]
    assert all(s[1] == "dry-run" for s in steps[1:])
    limits = {s[0]: int(s[3]) for s in steps[1:]}
    assert limits["selftest"] == 90 and limits["tune_cli"] == 60
    # gpu_check gets what is left once the self-test ended (at once, in a dry run), less 45 s for
    # tune's command line and 15 s for the rest. The setup before it takes longer on a loaded machine,
    # so the seconds spent are read from the log line that announces the step (logged in the same
    # second as the limit is computed, or the next).
    log = (results / "gpu_run.log").read_text()
    announced = next(line for line in log.splitlines() if "gpu_check: up to" in line)
    spent = int(announced.split(" +", 1)[1].split("s]", 1)[0])
    assert 400 - 60 - spent <= limits["gpu_check"] <= 400 - 60 - spent + 1
    assert f"gpu_check: up to {limits['gpu_check']} s" in announced
    assert "gpu_check.py --arch sm_90 --new-matrices rmat:3000:1,banded:2000:2 --finetune 0" in log
    assert f"--budget-s {limits['gpu_check'] - 20} " in log and f"--dataset {tmp_path / 'stage'}" in log
    assert f"--dataset-archive {results / 'gpu_sweep_dataset.tar.gz'}" in log
    assert "python -c" not in log  # the wrapper's code is not logged
    assert (tmp_path / "stage" / "results" / "rmat_131072_101.npz").is_file()  # tune's matrix, written for real
    assert len(list(results.iterdir())) <= 8


def test_a_short_budget_skips_what_no_longer_fits(gb, tmp_path):
    bundle = fake_payload(gb, tmp_path)
    run("stage", env=call_env(tmp_path, carry(bundle, tmp_path, 1)))
    env = {**call_env(tmp_path, carry(bundle, tmp_path, 2)), "COGNATE_GPU_DRY_RUN": "1", "COGNATE_GPU_BUDGET_S": "70"}
    assert run("all", env=env).returncode == 0
    steps = {line.split("\t")[0]: line.split("\t") for line in
             (tmp_path / "out" / "gpu_run_steps.tsv").read_text().splitlines()[1:]}
    assert steps["gpu_check"][1] == "skipped" and int(steps["selftest"][3]) <= 70


def test_collect_through_the_payload_packs_its_dataset(gb, tmp_path):
    """`gpu_run.sh collect ARGS` (on a GPU host: --target cuda); here the llvm target measures for real."""
    bundle = fake_payload(gb, tmp_path)
    run("stage", env=call_env(tmp_path, carry(bundle, tmp_path, 1)))
    out = run("collect", "--target", "llvm", "--op", "spmm", "--corpus", "synthetic:1:3", "--max-rows", "1500",
              "--configs-per-matrix", "2", "--pool", "24", "--quiet", "--threads", "1",
              env=call_env(tmp_path, carry(bundle, tmp_path, 2)),
              timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "out" / "collect.json").read_text())
    assert summary["matrices"] == 1 and summary["rows"] == 3 and summary["out"] == str(tmp_path / "stage" /
                                                                                        "collect_dataset")
    with tarfile.open(tmp_path / "out" / "collect_dataset.tar.gz") as tar:
        names = tar.getnames()
    assert "collect_dataset/meta.json" in names and any(n.endswith(".parquet") for n in names)


def test_gnn_mode_runs_the_gcn_benchmark_on_cuda_within_its_budget(gb, tmp_path):
    """`gpu_run.sh gnn ARGS`: the GCN benchmark on the GPU, its step recorded; here as a dry run."""
    bundle = fake_payload(gb, tmp_path)
    run("stage", env=call_env(tmp_path, carry(bundle, tmp_path, 1)))
    env = {**call_env(tmp_path, carry(bundle, tmp_path, 2)), "COGNATE_GPU_DRY_RUN": "1", "COGNATE_GPU_BUDGET_S": "300"}
    out = run("gnn", "--widths", "64", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    results = tmp_path / "out"
    log = (results / "gnn_run.log").read_text()
    assert "benchmarks/gnn_end_to_end.py --device cuda" in log and f"--out {results} --widths 64" in log
    step = (results / "gpu_run_steps.tsv").read_text().splitlines()[1].split("\t")
    assert step[0] == "gnn" and step[1] == "dry-run" and 10 <= int(step[3]) <= 290  # the budget less setup and 10 s
