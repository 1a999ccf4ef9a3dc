"""Where the matrices of several corpora fall in a shipped model's matrix embedding.

A model ranks a matrix by its embedding (the sparse-convolution featurizer's output); a matrix
whose embedding lies far from every training matrix is one the model has to extrapolate to. Each
corpus (`--corpus LABEL=SPEC`, repeatable, SPEC as `collect --corpus` takes it:
``synthetic:N:SEED:MIN-MAX``, ``realistic:N:SEED:MIN-MAX`` or a folder of matrix files) is built,
matrices over `--max-rows` rows left out, and every matrix embedded by `--model`'s featurizer.
The first corpus is the reference (what the model was trained on).

Reported per corpus, for each of its matrices, the distance to its nearest reference matrix (a
reference matrix itself left out), in units of the reference's median nearest-neighbour distance:
about 1 means as close to the training matrices as they are to each other, much more means outside
them. The plot shows every matrix on the reference's first two principal components.

    python benchmarks/corpus_coverage.py --model spmm-cpu --max-rows 100000 \\
        --corpus generated=synthetic:300:2026:1000-1000000 --corpus realistic=realistic:90:2026:2000-30000 \\
        --corpus "realistic, larger=realistic:6:77:30000-120000" --out docs/results/realistic/coverage

Outputs in --out: ``coverage.json`` (per matrix: corpus, 2-D coordinates, nearest reference matrix
and distance), ``summary.md`` and ``coverage.png``.
"""
from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from cognate_tvm.matrix.corpus import load_corpus
from cognate_tvm.model.pretrained import load_pretrained
from common import figure, quantiles, setup_logging

log = logging.getLogger("corpus_coverage")


def parse_corpus(text: str) -> tuple[str, str]:
    label, sep, spec = text.partition("=")
    if not sep or not label or not spec:
        raise argparse.ArgumentTypeError(f"--corpus wants LABEL=SPEC, got {text!r}")
    return label, spec


def embed_corpus(model, spec: str, *, max_rows: int, desc: str) -> dict[str, np.ndarray]:
    """{matrix name: embedding} of the corpus's matrices of at most `max_rows` rows."""
    out = {}
    for entry in tqdm(load_corpus(spec), desc=desc):
        if getattr(entry, "rows", 0) > max_rows:  # generated entries know their size before building
            continue
        matrix = entry.build()
        if matrix.shape[0] <= max_rows:
            out[entry.name] = model.embedding(matrix).reshape(-1).numpy().astype(np.float64)
            model.clear_embedding_cache()
    return out


def nearest(points: np.ndarray, reference: np.ndarray, *, exclude_self: bool) -> tuple[np.ndarray, np.ndarray]:
    """(index of each point's nearest reference point, the distance to it)."""
    distances = np.linalg.norm(points[:, None, :] - reference[None, :, :], axis=2)
    if exclude_self:
        np.fill_diagonal(distances, np.inf)
    index = distances.argmin(axis=1)
    return index, distances[np.arange(len(points)), index]


def principal_axes(reference: np.ndarray, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(mean, the first `k` principal directions as rows) of the reference embeddings."""
    mean = reference.mean(axis=0)
    _, _, vt = np.linalg.svd(reference - mean, full_matrices=False)
    return mean, vt[:k]


def coverage(embeddings: dict[str, dict[str, np.ndarray]]) -> list[dict]:
    """One row per matrix: corpus, name, 2-D coordinates, nearest reference matrix and the relative
    distance to it (the first corpus is the reference)."""
    labels = list(embeddings)
    ref_names = list(embeddings[labels[0]])
    reference = np.stack([embeddings[labels[0]][n] for n in ref_names])
    _, ref_nn = nearest(reference, reference, exclude_self=True)
    unit = float(np.median(ref_nn))
    mean, axes = principal_axes(reference)
    rows = []
    for n, label in enumerate(labels):
        names = list(embeddings[label])
        points = np.stack([embeddings[label][m] for m in names])
        index, dist = nearest(points, reference, exclude_self=n == 0)
        xy = (points - mean) @ axes.T
        rows += [{"corpus": label, "matrix": m, "x": float(x), "y": float(y), "nearest": ref_names[i],
                  "distance": float(d / unit)} for m, (x, y), i, d in zip(names, xy, index, dist)]
    return rows


def summarize(rows: list[dict], labels: list[str]) -> dict:
    return {label: quantiles([r["distance"] for r in rows if r["corpus"] == label]) for label in labels}


def markdown(summary: dict, args, command: str) -> str:
    lines = [f"# Corpus coverage in the embedding of `{args.model}`", "", f"    {command}", "",
             "Distance of each matrix to its nearest matrix of the reference corpus (the first), in units of "
             "the reference's median nearest-neighbour distance (reference matrices: itself left out).", "",
             "| corpus | matrices | median | 10% | 90% |", "|---|---|---|---|---|"]
    for label, q in summary.items():
        lines.append(f"| {label} | {q['n']} | {q['median']:.2f} | {q['p10']:.2f} | {q['p90']:.2f} |")
    return "\n".join(lines + ["", "![coverage](coverage.png)", ""])


def plot(rows: list[dict], labels: list[str], path: Path) -> None:
    with figure(path, figsize=(7, 5.5)) as (_, ax):
        markers = "o^sDvP*X"
        for n, label in enumerate(labels):
            pts = [(r["x"], r["y"]) for r in rows if r["corpus"] == label]
            ax.scatter(*zip(*pts), s=14 if n == 0 else 28, marker=markers[n % len(markers)],
                       alpha=0.5 if n == 0 else 0.85, label=f"{label} ({len(pts)})")
        ax.set_xlabel("principal component 1 (of the reference)")
        ax.set_ylabel("principal component 2")
        ax.legend(fontsize=8)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="spmm-cpu", help="shipped model OP-PLATFORM whose featurizer embeds")
    parser.add_argument("--corpus", type=parse_corpus, action="append", required=True,
                        help="LABEL=SPEC (repeatable); the first is the reference")
    parser.add_argument("--max-rows", type=int, default=100_000, help="leave out matrices with more rows")
    parser.add_argument("--pretrained-dir", type=Path, default=None, help="where the shipped models are")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    setup_logging()
    op, _, platform = args.model.partition("-")
    model = load_pretrained(op, platform, root=args.pretrained_dir)
    embeddings = {label: embed_corpus(model, spec, max_rows=args.max_rows, desc=label) for label, spec in args.corpus}
    reference = args.corpus[0][0]
    if len(embeddings[reference]) < 2:
        raise SystemExit(f"error: the reference corpus {reference!r} has fewer than 2 matrices of at most "
                         f"{args.max_rows} rows")
    for label in [label for label, found in embeddings.items() if not found]:
        log.warning("corpus %r has no matrix of at most %d rows: left out", label, args.max_rows)
        del embeddings[label]
    labels = list(embeddings)
    rows = coverage(embeddings)
    summary = summarize(rows, labels)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "coverage.json").write_text(json.dumps({"model": args.model, "summary": summary, "rows": rows}))
    command = "python benchmarks/corpus_coverage.py " + " ".join(map(shlex.quote, sys.argv[1:] if argv is None else argv))
    (args.out / "summary.md").write_text(markdown(summary, args, command))
    plot(rows, labels, args.out / "coverage.png")
    print(markdown(summary, args, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
