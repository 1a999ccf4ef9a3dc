"""What the GPU space's schedules give on a recorded sweep: per matrix, the fastest plain
schedule, the fastest chunked schedule (rows cut into chunks; `GPUConfig.chunk` > 0), and the
fraction of the HBM floor the fastest config reaches.

    python benchmarks/gpu_space_report.py --data data/gpu_h200_wide_spmm data/gpu_h200_wide_sddmm \
        --out docs/results/gpu_space

The sweep times are the sweep's own (2 back-to-back launches, one sample); the careful
side-by-side timings against cuSPARSE are in the GPU run's `gpu_check.md`. Writes
`gpu_space.json`, `gpu_space.md` and `gpu_space.png` under --out.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from types import SimpleNamespace

from common import save_png, setup_logging
from gpu_check import hbm_floor_ms

from cognate_tvm.data import load_frame
from cognate_tvm.metrics import geomean

log = logging.getLogger("gpu_space_report")


def matrix_rows(frame) -> list[dict]:
    """One row per (op, matrix) of a swept dataset: best plain / chunked times and the floor."""
    frame = frame[frame.time_ms.notna()].copy()
    frame["chunked"] = frame.config.map(lambda text: json.loads(text).get("chunk", 0) > 0)
    rows = []
    for (op, name), group in frame.groupby(["op", "matrix"]):
        first = group.iloc[0]
        shape = SimpleNamespace(shape=(int(first.rows), int(first.cols)), nnz=int(first.nnz))
        plain = group[~group.chunked].time_ms.min()
        chunked = group[group.chunked].time_ms.min()
        best = min(plain, chunked)
        rows.append({"op": op, "matrix": name, "rows": int(first.rows), "nnz": int(first.nnz),
                     "configs": int(len(group)), "plain_ms": float(plain), "chunked_ms": float(chunked),
                     "chunked_gain": float(plain / chunked),
                     "floor_fraction": hbm_floor_ms(op, shape, int(first.feat)) / float(best)})
    return rows


def summary(rows: list[dict]) -> dict:
    out = {}
    for op in sorted({r["op"] for r in rows}):
        mine = [r for r in rows if r["op"] == op]
        big = [r for r in mine if r["nnz"] >= 1_000_000]
        out[op] = {"matrices": len(mine),
                   "chunked_gain_geomean": geomean([r["chunked_gain"] for r in mine]),
                   "chunked_gain_rmat": geomean([r["chunked_gain"] for r in mine if r["matrix"].startswith("rmat")]),
                   "floor_fraction_1m_geomean": geomean([r["floor_fraction"] for r in big]),
                   "floor_fraction_1m_max": max(r["floor_fraction"] for r in big)}
    return out


def markdown(rows: list[dict], totals: dict, command: str) -> str:
    lines = ["# The GPU space on a recorded sweep", "", f"`{command}`", "",
             "| op | matrices | chunked / plain best (geomean) | on R-MAT graphs | HBM floor fraction, 1M+ nnz (geomean / max) |",
             "|---|---|---|---|---|"]
    for op, s in totals.items():
        lines.append(f"| {op} | {s['matrices']} | {s['chunked_gain_geomean']:.2f}x | {s['chunked_gain_rmat']:.2f}x "
                     f"| {s['floor_fraction_1m_geomean']:.3f} / {s['floor_fraction_1m_max']:.3f} |")
    lines += ["", "| op | matrix | nnz | configs | best plain ms | best chunked ms | gain | floor fraction |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['op']} | {r['matrix']} | {r['nnz']} | {r['configs']} | {r['plain_ms']:.4f} | "
              f"{r['chunked_ms']:.4f} | {r['chunked_gain']:.2f}x | {r['floor_fraction']:.3f} |" for r in rows]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ops = sorted({r["op"] for r in rows})
    fig, axes = plt.subplots(1, len(ops), figsize=(6 * len(ops), 4), squeeze=False)
    for ax, op in zip(axes[0], ops):
        mine = [r for r in rows if r["op"] == op]
        ax.barh([r["matrix"] for r in mine], [r["chunked_gain"] for r in mine])
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_title(f"{op}: best chunked / best plain schedule")
        ax.set_xlabel("speedup (log)")
    fig.tight_layout()
    save_png(fig, path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", nargs="+", required=True, help="swept GPU dataset directories")
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args(argv)
    setup_logging()
    import pandas as pd
    frame = pd.concat([load_frame(path) for path in args.data], ignore_index=True)
    rows = matrix_rows(frame)
    totals = summary(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/gpu_space_report.py --data " + " ".join(args.data) + f" --out {args.out}"
    (out / "gpu_space.json").write_text(json.dumps({"command": command, "summary": totals, "rows": rows}, indent=1))
    (out / "gpu_space.md").write_text(markdown(rows, totals, command))
    plot(rows, out / "gpu_space.png")
    log.info("wrote %s", out)
    print(markdown(rows, totals, command)[:1200])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
