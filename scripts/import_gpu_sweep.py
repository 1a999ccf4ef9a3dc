"""Import GPU sweep JSONs (``gpu_sweep.json`` of ``benchmarks/gpu_check.py``) into Parquet datasets.

    python scripts/import_gpu_sweep.py SWEEP.json [SWEEP.json ...] --spmm-out DIR --sddmm-out DIR
        --timing TEXT --timestamp ISO [ISO ...] [--env gpu_check.json ...] [--arch sm_XX] [--device NAME]

Each sweep's matrices are rebuilt from its generator arguments (``generate_corpus``)
and checked against the recorded shape and nonzeros; every config's time becomes a
row of the dataset (`cognate_tvm.data.COLUMNS`, platform "gpu", target "cuda"), a
config without a time a failed row. The ``backend`` column records the device, its
arch, the software versions (from the ``environment`` of the ``gpu_check.json``
beside each sweep, or ``--env``), how the times were taken (``--timing``) and the
generator arguments. Rerunning overwrites the same parts.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Sequence

from cognate_tvm.sweeps import sweep_frames, write_sweep

ENV_KEYS = ("device", "compute_version", "torch", "torch_cuda", "nvcc_version", "tvm", "compile_mode", "driver",
            "python")


def sweep_metadata(sweep_path: Path, env_path: Path | None, *, timing: str, arch: str | None,
                   device: str | None) -> dict:
    """Where and how the sweep was measured: the check report's environment, overridden by the arguments."""
    env_path = env_path or sweep_path.with_name("gpu_check.json")
    report = json.loads(env_path.read_text()) if env_path.is_file() else {}
    environment = report.get("environment", {})
    meta = {key: environment[key] for key in ENV_KEYS if key in environment}
    meta["arch"] = arch or report.get("arch")
    if device:
        meta["device"] = device
    if not meta.get("device") or not meta.get("arch"):
        raise ValueError(f"{sweep_path}: no device / arch in {env_path}; give --device and --arch")
    meta.update({"timing": timing, "source": sweep_path.parent.name, "clock": "cuda events"})
    return meta


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweeps", type=Path, nargs="+", help="gpu_sweep.json files")
    parser.add_argument("--spmm-out", type=Path, required=True, help="SpMM dataset directory")
    parser.add_argument("--sddmm-out", type=Path, required=True, help="SDDMM dataset directory")
    parser.add_argument("--timing", required=True, help="how each time was taken (stored with every row)")
    parser.add_argument("--timestamp", required=True, nargs="+",
                        help="when each sweep was measured (ISO 8601, UTC): one, or one per sweep")
    parser.add_argument("--env", type=Path, nargs="*", default=None,
                        help="gpu_check.json per sweep (default: the one beside each sweep)")
    parser.add_argument("--arch", default=None, help="the device's arch (default: the check report's)")
    parser.add_argument("--device", default=None, help="the device's name (default: the check report's)")
    args = parser.parse_args(argv)
    if args.env is not None and len(args.env) != len(args.sweeps):
        parser.error(f"--env takes one file per sweep ({len(args.sweeps)}), got {len(args.env)}")
    if len(args.timestamp) not in (1, len(args.sweeps)):
        parser.error(f"--timestamp takes one time or one per sweep ({len(args.sweeps)}), got {len(args.timestamp)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    envs = args.env or [None] * len(args.sweeps)
    stamps = args.timestamp * len(args.sweeps) if len(args.timestamp) == 1 else args.timestamp
    out = {"spmm": args.spmm_out, "sddmm": args.sddmm_out}
    for sweep_path, env_path, stamp in zip(args.sweeps, envs, stamps):
        meta = sweep_metadata(sweep_path, env_path, timing=args.timing, arch=args.arch, device=args.device)
        frames = sweep_frames(json.loads(sweep_path.read_text()), platform="gpu", target="cuda", metadata=meta,
                              timestamp=stamp)
        written = write_sweep(frames, out, platform="gpu")
        print(f"{sweep_path}: {len({name for name, _ in frames})} matrices, rows written {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
