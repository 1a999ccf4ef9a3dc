"""Measure configurations of a sparse op on one matrix and one target.

    python -m cognate_tvm.measure {spmm,sddmm} --target llvm --matrix PATH [--feat N]
        [--configs all|baseline|sample:N] [--seed S] [--check] [--vendor] [--json]
        [--arch sm_80|sm_90] [--compile-only]

Without --matrix, the bundled example matrix is used. --json prints one JSON
object (see `build_report`); otherwise a table sorted by time.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Sequence

import scipy.sparse as sp
from tqdm import tqdm

from . import backends, space
from .errors import CognateError
from .matrix import load_matrix
from .ops import OPS, Op, get_op

EXAMPLE_MATRIX = Path(__file__).resolve().parent / "sample_matrices" / "example_powerlaw.mtx"
BATCH = 8  # configs per backend call: small enough for a live progress bar

log = logging.getLogger(__name__)


def parse_configs(spec: str, platform_space: space.Space, seed: int) -> list[space.Config]:
    """'all', 'baseline' or 'sample:N' -> configs (the baseline always comes first)."""
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


def backend_options(args: argparse.Namespace) -> dict:
    """Target options given on the command line (a target rejects those it does not take)."""
    options = {}
    if args.arch is not None:
        options["arch"] = args.arch
    if args.compile_only:
        options["compile_only"] = True
    return options


def measure_configs(backend: backends.Backend, op: Op, matrix: sp.csr_matrix,
                    configs: Sequence[space.Config], feat: int, *, check: bool = False, seed: int = 0,
                    progress: bool = False, desc: str = "measure") -> list[backends.MeasureResult]:
    """Measure `configs` in batches of `BATCH` (so a progress bar stays live); failures are logged."""
    results: list[backends.MeasureResult] = []
    with tqdm(total=len(configs), desc=desc, unit="config", file=sys.stderr, disable=not progress) as bar:
        for start in range(0, len(configs), BATCH):
            batch = list(configs[start:start + BATCH])
            results += backend.measure(op, matrix, batch, feat, check=check, seed=seed)
            bar.update(len(batch))
    for r in results:
        if not r.ok:
            log.info("config %s failed: %s", r.config.to_json(), r.error)
    return results


def create_backend(args: argparse.Namespace) -> backends.Backend:
    """The --target's backend with the options given on the command line."""
    options = backend_options(args)
    try:
        return backends.create(args.target, **options)
    except TypeError as exc:
        raise ValueError(f"target {args.target!r} does not take option(s) {sorted(options)}: {exc}") from None


def run(args: argparse.Namespace) -> dict:
    op = get_op(args.op)
    if args.feat < 1:
        raise ValueError(f"--feat must be >= 1, got {args.feat}")
    matrix = load_matrix(args.matrix)
    backend = create_backend(args)
    platform_space = space.create(backend.platform, op.name)
    configs = parse_configs(args.configs, platform_space, args.seed)
    results = measure_configs(backend, op, matrix, configs, args.feat, check=args.check, seed=args.seed,
                              progress=not args.quiet, desc=f"{op.name} on {args.target}")
    vendor = vendor_report(backend, op, matrix, args.feat, args.seed) if args.vendor else None
    return build_report(args, matrix, results, vendor)


def vendor_report(backend, op, matrix, feat: int, seed: int) -> dict:
    """{"name", "method", "time_ms"} of the target's vendor library on `matrix`."""
    library = backend.vendor()
    if library is None:
        raise ValueError(f"no vendor library is available for target {backend.target!r} here")
    return {"name": library.name, "method": library.method(op),
            "time_ms": library.time_ms(op, matrix, feat, seed=seed)}


def build_report(args, matrix, results, vendor) -> dict:
    report = {
        "op": args.op, "target": args.target, "feat": args.feat,
        "matrix": {"path": str(args.matrix), "rows": matrix.shape[0], "cols": matrix.shape[1],
                   "nnz": int(matrix.nnz)},
        "baseline": {"config": results[0].config.to_dict(), "time_ms": results[0].time_ms},
        "results": [r.to_dict() for r in results],
    }
    if vendor is not None:
        report["vendor"] = vendor
    return report


def format_table(report: dict) -> str:
    base = report["baseline"]["time_ms"]
    rows = sorted(report["results"], key=lambda r: (r["time_ms"] is None, r["time_ms"] or 0.0))
    m = report["matrix"]
    lines = [f"{report['op']} on {report['target']}: {m['rows']}x{m['cols']}, nnz={m['nnz']}, "
             f"feat={report['feat']}",
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


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by the measure and tune CLIs: what to run, where, and how to report."""
    parser.add_argument("op", choices=sorted(OPS))
    parser.add_argument("--target", default="llvm", choices=backends.TARGETS)
    parser.add_argument("--matrix", type=Path, default=EXAMPLE_MATRIX,
                        help=".mtx, .npz or edge list (default: the bundled example)")
    parser.add_argument("--feat", type=int, default=128, help="dense width N (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the config sample and the dense inputs")
    parser.add_argument("--vendor", action="store_true", help="also time the vendor library")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--arch", default=None, help="GPU architecture for --target cuda (sm_80, sm_90)")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cognate_tvm.measure", description=__doc__.split("\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--configs", default="sample:16", help="all | baseline | sample:N (default sample:16)")
    parser.add_argument("--check", action="store_true", help="compare each output with scipy")
    parser.add_argument("--compile-only", action="store_true",
                        help="--target cuda: build and compile to PTX, do not run")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        report = run(args)
    except (CognateError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1) if args.json else format_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
