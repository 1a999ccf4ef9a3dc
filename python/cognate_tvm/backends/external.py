"""`ExternalSimulator`: any simulator behind a subprocess and a JSON-lines protocol.

Protocol. The command gets one JSON object on stdin:

    {"matrix": "/path/to/matrix.npz", "op": "spmm", "feat": 128, "seed": 0,
     "platform": "spade", "configs": [{...config fields...}, ...], "hardware": {...}}

and writes one JSON object per line on stdout, one per config, in any order:

    {"index": 3, "cycles": 123456}                 # or "time_ms": 0.06
    {"index": 4, "error": "deadlock in tile 17"}   # a failed config
    {"index": 5, "cycles": 99, "breakdown": {...}} # extra fields are kept in `extra`

`index` is the config's position in the request. A missing command, a crash,
a timeout or a malformed line becomes an `error` on the configs it leaves
without a result; every valid line already written is kept. A config outside
the platform's space is an error result and is not sent.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

import scipy.sparse as sp

from ..errors import InvalidConfigError
from ..matrix import save_matrix
from ..ops import Op, get_op
from ..space import create as create_space
from ..space.base import Config
from ..simulator import HardwareParams
from .base import Backend, MeasureResult

logger = logging.getLogger(__name__)

# Characters of stderr quoted in an error message.
STDERR_TAIL = 500
# Malformed lines quoted in an error message.
MALFORMED_SHOWN = 3


class ExternalSimulator(Backend):
    """Runs an external simulator command once per `measure` call.

    Parameters
    ----------
    command : argv list, or a shell-style string split with shlex.
    platform : the space whose configs the simulator understands (default "spade").
    timeout_s : wall-clock limit of one call, for all its configs together.
    hardware : parameters passed through in the request; HardwareParams or a dict.
        `clock_ghz` in it converts cycles to ms (default HardwareParams().clock_ghz).
    workdir : where the temporary matrix file is written (default: the system temp dir).
    """

    target = "external"
    platform = "spade"
    deterministic = True  # simulated cycles

    def __init__(self, *, command: Sequence[str] | str, platform: str = "spade", timeout_s: float = 3600.0,
                 hardware: HardwareParams | dict | None = None, workdir: str | os.PathLike | None = None):
        self.command = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
        if not self.command:
            raise ValueError("command must not be empty")
        self.platform = platform
        self.timeout_s = float(timeout_s)
        if hardware is None:
            hardware = HardwareParams()
        self.hardware = hardware.to_dict() if isinstance(hardware, HardwareParams) else dict(hardware)
        self.clock_ghz = float(self.hardware.get("clock_ghz", HardwareParams().clock_ghz))
        self.workdir = Path(workdir) if workdir is not None else None

    def measure(self, op: Op | str, matrix: sp.csr_matrix | str | os.PathLike, configs: Sequence[Config],
                feat: int, *, check: bool = False, seed: int = 0) -> list[MeasureResult]:
        """Run the simulator on `matrix` (a scipy matrix or a matrix file path) for `configs`."""
        op = get_op(op)
        space = create_space(self.platform, op.name)
        results: list[MeasureResult | None] = [None] * len(configs)
        sent: list[int] = []  # positions of the configs in the request
        for n, config in enumerate(configs):
            try:
                space.check(config)
            except InvalidConfigError as exc:
                results[n] = MeasureResult(config, None, error=str(exc))
            else:
                sent.append(n)
        if sent:
            with tempfile.TemporaryDirectory(dir=self.workdir, prefix="cognate-ext-") as tmp:
                if isinstance(matrix, (str, os.PathLike)):
                    path = Path(matrix).resolve()
                else:
                    path = save_matrix(matrix, Path(tmp) / "matrix.npz")
                request = {"matrix": str(path), "op": op.name, "feat": int(feat), "seed": int(seed),
                           "platform": self.platform, "configs": [configs[n].to_dict() for n in sent],
                           "hardware": self.hardware}
                stdout, failure = self._run(json.dumps(request))
            found, malformed = self._parse(stdout, len(sent))
            for index, n in enumerate(sent):
                results[n] = self._collect(configs[n], found.get(index), failure, malformed)
        if check:
            logger.info("external simulator: no outputs to check (correct=None)")
        return [r for r in results if r is not None]

    # -- helpers -----------------------------------------------------------------
    def _collect(self, config: Config, item: dict | None, failure: str | None,
                 malformed: list[str]) -> MeasureResult:
        """The config's result line, or an error saying why there is none."""
        if item is not None:
            return self._result(config, item)
        reasons = [failure] if failure else []
        if malformed:
            shown = "; ".join(malformed[:MALFORMED_SHOWN])
            more = len(malformed) - MALFORMED_SHOWN
            reasons.append(f"malformed output: {shown}" + (f" (and {more} more)" if more > 0 else ""))
        if not reasons:
            reasons.append("the simulator wrote no result for this config")
        return MeasureResult(config, None, error="; ".join(reasons))

    def _run(self, request: str) -> tuple[str, str | None]:
        """Stdout of the command and a failure message (None when it exited 0)."""
        try:
            proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            return "", f"cannot run simulator command {self.command[0]!r}: {exc.strerror or exc}"
        try:
            stdout, stderr = proc.communicate(request, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            try:  # the whole session: the command and any children it started
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            stdout, _ = proc.communicate()
            return stdout or "", f"simulator timed out after {self.timeout_s:g} s"
        if proc.returncode != 0:
            tail = (stderr or "").strip()[-STDERR_TAIL:]
            return stdout, f"simulator exited with code {proc.returncode}" + (f": {tail}" if tail else "")
        return stdout, None

    @staticmethod
    def _parse(stdout: str, count: int) -> tuple[dict[int, dict], list[str]]:
        found: dict[int, dict] = {}
        malformed: list[str] = []
        for line in stdout.splitlines():
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                malformed.append(f"not JSON: {line[:120]!r}")
                continue
            index = item.get("index") if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
                malformed.append(f"no valid 'index' in {line[:120]!r}")
                continue
            if "error" not in item and not _is_number(item.get("cycles")) and not _is_number(item.get("time_ms")):
                malformed.append(f"no 'cycles', 'time_ms' or 'error' in {line[:120]!r}")
                continue
            found.setdefault(index, item)
        return found, malformed

    def _result(self, config: Config, item: dict) -> MeasureResult:
        extra = {k: v for k, v in item.items() if k not in ("index", "error", "time_ms")}
        if item.get("error") is not None:
            return MeasureResult(config, None, error=f"simulator: {item['error']}", extra=extra)
        if _is_number(item.get("time_ms")):
            time_ms = float(item["time_ms"])
        else:
            time_ms = float(item["cycles"]) / (self.clock_ghz * 1e6)
        return MeasureResult(config, time_ms, correct=None, extra=extra)

    def metadata(self) -> dict:
        meta = super().metadata()
        meta.update({"command": self.command, "hardware": self.hardware, "platform": self.platform})
        return meta


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
