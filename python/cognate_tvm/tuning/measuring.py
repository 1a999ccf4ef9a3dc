"""Creating a backend and the batched measuring loop that `tune`, the oracle and the `measure` CLI share."""
from __future__ import annotations

import logging
import sys
from typing import Sequence

import scipy.sparse as sp
from tqdm import tqdm

from .. import backends, space
from ..backends.base import Backend, MeasureResult
from ..backends.rpc import create_rpc
from ..backends.rpc_tracker import wants_rpc
from ..ops import Op, get_op

log = logging.getLogger(__name__)

BATCH = 8                # configs per backend call: small enough for a live progress bar


def create_backend(target: str | Backend, *, arch: str | None = None, compile_only: bool = False,
                   rpc_tracker: str | None = None, rpc_key: str | None = None, **options) -> Backend:
    """The backend of `target` with the given options; ValueError if the target does not take one.

    With `rpc_tracker` ("HOST:PORT") and `rpc_key`, the kernels are built here and
    run on a device behind that TVM RPC tracker (`backends.rpc.create_rpc`);
    `RPCSettingsError` (a ValueError) when only one is given, the address is bad,
    or the target cannot run remotely (a remote backend takes no `compile_only`).
    """
    if isinstance(target, Backend):
        return target
    if arch is not None:
        options["arch"] = arch
    if compile_only:
        options["compile_only"] = True
    try:
        if wants_rpc(rpc_tracker, rpc_key):
            return create_rpc(target, tracker=rpc_tracker, key=rpc_key, **options)
        return backends.create(target, **options)
    except TypeError as exc:
        raise ValueError(f"target {target!r} does not take option(s) {sorted(options)}: {exc}") from None


def measure_configs(backend: Backend, op: Op | str, matrix: sp.csr_matrix, configs: Sequence[space.Config],
                    feat: int, *, check: bool = False, seed: int = 0, progress: bool = False,
                    desc: str = "measure") -> list[MeasureResult]:
    """Measure `configs` in batches of `BATCH` (so a progress bar stays live); failures are results."""
    op = get_op(op)
    results: list[MeasureResult] = []
    with tqdm(total=len(configs), desc=desc, unit="config", file=sys.stderr, disable=not progress) as bar:
        for start in range(0, len(configs), BATCH):
            batch = list(configs[start:start + BATCH])
            results += backend.measure(op, matrix, batch, feat, check=check, seed=seed)
            bar.update(len(batch))
    for r in results:
        if not r.ok:
            log.info("config %s failed: %s", r.config.to_json(), r.error)
    return results


def vendor_report(backend: Backend, op: Op | str, matrix: sp.csr_matrix, feat: int, seed: int) -> dict:
    """{"name", "method", "time_ms"} of the target's vendor library on `matrix`."""
    op = get_op(op)
    library = backend.vendor()
    if library is None:
        raise ValueError(f"no vendor library is available for target {backend.target!r} here")
    return {"name": library.name, "method": library.method(op),
            "time_ms": library.time_ms(op, matrix, feat, seed=seed)}
