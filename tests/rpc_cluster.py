"""A TVM RPC tracker and servers on 127.0.0.1 for the tests, torn down as process groups.

The tracker and the servers are the TVM ecosystem's own (`python -m tvm.exec.rpc_tracker`,
`python -m tvm.exec.rpc_server`), started on free loopback ports. Every wait is bounded.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Iterator, Sequence

import tornado  # noqa: F401  - `python -m tvm.exec.rpc_tracker` needs it (the [distributed] extra)

from cognate_tvm.backends.rpc_tracker import RPCUnavailableError, tracker_summary

START_TIMEOUT_S = 90  # a loaded 2-core machine imports TVM (twice per process) slowly


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(args: list[str], env: dict | None = None) -> subprocess.Popen:
    env = dict(os.environ if env is None else env, TVM_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the server's session workers are in its group
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


@contextlib.contextmanager
def rpc_cluster(keys: Sequence[str], server_env: dict | None = None) -> Iterator[tuple[str, dict]]:
    """(tracker address, {"tracker" and each key: its process}); each key has one free device."""
    port = free_port()
    tracker = f"127.0.0.1:{port}"
    procs = {"tracker": start(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                               "--port-end", str(port + 1), "--silent"])}
    for key in keys:
        server_port = free_port()
        procs[key] = start(["tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(server_port),
                            "--port-end", str(server_port + 1), "--tracker", tracker, "--key", key,
                            "--silent"], env=server_env)
    try:
        deadline = time.time() + START_TIMEOUT_S
        while True:
            try:
                queues = tracker_summary(tracker, timeout_s=2.0)["queue_info"]
                if all(queues.get(key, {}).get("free", 0) >= 1 for key in keys):
                    break
            except RPCUnavailableError:
                pass
            assert time.time() < deadline, "the RPC tracker and servers did not come up"
            assert all(p.poll() is None for p in procs.values()), "an RPC process exited at start-up"
            time.sleep(0.1)
        yield tracker, procs
    finally:
        for proc in procs.values():
            kill(proc)
