"""Measure configurations of a sparse op on one matrix and one target.

    python -m cognate_tvm.measure {spmm,sddmm} --target llvm --matrix PATH [--feat N]
        [--configs all|baseline|sample:N] [--seed S] [--check] [--vendor] [--json]
        [--arch sm_80|sm_90] [--compile-only] [--rpc-tracker HOST:PORT --rpc-key KEY]

Without --matrix, the bundled example matrix is used. --json prints one JSON
object (see `cognate_tvm.tuning.measure_report`); otherwise a table sorted by
time. ``--rpc-tracker``/``--rpc-key`` (llvm, cuda) build the kernels here and
time them on a device behind a TVM RPC tracker (`cognate_tvm.backends.rpc`).
The work is done by `cognate_tvm.tuning`; this module parses arguments and prints.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from . import space, tuning
from .cli import add_common_arguments, cli_call, make_backend, parse_configs
from .matrix import load_matrix
from .ops import get_op


def run(args: argparse.Namespace) -> dict:
    op = get_op(args.op)
    if args.feat < 1:
        raise ValueError(f"--feat must be >= 1, got {args.feat}")
    matrix = load_matrix(args.matrix)
    backend = make_backend(args)
    platform_space = space.create(backend.platform, op.name)
    configs = parse_configs(args.configs, platform_space, args.seed)
    results = tuning.measure_configs(backend, op, matrix, configs, args.feat, check=args.check, seed=args.seed,
                                    progress=not args.quiet, desc=f"{op.name} on {args.target}")
    vendor = tuning.vendor_report(backend, op, matrix, args.feat, args.seed) if args.vendor else None
    report = tuning.measure_report(op=args.op, target=args.target, feat=args.feat, matrix_path=args.matrix,
                                  matrix=matrix, results=results, vendor=vendor)
    return {**report, "dtype": args.dtype}


def format_table(report: dict) -> str:
    base = report["baseline"]["time_ms"]
    rows = sorted(report["results"], key=lambda r: (r["time_ms"] is None, r["time_ms"] or 0.0))
    m = report["matrix"]
    lines = [f"{report['op']} on {report['target']}: {m['rows']}x{m['cols']}, nnz={m['nnz']}, "
             f"feat={report['feat']}, dense operands {report['dtype']}",
             f"{'time_ms':>10}  {'vs base':>8}  {'check':>5}  config"]
    for r in rows:
        time = f"{r['time_ms']:10.4f}" if r["time_ms"] is not None else f"{'-':>10}"
        ratio = f"{base / r['time_ms']:7.2f}x" if base and r["time_ms"] else f"{'-':>8}"
        check = {True: "ok", False: "WRONG", None: ""}[r["correct"]]
        note = f"  error: {r['error']}" if r["error"] else ""
        lines.append(f"{time}  {ratio}  {check:>5}  {json.dumps(r['config'], sort_keys=True)}{note}")
    if "vendor" in report:
        v = report["vendor"]
        lines.append(f"vendor {v['name']} ({v['method']}): {v['time_ms']:.4f} ms")
    ok = [r["time_ms"] for r in rows if r["time_ms"] is not None]
    if ok and base:
        lines.append(f"baseline {base:.4f} ms, best {min(ok):.4f} ms ({base / min(ok):.2f}x), "
                     f"{len(ok)}/{len(rows)} configs measured")
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cognate_tvm.measure", description=__doc__.split("\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--configs", default="sample:16", help="all | baseline | sample:N (default sample:16)")
    parser.add_argument("--check", action="store_true", help="compare each output with scipy")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args, status, report = cli_call(run, make_parser(), argv)
    if status:
        return status
    print(json.dumps(report, indent=1) if args.json else format_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
