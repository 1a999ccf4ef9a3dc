"""What the command lines (`measure`, `tune`, `collect`) share: running one, the arguments they have in
common, and the backend those arguments ask for.

Errors here speak of flags (``--configs``, ``--top-k``); the library below (`tuning`) speaks of
parameters.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

from . import backends, space, tuning
from .matrix import EXAMPLE_MATRIX
from .backends.rpc_tracker import RPCSettingsError, wants_rpc
from .errors import CognateError
from .ops import OPS


def cli_call(run, parser, argv: Sequence[str] | None, *, hint=None):
    """(args, exit status, result) of a CLI: `run(args)` on the parsed `argv`.

    Bad input and a target that cannot run here print ``error: ...`` (and
    ``hint: ...`` where `hint(exc, args)` has one) and give status 2, result None.
    """
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args, 0, run(args)
    except (CognateError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        advice = hint(exc, args) if hint is not None else None
        if advice:
            print(f"hint: {advice}", file=sys.stderr)
        return args, 2, None


def flag(option: str) -> str:
    """The command-line flag of a library option: ``top_k`` -> ``--top-k``."""
    return "--" + option.replace("_", "-")


def parse_configs(spec: str, platform_space: space.Space, seed: int) -> list[space.Config]:
    """--configs 'all', 'baseline' or 'sample:N' -> configs (the baseline always comes first)."""
    baseline = platform_space.baseline()
    if spec == "baseline":
        return [baseline]
    if spec == "all":
        chosen = platform_space.configs()
    elif spec.startswith("sample:") and spec[7:].isdigit() and int(spec[7:]) > 0:
        chosen = platform_space.sample(int(spec[7:]), seed)
    else:
        raise ValueError(f"--configs must be 'all', 'baseline' or 'sample:N' with N > 0, got {spec!r}")
    return [baseline] + [c for c in chosen if c != baseline]


def add_rpc_arguments(parser: argparse.ArgumentParser) -> None:
    """--rpc-tracker HOST:PORT and --rpc-key KEY: run the kernels on a device behind a TVM RPC tracker."""
    parser.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT",
                        help="llvm, cuda: build here, run the kernels on a device behind this TVM RPC tracker")
    parser.add_argument("--rpc-key", default=None, help="with --rpc-tracker: the device key")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by the measure and tune CLIs: what to run, where, and how to report."""
    parser.add_argument("op", choices=sorted(OPS))
    parser.add_argument("--target", default="llvm", choices=backends.TARGETS)
    parser.add_argument("--matrix", type=Path, default=EXAMPLE_MATRIX,
                        help=".mtx, .npz or edge list (default: the bundled example)")
    parser.add_argument("--feat", type=int, default=128, help="dense width N (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the config sample and the dense inputs")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                        help="llvm: element type of the dense operands (bfloat16: half the bytes, float32 "
                             "accumulation and output; default float32)")
    parser.add_argument("--vendor", action="store_true", help="also time the vendor library")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--arch", default=None, help="GPU architecture for --target cuda (sm_80, sm_90)")
    parser.add_argument("--compile-only", action="store_true",
                        help="--target cuda: build and compile to PTX, do not run")
    add_rpc_arguments(parser)


def make_backend(args: argparse.Namespace, **options) -> backends.Backend:
    """The backend the arguments ask for: ``--target`` with `options` (and ``--arch``,
    ``--compile-only`` where the parser has them), local, or on the device behind
    ``--rpc-tracker``/``--rpc-key``."""
    compile_only = getattr(args, "compile_only", False)
    if getattr(args, "dtype", "float32") != "float32":
        options["dtype"] = args.dtype
    if compile_only and wants_rpc(args.rpc_tracker, args.rpc_key):
        raise RPCSettingsError("--compile-only runs nothing: it does not take --rpc-tracker/--rpc-key")
    return tuning.create_backend(args.target, arch=getattr(args, "arch", None), compile_only=compile_only,
                                rpc_tracker=args.rpc_tracker, rpc_key=args.rpc_key, **options)


__all__ = ["add_common_arguments", "add_rpc_arguments", "cli_call", "flag", "make_backend", "parse_configs"]
