"""What the benchmarks share: their matrix sets, geomeans over runs that may have failed, quantiles,
logging and figures (saved as small palette PNGs).

The benchmarks run as scripts (``python benchmarks/<name>.py``), so this directory is on their
path; the tests put it there too (``pythonpath`` in pyproject.toml).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from cognate_tvm.data import split_by_matrix
from cognate_tvm.matrix import FAMILIES, generate
from cognate_tvm.metrics import geomean

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
SPLITS = ("train", "validation", "test")  # the parts of `split_by_matrix`, in its order


def setup_logging(level: int = logging.INFO, *, plain: bool = False) -> None:
    """Log to stderr at `level`, each line with its time, level and logger (`plain`: the message only)."""
    logging.basicConfig(level=level, format="%(message)s" if plain else LOG_FORMAT)


def eval_matrices(count: int, *, min_rows: int, max_rows: int, seed: int) -> list[tuple[str, object]]:
    """(name, matrix) of `count` generated matrices, the families in turn, each of a seeded row count in
    [min_rows, max_rows] and generated with seed `seed` + its index (a seed range no corpus uses makes them
    matrices no model was trained on)."""
    rng = np.random.default_rng(seed)
    families = sorted(FAMILIES)
    out = []
    for n in range(count):
        family = families[n % len(families)]
        rows = int(rng.integers(min_rows, max_rows + 1))
        out.append((f"{family}_{rows}_{seed + n}", generate(family, rows, seed=seed + n)))
    return out


def split_part(names: Iterable[str], part: str, *, seed: int) -> list[str]:
    """The names in `part` of the split that benchmarks/pretrain.py makes of `names` (`split_by_matrix`)."""
    return split_by_matrix(list(names), seed=seed)[SPLITS.index(part)]


def add_matrix_arguments(parser: argparse.ArgumentParser, *, matrices: int, min_rows: int, max_rows: int) -> None:
    """--matrices, --min-rows, --max-rows: the `eval_matrices` set a benchmark runs on."""
    parser.add_argument("--matrices", type=int, default=matrices)
    parser.add_argument("--min-rows", type=int, default=min_rows)
    parser.add_argument("--max-rows", type=int, default=max_rows)


def present_geomean(values: Iterable, *, empty=None):
    """`metrics.geomean` of the values that are there: None, 0, NaN and other non-positive or non-finite
    values are runs without a result and are left out; `empty` when none is left."""
    kept = [float(v) for v in values if v is not None and np.isfinite(v) and v > 0]
    return geomean(kept) if kept else empty


def budget_draw(rng: np.random.Generator, sweep_size: int, k: int) -> np.ndarray:
    """Indices of `k` random configs of a sweep of `sweep_size`, besides its baseline (index 0): random
    search with a method's budget, drawn from a sweep already timed."""
    return rng.choice(np.arange(1, sweep_size), size=min(k, sweep_size - 1), replace=False)


def quantiles(values) -> dict:
    """``n``, ``median``, ``p10`` and ``p90`` of `values` (a non-empty sequence of floats)."""
    values = np.asarray(values, dtype=float)
    return {"n": int(values.size), "median": float(np.median(values)), "p10": float(np.percentile(values, 10)),
            "p90": float(np.percentile(values, 90))}


@contextlib.contextmanager
def figure(path: Path, *, figsize: tuple[float, float], dpi: int = 120):
    """(fig, ax) of a new matplotlib figure (Agg backend: no display needed); on leaving the block it
    is laid out, saved to `path` and closed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    try:
        yield fig, ax
        fig.tight_layout()
        save_png(fig, path, dpi=dpi)
    finally:
        plt.close(fig)


PNG_COLORS = 32  # a chart's lines, bars and anti-aliased edges need no more; a quarter of the bytes of RGBA


def save_png(fig, path: Path, *, dpi: int = 120) -> None:
    """Save matplotlib figure `fig` to `path` as a palette PNG of `PNG_COLORS` colours (Pillow's
    median-cut quantizer): the committed result figures stay small without a visible change."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    buffer.seek(0)
    with Image.open(buffer) as image:
        palette = image.convert("RGB").quantize(colors=PNG_COLORS, method=Image.Quantize.MEDIANCUT)
    palette.save(path, format="PNG", optimize=True)


def write_outputs(out: Path, result: dict, summary: str, draw: Callable[[Path], None], png: str) -> None:
    """A benchmark's outputs in `out`: results.json (`result`), summary.md (`summary`) and the figure `png`
    (`draw(path)`); the summary is printed too."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=1))
    (out / "summary.md").write_text(summary)
    draw(out / png)
    print(summary, end="" if summary.endswith("\n") else "\n")
