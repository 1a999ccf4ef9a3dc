"""Collection on a local Ray cluster: a killed worker's task is retried, a killed driver resumes.

Ray is a declared dependency of the ``[distributed]`` extra, which CI installs: it is
imported at module level, so a missing ray fails these tests instead of skipping them.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from cognate_tvm import executors, space
from cognate_tvm.backends.spade import SpadeBackend
from cognate_tvm.collect import main
from cognate_tvm.space.sampling import config_sample
from cognate_tvm.data import collect, load_frame
from cognate_tvm.matrix import generate
from cognate_tvm.matrix.corpus import load_corpus

TESTS = str(Path(__file__).resolve().parent)
CLI_ARGS = ["--target", "spade", "--op", "spmm", "--configs-per-matrix", "12", "--chunk", "5",
            "--max-rows", "3000", "--quiet"]


@pytest.fixture(scope="module")
def cluster():
    """A local 2-CPU Ray cluster; its workers can import this module (the kill-once backend)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}})
    try:
        yield
    finally:
        ray.shutdown()


class KillOnceBackend(SpadeBackend):
    """SPADE, except that the first task anywhere kills its own worker process (SIGKILL).

    The marker file records the killed worker's pid; each row records the pid that
    measured it and how many tasks that backend object had measured before.
    """

    def __init__(self, marker: str):
        super().__init__(workers=1)
        self.marker = marker
        self.calls = 0

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
        self.calls += 1
        return super().measure(op, matrix, configs, feat, check=check, seed=seed)

    def metadata(self):
        return {**super().metadata(), "pid": os.getpid(), "calls": self.calls}


def _expected_rows(corpus: str) -> set[tuple[str, str]]:
    spade = space.create("spade", "spmm")
    return {(e.name, c.to_json()) for e in load_corpus(corpus, max_rows=3000)
            for c in config_sample(spade, 12, 0, e.name)}


def test_a_killed_worker_has_its_task_retried_and_workers_keep_their_backend(cluster, tmp_path):
    spade = space.create("spade", "spmm")
    mats = {f"m{n}": generate("uniform", 600 + 50 * n, seed=n) for n in range(4)}
    configs = spade.sample(9, seed=1)
    marker = tmp_path / "killed.pid"
    with executors.create("ray", max_retries=2) as executor:
        assert executor.workers == 2
        collect(KillOnceBackend(str(marker)), "spmm", mats, configs, tmp_path / "ds", feat=16, chunk=3,
                progress=False, executor=executor)
    assert ray.is_initialized(), "an executor that joined a cluster must leave it running"
    frame = load_frame(tmp_path / "ds")
    keys = list(zip(frame["matrix"], frame["config"]))
    assert len(keys) == len(set(keys)) == 4 * 9
    assert set(keys) == {(m, c.to_json()) for m in mats for c in configs}
    killed = int(marker.read_text())
    meta = [json.loads(b) for b in frame["backend"]]
    pids = {m["pid"] for m in meta}
    assert killed not in pids and os.getpid() not in pids  # the killed task ran again, on a worker
    # a worker unpickles the backend once and keeps it (and its kernel cache) across tasks
    assert max(m["calls"] for m in meta) > 1
    # the simulator is deterministic: every worker's rows equal a local run's
    local = SpadeBackend(workers=1)
    for name, matrix in mats.items():
        rows = frame[frame["matrix"] == name].set_index("config")["time_ms"]
        expected = {r.config.to_json(): r.time_ms for r in local.measure("spmm", matrix, configs, 16)}
        assert rows.to_dict() == expected


def test_driver_killed_with_9_resumes_without_loss_or_duplicates(cluster, tmp_path):
    out = tmp_path / "ds"
    corpus = "synthetic:16:9"
    cmd = [sys.executable, "-m", "cognate_tvm.collect", *CLI_ARGS, "--corpus", corpus, "--out", str(out),
           "--executor", "ray", "--workers", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(list(out.glob("*.parquet"))) < 3 and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:  # the driver's local cluster leaves agents behind when the driver is killed: end them too
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    assert 3 <= len(before) < 16 * 3, "the kill should land mid-run"
    # resume, joining this process's cluster
    assert main(CLI_ARGS + ["--corpus", corpus, "--out", str(out), "--executor", "ray"]) == 0
    frame = load_frame(out)
    keys = list(zip(frame["matrix"], frame["config"]))
    assert len(keys) == len(set(keys)) and set(keys) == _expected_rows(corpus)
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet") if p.name in before} == before
    assert not [p for p in os.listdir(out) if p.startswith(".")], "half-written parts left behind"


def test_executor_flags_are_checked(cluster, tmp_path, capsys):
    args = CLI_ARGS + ["--corpus", "synthetic:1", "--out", str(tmp_path / "ds")]
    assert main(args + ["--workers", "2"]) == 2
    assert "--ray-address and --workers need --executor ray" in capsys.readouterr().err
    llvm = ["--target", "llvm"] + args[2:] + ["--pool", "24"]
    assert main(llvm + ["--executor", "ray"]) == 2
    assert "--executor ray with --target llvm needs --threads T" in capsys.readouterr().err
    with pytest.raises(ValueError, match="workers must be >= 1"):
        executors.RayExecutor(workers=0)
    with pytest.raises(ValueError, match="tasks need 3 CPUs but the largest node of the Ray cluster has 2"):
        executors.RayExecutor(cpus_per_task=3)
    assert ray.is_initialized()  # a joined cluster stays up
