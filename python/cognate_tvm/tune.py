"""Tune a sparse op on one matrix and one target: pick its fastest correct configuration.

    python -m cognate_tvm.tune {spmm,sddmm} [--target llvm|spade|cuda] [--matrix PATH] [--feat N]
        [--search adaptive|oneshot] [--budget N] [--top-k K] [--fixed F] [--diversity D] [--model PATH] [--pretrained-dir DIR] [--save-model PATH]
        [--oracle] [--oracle-sample N] [--out DIR] [--compile-only] [--seed S] [--vendor]
        [--json] [--quiet] [--arch sm_80|sm_90] [--rpc-tracker HOST:PORT --rpc-key KEY]

The shipped cost model of the op and the target's platform ranks the space
(on the CPU, the configs of the kernel thread count: serial on one thread,
parallel on more; a platform without a model uses the CPU model zero-shot,
with a note); the
baseline config and 7 more are measured, by default (``--search adaptive``) in
rounds of 3, 2 and 2: after each round a copy of the model is fine-tuned on
this matrix's measurements and ranks the space again, and each later round
measures its best config and one that varies a knob no measured config has
varied yet; ``--search oneshot`` measures the first ranking's top-k (5) in one
batch (``--top-k K`` sets how many are measured after the baseline). The first
picks are ``--fixed F`` (default 1) of the model's best fixed configs (those
that did best over its training matrices, whatever the matrix) and ranked ones
that differ pairwise in at least ``--diversity D`` knobs (by default the
platform's: 2 on SPADE, 1, the plain ranking, elsewhere); the fastest ones are timed again side by
side with the baseline and the one with the lowest median whose output matches
scipy's is kept if it is faster than the baseline (`cognate_tvm.tuning.tune`). ``--budget N`` first measures N
sampled configs of this matrix and fine-tunes the model on them, from its
pre-trained weights. ``--model PATH`` uses a saved model instead of the
shipped one; ``--save-model`` writes the (fine-tuned) model. ``--oracle`` also
sweeps the space (the whole space when it has at most
`tuning.ORACLE_WHOLE_SPACE` configs, else a seeded sample of ``--oracle-sample``
configs) and reports how close the choice is. ``--out DIR`` writes the chosen
kernel, its config and the report. ``--target cuda --compile-only --out DIR``
(a machine without a GPU) ranks and writes the top-k kernels' CUDA sources and
PTX, with no timing. ``--rpc-tracker HOST:PORT --rpc-key KEY`` (llvm, cuda)
measures on a device behind a TVM RPC tracker, with the kernels built here.

Every time in the output was measured in this run. Without --matrix, the
bundled example matrix is used. --json prints one JSON object (see
`tuning.tune_report`); otherwise a short summary. Exit status: 0 tuned, 1 no
config could be measured, 2 bad input (or a target that cannot run here).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Sequence

from . import tuning
from .model.loading import load_model
from .tuning import search
from .cli import add_common_arguments, cli_call, flag, make_backend
from .errors import DeviceUnavailableError
from .matrix import load_matrix
from .ops import get_op

log = logging.getLogger(__name__)

DEFAULT_BUDGET = tuning.DEFAULT_BUDGET
DEFAULT_TOP_K = tuning.DEFAULT_TOP_K
DEFAULT_FIXED = tuning.DEFAULT_FIXED


def _check_args(args: argparse.Namespace) -> None:
    """`tuning.check_tune_options` in flags, before the matrix is read; and what --compile-only excludes."""
    tuning.check_tune_options(feat=args.feat, top_k=args.top_k, budget=args.budget, fixed=args.fixed,
                              diversity=args.diversity, oracle_sample=args.oracle_sample, name=flag)
    if args.compile_only:
        if args.out is None:
            raise ValueError("--compile-only writes the top-k kernels to a directory: give --out DIR")
        for option, value in (("--budget", args.budget), ("--oracle", args.oracle), ("--vendor", args.vendor),
                            ("--save-model", args.save_model)):
            if value:
                raise ValueError(f"{option} needs timed runs; it cannot be used with --compile-only")


def run(args: argparse.Namespace) -> tuple[dict, tuning.TuneResult | None]:
    """Tune as the command line says; returns the report and the raw result (None with --compile-only)."""
    op = get_op(args.op)
    _check_args(args)
    matrix = load_matrix(args.matrix)
    model = load_model(args.model) if args.model is not None else None
    source = str(args.model) if args.model is not None else None
    backend = make_backend(args)
    if args.compile_only:
        report = tuning.compile_top_k(op, matrix, backend=backend, feat=args.feat, directory=args.out, model=model,
                                      model_source=source, pretrained_root=args.pretrained_dir,
                                      top_k=DEFAULT_TOP_K if args.top_k is None else args.top_k)
        return report, None
    options = tuning.TuneOptions(model=model, model_source=source, pretrained_root=args.pretrained_dir,
                                 budget=args.budget, top_k=args.top_k, fixed=args.fixed, seed=args.seed,
                                 diversity=args.diversity, search=args.search, oracle=args.oracle,
                                 oracle_sample=args.oracle_sample, name=Path(args.matrix).stem,
                                 progress=not args.quiet)
    tuned = tuning.tune(op, matrix, backend=backend, feat=args.feat, options=options)
    if args.save_model is not None:
        tuned.model.save(args.save_model)
    vendor = tuning.vendor_report(backend, op, matrix, args.feat, args.seed) if args.vendor else None
    report = tuning.tune_report(tuned, op=op.name, target=args.target, feat=args.feat, matrix_path=args.matrix,
                                matrix=matrix, budget=args.budget, top_k=args.top_k, fixed=args.fixed, vendor=vendor,
                                saved_model=None if args.save_model is None else str(args.save_model))
    report["dtype"] = args.dtype
    if args.out is not None:
        tuning.write_outputs(args.out, backend, op, tuned, args.feat, report)
    return report, tuned


def _timing(report: dict, role: str) -> str:
    """The time of the `role` ("best" or "baseline") config as the choice saw it: the side-by-side median
    (with the output check's timing, where the pair was confirmed) where it was re-timed. One timing can
    sit far from it on a busy machine, and printed alone it would contradict the speedup line."""
    measured, confirmed = report[role], report["confirmed"]
    if confirmed is not None:
        median = confirmed[f"{role}_ms"]
    else:
        median = next((f["median_ms"] for f in report["finalists"] if f["config"] == measured["config"]), None)
    if median is None:
        return f"{measured['time_ms']:.4f} ms"
    return f"{median:.4f} ms (median side by side; first timing {measured['time_ms']:.4f} ms)"


def format_summary(report: dict) -> str:
    """A few readable lines: the chosen config, its time, the baseline's, the speedups."""
    m, best, base = report["matrix"], report["best"], report["baseline"]
    how = f"ranked by the model {report['model']}"
    if report.get("budget"):
        how += f", fine-tuned on {report['budget']} sampled configs"
    rounds = report.get("rounds") or []
    if len(rounds) > 1:
        how += f"; measured in rounds of {', '.join(map(str, rounds))}"
        if report.get("search") == "adaptive" and report.get("mode") == "finetuned":
            how += ", the model fine-tuned on this matrix's measurements after each"
    lines = [f"{report['op']} on {report['target']}: {m['rows']}x{m['cols']}, nnz={m['nnz']}, "
             f"feat={report['feat']}{'' if report.get('dtype', 'float32') == 'float32' else ', bfloat16 operands'} "
             f"({how})"]
    if best is None:
        lines.append("no configuration could be measured")
    else:
        rank = best["predicted_rank"]
        fixed = any(r["best_fixed"] and r["config"] == best["config"] for r in report["measured"])
        lines.append(f"best      {_timing(report, 'best')}  {json.dumps(best['config'], sort_keys=True)}"
                     + (f"  (predicted rank {rank})" if rank is not None else "")
                     + ("  (a best fixed config of the model's training data)" if fixed else ""))
    if base["time_ms"] is not None:
        lines.append(f"baseline  {_timing(report, 'baseline')}  {json.dumps(base['config'], sort_keys=True)}")
    else:
        lines.append(f"baseline  failed: {base['error']}")
    if best is not None and report["chosen"] != best["config"]:
        lines.append("chosen: the baseline (re-timed side by side, the best measured config was no faster)")
    if report["confirmed"] is not None:
        c = report["confirmed"]
        how = "medians of side-by-side runs" if report["finalists"] else "re-timed side by side"
        lines.append(f"speedup over the baseline: {c['speedup_vs_baseline']:.2f}x ({how}: "
                     f"baseline {c['baseline_ms']:.4f} ms, best {c['best_ms']:.4f} ms)")
    elif best is not None and best["speedup_vs_baseline"] is not None:
        lines.append(f"speedup over the baseline: {best['speedup_vs_baseline']:.2f}x")
    if best is not None:
        check = {True: "matches scipy", None: "not checked (the target computes no outputs)"}[best["correct"]]
        lines.append(f"output of the best config: {check}")
    if "oracle" in report:
        o = report["oracle"]
        swept = "the whole space" if o["whole_space"] else f"{o['configs_measured']} of {o['space_size']} configs"
        lines.append(f"oracle ({swept}): {o['time_ms']:.4f} ms, the chosen config {o['chosen_ms']:.4f} ms in the "
                     f"same sweep; oracle / chosen: {report['oracle_fraction']:.3f}"
                     if report["oracle_fraction"] else f"oracle ({swept}): {o['time_ms']:.4f} ms")
    if "vendor" in report:
        v = report["vendor"]
        speed = f", speedup over it: {v['speedup_vs_vendor']:.2f}x" if v["speedup_vs_vendor"] else ""
        lines.append(f"vendor {v['name']} ({v['method']}): {v['time_ms']:.4f} ms{speed}")
    lines.append(f"target measurements: {report['samples_measured']} ({report['failed']} failed)")
    for r in report["measured"]:
        if r["error"]:
            lines.append(f"  failed {json.dumps(r['config'], sort_keys=True)}: {r['error']}")
    lines += [f"note: {n}" for n in report["notes"]]
    if report["saved_model"]:
        lines.append(f"model saved to {report['saved_model']}")
    if "out" in report:
        lines.append(f"kernel, config and report written to {report['out']['directory']}")
    return "\n".join(lines)


def format_compile_only(report: dict) -> str:
    lines = [f"{report['op']} on {report['target']} (compile only, ranked by the model {report['model']}): "
             f"top-{report['top_k']} kernels written to {report['out']['directory']}"]
    for k in report["kernels"]:
        files = ", ".join(str(v) for key, v in k["files"].items() if key in ("source", "ptx") and v)
        state = f"error: {k['error']}" if k["error"] else files
        lines.append(f"  {k['predicted_rank']}. {json.dumps(k['config'], sort_keys=True)}  {state}")
    lines += [f"note: {n}" for n in report["notes"]]
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cognate_tvm.tune", description=__doc__.split("\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET,
                        help="measure this many sampled configs first and fine-tune the model on them "
                             f"(default {DEFAULT_BUDGET}: rank with the model as shipped)")
    parser.add_argument("--search", choices=tuple(search.STRATEGIES), default=search.DEFAULT_STRATEGY,
                        help="adaptive (default): rounds of measure, fine-tune the model on this matrix's "
                             "measurements, re-rank, with one config per round exploring a knob not varied yet; "
                             "oneshot: the model ranks once and its top-k are measured in one batch")
    parser.add_argument("--top-k", type=int, default=None,
                        help="configs measured after the baseline (and the --budget sample) (default: "
                             f"{search.Adaptive().measurements} with --search adaptive, {DEFAULT_TOP_K} with oneshot "
                             "and --compile-only)")
    parser.add_argument("--fixed", type=int, default=DEFAULT_FIXED,
                        help="how many of the top-k are the model's best fixed configs, the ones that did best "
                             f"over its training matrices (default {DEFAULT_FIXED}; 0: the ranking only)")
    parser.add_argument("--diversity", type=int, default=None,
                        help="the configs measured from the ranking differ pairwise in at least this many knobs "
                             "(default: the platform's, 2 on SPADE, 1 elsewhere; 1: the plain top-k)")
    parser.add_argument("--model", type=Path, default=None,
                        help="a saved cost model to use instead of the shipped one")
    parser.add_argument("--pretrained-dir", type=Path, default=None,
                        help="directory of shipped models <op>-<platform>/ (default: the package's)")
    parser.add_argument("--save-model", type=Path, default=None, help="write the (fine-tuned) model here")
    parser.add_argument("--oracle", action="store_true",
                        help="also sweep the space and report the chosen config's time / the best one's")
    parser.add_argument("--oracle-sample", type=int, default=tuning.ORACLE_SAMPLE,
                        help=f"--oracle on a space of more than {tuning.ORACLE_WHOLE_SPACE} configs (llvm): "
                             f"sweep a seeded sample of this many (default {tuning.ORACLE_SAMPLE})")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the chosen kernel, its config.json and report.json here")
    return parser


def _hint(exc: Exception, args) -> str | None:
    if isinstance(exc, DeviceUnavailableError):
        return (f"without a GPU, `--target {args.target} --compile-only --out DIR` ranks the space and writes "
                f"the top-k kernels' CUDA sources and PTX")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 tuned, 1 no config could be measured, 2 bad input or a target that cannot run here."""
    args, status, result = cli_call(run, make_parser(), argv, hint=_hint)
    if status:
        return status
    report, tuned = result
    if tuned is None:
        print(json.dumps(report, indent=1) if args.json else format_compile_only(report))
        return 0
    print(json.dumps(report, indent=1) if args.json else format_summary(report))
    if report["best"] is None:
        first = report["measured"][0]["error"] if report["measured"] else "nothing was measured"
        print(f"error: no configuration could be measured (first error: {first})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
