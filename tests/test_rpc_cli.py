"""`measure` and `tune` with --rpc-tracker/--rpc-key: llvm kernels timed on a loopback RPC server."""
from __future__ import annotations

import contextlib
import io
import json

import pytest
from rpc_cluster import rpc_cluster
from tiny_models import ship, tiny_cpu_model

from cognate_tvm import measure, tune
from cognate_tvm.matrix import generate, save_matrix

KEY = "cognate-cli"


def _run(main, *argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def cluster():
    with rpc_cluster([KEY]) as (tracker, _):
        yield tracker


@pytest.fixture(scope="module")
def matrix_path(tmp_path_factory):
    return save_matrix(generate("rmat", 300, seed=4), tmp_path_factory.mktemp("m") / "powerlaw.mtx")


def test_measure_runs_on_the_rpc_device(cluster, matrix_path):
    code, out, err = _run(measure.main, "spmm", "--matrix", matrix_path, "--feat", 8, "--configs", "sample:2",
                          "--check", "--json", "--quiet", "--rpc-tracker", cluster, "--rpc-key", KEY)
    assert code == 0, err
    report = json.loads(out)
    assert report["target"] == "llvm" and report["matrix"]["rows"] == 300 and len(report["results"]) == 3
    for r in report["results"]:
        assert r["error"] is None and r["correct"] is True and r["time_ms"] > 0
        assert r["rpc_server"].startswith("127.0.0.1:")  # timed on the device, not here
    assert report["baseline"]["time_ms"] == report["results"][0]["time_ms"]


def test_tune_runs_on_the_rpc_device_and_writes_the_kernel(cluster, matrix_path, tmp_path):
    shipped = ship(tiny_cpu_model(), tmp_path / "pretrained")
    out_dir = tmp_path / "out"
    code, out, err = _run(tune.main, "spmm", "--matrix", matrix_path, "--feat", 8, "--top-k", 2,
                          "--pretrained-dir", shipped, "--out", out_dir, "--json", "--quiet",
                          "--rpc-tracker", cluster, "--rpc-key", KEY)
    assert code == 0, err
    report = json.loads(out)
    assert report["target"] == "llvm" and report["failed"] == 0 and 2 <= report["samples_measured"] <= 3
    assert report["best"]["correct"] is True and report["best"]["time_ms"] > 0
    written = json.loads((out_dir / "config.json").read_text())
    assert written["config"] == report["chosen"] and (out_dir / written["kernel"]["library"]).is_file()


@pytest.mark.parametrize("main", [measure.main, tune.main], ids=["measure", "tune"])
@pytest.mark.parametrize("flags, message", [
    (["--rpc-key", "k"], "--rpc-tracker HOST:PORT and --rpc-key KEY go together"),
    (["--rpc-tracker", "127.0.0.1:9190"], "--rpc-tracker HOST:PORT and --rpc-key KEY go together"),
    (["--rpc-tracker", "localhost", "--rpc-key", "k"], "must be HOST:PORT"),
    (["--rpc-tracker", "h:70000", "--rpc-key", "k"], "must be HOST:PORT"),
    (["--target", "spade", "--rpc-tracker", "h:9190", "--rpc-key", "k"], "works with --target llvm or cuda"),
    (["--target", "cuda", "--compile-only", "--rpc-tracker", "h:9190", "--rpc-key", "k"],
     "--compile-only runs nothing"),
], ids=["key-only", "tracker-only", "no-port", "bad-port", "spade", "compile-only"])
def test_bad_rpc_flags_exit_2_with_a_clear_error(main, flags, message, matrix_path, tmp_path):
    extra = ["--out", tmp_path] if main is tune.main and "--compile-only" in flags else []
    code, out, err = _run(main, "spmm", "--matrix", matrix_path, "--quiet", *flags, *extra)
    assert code == 2 and out == ""
    assert message in err, err
