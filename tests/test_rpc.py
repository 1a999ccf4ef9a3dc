"""Measuring through TVM's RPC tracker: a tracker and two servers on 127.0.0.1, real kernels.

The tracker and the servers are the TVM ecosystem's own, started on free loopback ports
and killed (as process groups) at the end (`rpc_cluster`). Every wait is bounded.
"""
from __future__ import annotations

import json
import pickle
import time

import pytest
from rpc_cluster import free_port, kill, rpc_cluster

from cognate_tvm import space
from cognate_tvm.backends import rpc as rpc_backend
from cognate_tvm.backends.rpc import RPCLLVMBackend
from cognate_tvm.backends.rpc_tracker import parse_tracker
from cognate_tvm.collect import main as collect_main
from cognate_tvm.data import load_frame
from cognate_tvm.matrix import generate
from cognate_tvm.ops import SDDMM, SPMM

KEYS = ("cognate-test", "cognate-doomed")


@pytest.fixture(scope="module")
def cluster():
    """(tracker address, {key: server process}); both keys have one free device."""
    with rpc_cluster(KEYS) as (tracker, procs):
        yield tracker, procs


def _configs(op) -> list:
    """The baseline, a column-panel config and a seeded sample: three kernels."""
    cpu = space.create("cpu", op.name)
    paneled = next(c for c in cpu.sample(64, seed=3) if not c.single_panel)
    return [cpu.baseline(), paneled, cpu.sample(1, seed=7)[0]]


@pytest.mark.parametrize("op", [SPMM, SDDMM], ids=["spmm", "sddmm"])
def test_measures_through_the_tracker_and_outputs_match_scipy(cluster, op):
    tracker, _ = cluster
    matrix = generate("rmat", 400, seed=2)
    backend = RPCLLVMBackend(tracker=tracker, key=KEYS[0], num_threads=1, cache_dir=None, repeats=2,
                             timeout_s=5.0, request_timeout_s=20.0)
    backend = pickle.loads(pickle.dumps(backend))  # it travels to workers as settings only
    configs = _configs(op)
    results = backend.measure(op, matrix, configs, 16, check=True, seed=1)
    assert [r.config for r in results] == configs
    for r in results:
        assert r.error is None, r.error
        assert r.correct is True and r.ok and r.time_ms > 0
        assert r.extra["rpc_server"].startswith("127.0.0.1:") and r.extra["remote_threads"] == 1
    meta = backend.metadata()
    assert meta["rpc_key"] == KEYS[0] and meta["rpc_tracker"] == tracker and meta["host"] == f"rpc:{KEYS[0]}"


def test_collect_cli_measures_on_the_rpc_device(cluster, tmp_path):
    tracker, _ = cluster
    out = tmp_path / "ds"
    args = ["--target", "llvm", "--op", "spmm", "--corpus", "synthetic:1:3", "--min-rows", "1000",
            "--max-rows", "1100", "--configs-per-matrix", "2", "--pool", "24", "--feat", "8", "--threads", "1",
            "--repeats", "1",
            "--check", "--quiet", "--out", str(out)]
    assert collect_main(args + ["--rpc-tracker", tracker, "--rpc-key", KEYS[0]]) == 0
    frame = load_frame(out)
    assert len(frame) in (2, 3) and frame["error"].isna().all() and (frame["correct"] == True).all()  # noqa: E712
    meta = json.loads(frame["backend"].iloc[0])
    assert meta["rpc_key"] == KEYS[0] and meta["rpc_tracker"] == tracker
    assert collect_main(args + ["--rpc-tracker", tracker]) == 2  # --rpc-key missing
    assert collect_main(args[:1] + ["spade"] + args[2:] + ["--rpc-tracker", tracker, "--rpc-key", "k"]) == 2


def test_killing_the_server_mid_sweep_gives_error_results(cluster, monkeypatch):
    tracker, procs = cluster
    measured = []
    original = rpc_backend._RemoteRun.measure

    def measure_then_kill(self, config, library, check):
        result = original(self, config, library, check)
        measured.append(result)
        if len(measured) == 1:  # the device dies after the first config
            kill(procs[KEYS[1]])
        return result

    monkeypatch.setattr(rpc_backend._RemoteRun, "measure", measure_then_kill)
    backend = RPCLLVMBackend(tracker=tracker, key=KEYS[1], num_threads=1, cache_dir=None, repeats=1,
                             timeout_s=5.0, request_timeout_s=3.0)
    cpu = space.create("cpu", "spmm")
    configs = [cpu.baseline()] + cpu.sample(4, seed=11)
    start = time.time()
    results = backend.measure(SPMM, generate("banded", 300, seed=1), configs, 8, check=True)
    assert len(results) == len(configs)
    assert results[0].ok and results[0].correct is True
    assert all(r.error and r.error.startswith("rpc: ") and r.time_ms is None for r in results[1:])
    # the lost session, then one bounded request for a fresh one, then the rest without waiting: the
    # tracker has no device left (or, if it has not yet seen the server die, hands out one that refuses)
    assert "no device with key" not in results[1].error  # the session that was lost mid-sweep
    assert all(r.error == results[2].error for r in results[2:])
    assert "no device with key" in results[2].error or "cannot connect to the RPC server" in results[2].error
    assert time.time() - start < 30


def test_unreachable_tracker_is_an_error_result_not_an_exception():
    backend = RPCLLVMBackend(tracker=f"127.0.0.1:{free_port()}", key="none", num_threads=1, cache_dir=None,
                             request_timeout_s=2.0)
    cpu = space.create("cpu", "spmm")
    results = backend.measure(SPMM, generate("banded", 100, seed=0), [cpu.baseline(), cpu.baseline()], 8)
    assert all(r.error.startswith("rpc: cannot reach the RPC tracker") for r in results)


@pytest.mark.parametrize("bad", ["localhost", "host:port", ":9190", "h:0", "h:70000"])
def test_bad_tracker_address_is_rejected(bad):
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_tracker(bad)
