"""The TVM RPC tracker protocol: its address, its summary, and one session on a device of a key.

Every wait is bounded, unlike TVM's own client. A tracker that cannot be reached or has no
device in time is an `RPCUnavailableError`, which the RPC backends (`rpc`, `rpc_cuda`)
record as their configs' error; --rpc-tracker/--rpc-key given wrongly are an
`RPCSettingsError`, raised before anything is built.
"""
from __future__ import annotations

import socket
import struct

from ..errors import CognateError


class RPCUnavailableError(CognateError, RuntimeError):
    """No session could be had from the tracker (unreachable, or no free device of the key in time)."""


class RPCSettingsError(CognateError, ValueError):
    """--rpc-tracker/--rpc-key given wrongly: one without the other, a bad address, a target without RPC."""


def parse_tracker(address: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); RPCSettingsError (a ValueError) naming the bad address."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RPCSettingsError(f"RPC tracker address must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def _tracker_socket(tracker: tuple[str, int], timeout_s: float) -> socket.socket:
    """A connected, handshaken socket to the tracker; every read and write bounded by `timeout_s`."""
    from tvm.rpc import base

    try:
        sock = socket.create_connection(tracker, timeout=timeout_s)
    except OSError as exc:
        raise RPCUnavailableError(f"cannot reach the RPC tracker at {tracker[0]}:{tracker[1]}: {exc}") from None
    try:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = struct.unpack("<i", base.recvall(sock, 4))[0]
    except (OSError, RuntimeError) as exc:
        sock.close()
        raise RPCUnavailableError(f"no answer from the RPC tracker at {tracker[0]}:{tracker[1]}: {exc}") from None
    if magic != base.RPC_TRACKER_MAGIC:
        sock.close()
        raise RPCUnavailableError(f"{tracker[0]}:{tracker[1]} is not a TVM RPC tracker")
    return sock


def tracker_summary(tracker: str | tuple[str, int], *, timeout_s: float = 5.0) -> dict:
    """The tracker's summary: ``{"queue_info": {key: {"free": n, "pending": n}}, "server_info": [...]}``."""
    from tvm.rpc import base

    address = parse_tracker(tracker) if isinstance(tracker, str) else tracker
    sock = _tracker_socket(address, timeout_s)
    try:
        base.sendjson(sock, [base.TrackerCode.SUMMARY])
        reply = base.recvjson(sock)
    except (OSError, RuntimeError) as exc:
        raise RPCUnavailableError(f"no summary from the RPC tracker at {address[0]}:{address[1]}: {exc}") from None
    finally:
        sock.close()
    if reply[0] != base.TrackerCode.SUCCESS:
        raise RPCUnavailableError(f"the tracker at {address[0]}:{address[1]} answered {reply!r}")
    return reply[1]


def request_session(tracker: tuple[str, int], key: str, *, timeout_s: float, session_timeout_s: float = 0.0,
                    priority: int = 1):
    """An RPC session on a device registered with `tracker` under `key`, or RPCUnavailableError.

    Like ``tvm.rpc.TrackerSession.request``, but every wait is bounded by `timeout_s`:
    TVM's own client retries a refused tracker for a minute and queues a request
    for a busy key forever. `session_timeout_s` (> 0) lets the server end the
    session after that many seconds.
    """
    from tvm import rpc
    from tvm.rpc import base

    sock = _tracker_socket(tracker, timeout_s)
    try:
        base.sendjson(sock, [base.TrackerCode.REQUEST, key, "", int(priority)])
        reply = base.recvjson(sock)
    except (OSError, RuntimeError) as exc:  # socket.timeout is an OSError
        raise RPCUnavailableError(f"no device with key {key!r} from the tracker at {tracker[0]}:{tracker[1]} "
                                  f"within {timeout_s:g} s ({type(exc).__name__}: {exc})") from None
    finally:
        sock.close()
    if reply[0] != base.TrackerCode.SUCCESS:
        raise RPCUnavailableError(f"the tracker refused the request for key {key!r}: {reply!r}")
    url, port, match_key = reply[1]
    try:
        session = rpc.connect(url, port, match_key, session_timeout=session_timeout_s)
    except Exception as exc:  # the server went away between the tracker's answer and our connect
        raise RPCUnavailableError(f"cannot connect to the RPC server {url}:{port}: {exc}") from None
    return session, f"{url}:{port}"


def wants_rpc(tracker: str | None, key: str | None) -> bool:
    """Whether the --rpc-tracker/--rpc-key flags ask for a remote device (both given; neither: False).

    RPCSettingsError when only one is given or the address is not HOST:PORT, so a
    CLI fails before it builds anything.
    """
    if not tracker and not key:
        return False
    if not (tracker and key):
        raise RPCSettingsError("--rpc-tracker HOST:PORT and --rpc-key KEY go together: give both "
                               f"(got --rpc-tracker {tracker!r}, --rpc-key {key!r})")
    parse_tracker(tracker)
    return True


__all__ = ["RPCSettingsError", "RPCUnavailableError", "parse_tracker", "request_session", "tracker_summary",
           "wants_rpc"]
