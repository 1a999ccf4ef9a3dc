"""What streaming output stores (the CPU space's `stream` knob) change: each config beside its stream twin.

    python benchmarks/cpu_stream.py --results CPU_VENDOR_OUT/results.json --out OUT

On `benchmarks/cpu_vendor.py`'s matrices (the same generators, seed and sizes; `--scale` multiplies the
row counts), SpMM with N = `--feat`
on `--threads` threads, in float32 and bfloat16 B. The configs, per matrix:

- ``register rows``: plain CSR, the register-accumulator order, 256-row tiles in balanced ranges, one
  128-wide dense tile of 16 lanes, unrolled (a config that writes C once per row);
- ``register blocks``: the same with register blocks of 2 rows and 64-row tiles;
- with ``--results`` (a cpu_vendor results.json): that run's best found and tune's pick for the
  matrix, where their order allows streaming stores (their twin without it otherwise).

Each config and its twin with the other `stream` value are timed side by side (`cpu_vendor.retime`:
`--rounds` rounds, order rotated, outputs checked in the first round); stream / plain is the twin without
streaming stores' median over the one with them (> 1: streaming stores are faster). Results: results.json,
summary.md and cpu_stream.png in `--out`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from cognate_tvm import backends
from cognate_tvm.errors import InvalidConfigError
from cognate_tvm.metrics import geomean
from cognate_tvm.space.cpu import PANEL_ORDERS, CPUConfig, CPUSpace
from common import figure, setup_logging, write_outputs
from cpu_vendor import SEED, add_picks_arguments, build_matrix, retime

REGISTER_ROWS = CPUConfig(i_tile=256, k_panel=0, k_parts=1, j_tile=128, loop_order=PANEL_ORDERS[0], vector=16,
                          unroll=True, parallel=True, chunk=0, balanced=True)
FIXED = {"register rows": REGISTER_ROWS,
         "register blocks": dataclasses.replace(REGISTER_ROWS, i_tile=64, block_rows=2)}
DTYPES = ("float32", "bfloat16")


def configs_for(matrix_name: str, results: dict | None, space: CPUSpace) -> dict[str, CPUConfig]:
    """{label: config without streaming stores} of one matrix: FIXED, and the cpu_vendor run's best found
    and tune's pick whose stream twin the space holds."""
    out = dict(FIXED)
    row = next((r for r in (results or {}).get("rows", []) if r["matrix"] == matrix_name), None)
    for label, key in (("best found", "best_config"), ("tune's pick", "tune_config")):
        if row is None or not row.get(key):
            continue
        plain = dataclasses.replace(space.config_from_dict(row[key]), stream=False)
        try:
            space.check(dataclasses.replace(plain, stream=True))
        except InvalidConfigError:  # an order that stores C more than once has no stream twin
            continue
        out[label] = plain
    return out


def compare(backend, matrix, plain: CPUConfig, *, feat: int, rounds: int) -> dict:
    """Medians of `plain` and its stream twin timed side by side (`cpu_vendor.retime`: None for a config
    that failed or whose output differs from scipy's), and the configs that got None."""
    stream = dataclasses.replace(plain, stream=True)
    medians = retime(backend, matrix, [plain, stream], feat=feat, seed=0, rounds=rounds)
    ratio = None if None in medians.values() else medians[plain] / medians[stream]
    return {"plain_ms": medians[plain], "stream_ms": medians[stream], "stream_speedup": ratio,
            "errors": [c.to_json() for c, ms in medians.items() if ms is None]}


def run(args) -> dict:
    results = json.loads(args.results.read_text()) if args.results else None
    space = CPUSpace("spmm")
    measurers = {dtype: backends.create("llvm", num_threads=args.threads, dtype=dtype) for dtype in DTYPES}
    rows = []
    for name in tqdm(args.matrices, desc="matrices", unit="matrix", file=sys.stderr):
        matrix = build_matrix(name, args.scale)
        for label, plain in configs_for(name, results, space).items():
            for dtype, backend in measurers.items():
                rows.append({"matrix": name, "config_label": label, "config": plain.to_dict(), "dtype": dtype,
                             **compare(backend, matrix, plain, feat=args.feat, rounds=args.rounds)})
    return {"rows": rows, "threads": args.threads, "feat": args.feat, "rounds": args.rounds, "seed": SEED}


def summary_table(result: dict) -> list[str]:
    labels = list(dict.fromkeys(r["config_label"] for r in result["rows"]))
    lines = ["| matrix | config | dtype | plain ms | stream ms | stream / plain speed |", "|---|---|---|---|---|---|"]
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for r in result["rows"]:
        lines.append(f"| {r['matrix']} | {r['config_label']} | {r['dtype']} | {f(r['plain_ms'])} | "
                     f"{f(r['stream_ms'])} | {f(r['stream_speedup'])} |")
    lines += ["", "Geomean of stream / plain speed over the matrices:", "",
              "| config | " + " | ".join(DTYPES) + " |", "|---|" + "---|" * len(DTYPES)]
    for label in labels:
        cells = [f(geomean([r["stream_speedup"] for r in result["rows"] if r["config_label"] == label
                            and r["dtype"] == dtype and r["stream_speedup"]])) for dtype in DTYPES]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def plot(result: dict, path: Path) -> None:
    rows = [r for r in result["rows"] if r["stream_speedup"]]
    with figure(path, figsize=(8, 4)) as (_, ax):
        keys = list(dict.fromkeys((r["config_label"], r["dtype"]) for r in rows))
        matrices = list(dict.fromkeys(r["matrix"] for r in rows))
        width = 0.8 / max(1, len(keys))
        for n, key in enumerate(keys):
            got = {r["matrix"]: r["stream_speedup"] for r in rows if (r["config_label"], r["dtype"]) == key}
            ax.bar(np.arange(len(matrices)) + n * width, [got.get(m, np.nan) for m in matrices], width,
                   label=f"{key[0]}, {key[1]}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(matrices)) + 0.4 - width / 2, matrices, rotation=30, fontsize=8)
        ax.set_ylabel("stream / plain speed")
        ax.set_title(f"Streaming output stores, SpMM, {result['threads']} threads, N={result['feat']}")
        ax.legend(fontsize=6, ncol=2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_picks_arguments(parser, results_help="a cpu_vendor.py results.json: add its best and tune's picks")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    setup_logging()
    start = time.perf_counter()
    result = run(args)
    result["command"] = "python benchmarks/cpu_stream.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result["wall_seconds"] = round(time.perf_counter() - start, 1)
    text = "\n".join([f"Command: `{result['command']}`; {result['wall_seconds']:.0f} s.", "", *summary_table(result)])
    write_outputs(args.out, result, text + "\n", lambda path: plot(result, path), "cpu_stream.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
