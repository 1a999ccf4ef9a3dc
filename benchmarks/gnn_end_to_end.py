"""GCN training and inference with tuned kernels against torch.sparse, end to end.

A 2-layer GCN (hidden width N, `--classes` outputs) on one graph, the same
weights and the same work on every side; only the propagation ``A @ H`` differs:

- ``tuned``: :class:`cognate_tvm.torch.SparseMatrix`, kernels chosen by `tune`
  with the shipped model (its default budget) for each dense width;
- ``baseline-config``: the same kernels with the space's baseline config (no tuning);
- ``random-search``: the fastest correct of as many random candidate configs as
  `tune` measured at that width (same number of measurements);
- ``torch.sparse``: ``torch.sparse.mm`` on a CSR tensor, torch's own autograd;
- ``torch.sparse+At``: the same with Aᵀ precomputed as CSR and used in backward
  (a custom autograd function), the stronger torch baseline.

Per N it reports the time of a training epoch (forward, backward, Adam step) and
of an inference pass (eval, no grad), medians over rounds that rotate the order
of the sides; tuning time separately, and the number of epochs after which
tuning has paid for itself against each torch side (break-even). The choices are
tuned into a fresh cache directory unless --cache-dir is given.

    python benchmarks/gnn_end_to_end.py --threads 2 --nodes 131072 --widths 64 128 256
    python benchmarks/gnn_end_to_end.py --device cuda --nodes 131072 --widths 64 128 256

Writes ``gnn_end_to_end.json``, ``.md`` and ``.png`` under --out.
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import platform as _platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import figure

log = logging.getLogger("gnn_end_to_end")
SIDES = ("tuned", "baseline-config", "random-search", "torch.sparse", "torch.sparse+At")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="rmat", choices=("rmat", "community"))
    parser.add_argument("--nodes", type=int, default=131072)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256], help="hidden widths N")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs (and passes) per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-dir", default=None, help="reuse tuned choices from here (default: fresh)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="docs/results/gnn_end_to_end")
    return parser.parse_args(argv)


class TransposedCSR:
    """torch.sparse with Aᵀ precomputed: ``self @ H`` whose backward is ``Aᵀ @ grad`` (no per-call transpose)."""

    def __init__(self, a, at):
        import torch

        class _MM(torch.autograd.Function):
            @staticmethod
            def forward(ctx, dense):
                return torch.sparse.mm(a, dense)

            @staticmethod
            def backward(ctx, grad):
                return torch.sparse.mm(at, grad.contiguous())

        self._mm = _MM

    def __matmul__(self, dense):
        return self._mm.apply(dense)


def torch_csr(matrix, device):
    import torch

    return torch.sparse_csr_tensor(torch.from_numpy(matrix.indptr.astype(np.int64)),
                                   torch.from_numpy(matrix.indices.astype(np.int64)),
                                   torch.from_numpy(matrix.data.astype(np.float32)), size=matrix.shape,
                                   device=device)


def random_search(adjacency, kernels, widths, measured: dict, seed: int, root: Path) -> None:
    """Store, under `root`, the fastest correct of `measured[w]` random candidates for each width `w`."""
    from cognate_tvm.backends.base import pick_checked
    from cognate_tvm.torch.cache import Choice, ChoiceStore

    platform = kernels.platform
    store, space = ChoiceStore(root), platform.space("spmm")
    candidates = space.candidates(platform.backend.kernel_threads())
    rng = np.random.default_rng(seed)
    for width in widths:
        picks = [candidates[i] for i in rng.choice(len(candidates), size=measured[width], replace=False)]
        results = platform.backend.measure("spmm", adjacency.pattern.csr, picks, width, seed=seed)
        best = pick_checked(platform.backend, "spmm", adjacency.pattern.csr, results, width, seed=seed).best
        config = best.config if best is not None else space.baseline()
        store.save(kernels.key("spmm", adjacency.pattern, width), Choice(config, 0.0, len(picks), None, None, "tuned"))


class Timer:
    def __init__(self, device):
        import torch

        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def __call__(self, fn, count: int) -> float:
        """Mean ms of `count` calls of `fn` after one warm-up call."""
        fn()
        self.sync()
        start = time.perf_counter()
        for _ in range(count):
            fn()
        self.sync()
        return (time.perf_counter() - start) * 1e3 / count


def make_sides(graph, device, args, root: Path) -> tuple[dict, dict]:
    """{side: adjacency operand} and the tuning record of the tuned side."""
    from cognate_tvm.torch import SparseMatrix, TunedKernels

    options = {"num_threads": args.threads if device.type == "cpu" else None}
    tuned_kernels = TunedKernels(device, cache_dir=args.cache_dir or root / "tuned", **options)
    tuned = SparseMatrix.from_scipy(graph.adjacency, kernels=tuned_kernels)
    widths = sorted(set(args.widths) | {args.classes})
    start = time.perf_counter()
    log.info("tuning the SpMM at widths %s", widths)
    tuned.prepare(widths)
    ready_s = time.perf_counter() - start
    log.info("kernels ready in %.1f s; random search with as many measurements", ready_s)
    record = {h["feat"]: h for h in tuned_kernels.history if h["op"] == "spmm"}
    random_root = root / "random"
    random_search(tuned, tuned_kernels, widths, {w: max(1, record[w]["measured"]) for w in widths}, args.seed,
                  random_root)
    random_kernels = TunedKernels(device, cache_dir=random_root, **options)
    base_kernels = TunedKernels(device, cache_dir=root / "baseline", tune=False, **options)
    a = torch_csr(graph.adjacency, device)
    at = torch_csr(graph.adjacency.T.tocsr(), device)
    sides = {"tuned": tuned,
             "baseline-config": SparseMatrix.from_scipy(graph.adjacency, kernels=base_kernels),
             "random-search": SparseMatrix.from_scipy(graph.adjacency, kernels=random_kernels),
             "torch.sparse": a, "torch.sparse+At": TransposedCSR(a, at)}
    for side in ("baseline-config", "random-search"):
        sides[side].prepare(widths)
    return sides, {"ready_s": ready_s, "per_width": record}


def time_width(graph, sides, width: int, device, args) -> dict:
    """Epoch and inference times of every side at hidden width `width`, and their first losses."""
    import torch

    from cognate_tvm.torch.nn import GCN

    torch.manual_seed(args.seed)
    reference = GCN(args.features, width, graph.classes).to(device)
    x, labels = graph.features.to(device), graph.labels.to(device)
    train = graph.train.to(device)
    models = {s: copy.deepcopy(reference) for s in sides}
    optims = {s: torch.optim.Adam(models[s].parameters(), lr=0.01) for s in sides}
    losses = {}
    for side, adjacency in sides.items():  # one eval-mode loss per side on the same weights: all must agree
        models[side].eval()
        with torch.no_grad():
            losses[side] = float(torch.nn.functional.cross_entropy(models[side](x, adjacency)[train], labels[train]))

    def epoch(side):
        model, adjacency = models[side], sides[side]
        model.train()
        optims[side].zero_grad()
        torch.nn.functional.cross_entropy(model(x, adjacency)[train], labels[train]).backward()
        optims[side].step()

    def infer(side):
        models[side].eval()
        with torch.no_grad():
            models[side](x, sides[side])

    timer, names = Timer(device), list(sides)
    epoch_ms = {s: [] for s in names}
    infer_ms = {s: [] for s in names}
    for r in range(args.rounds):
        log.info("N=%d: round %d of %d", width, r + 1, args.rounds)
        for side in names[r % len(names):] + names[:r % len(names)]:
            epoch_ms[side].append(timer(lambda: epoch(side), args.epochs))
            infer_ms[side].append(timer(lambda: infer(side), args.epochs))
    return {"epoch_ms": {s: float(np.median(v)) for s, v in epoch_ms.items()},
            "inference_ms": {s: float(np.median(v)) for s, v in infer_ms.items()},
            "epoch_rounds_ms": epoch_ms, "first_loss": losses}


def summarize(width: int, timing: dict, tuning: dict, classes: int) -> dict:
    per = tuning["per_width"]
    tuning_s = sum(per[w]["tuning_s"] for w in {width, classes})  # as measured when tuned (maybe an earlier run)
    epoch = timing["epoch_ms"]
    row = {"width": width, "tuning_s": tuning_s, "configs": {w: per[w]["config"] for w in (width, classes)},
           "measured": {w: per[w]["measured"] for w in (width, classes)},
           "tuned_in_this_run": all(per[w]["source"] == "tuned" for w in (width, classes)), **timing}
    for side in ("torch.sparse", "torch.sparse+At"):
        saved_ms = epoch[side] - epoch["tuned"]
        row[f"speedup_vs_{side}"] = epoch[side] / epoch["tuned"]
        row[f"inference_speedup_vs_{side}"] = timing["inference_ms"][side] / timing["inference_ms"]["tuned"]
        row[f"break_even_epochs_vs_{side}"] = tuning_s * 1e3 / saved_ms if saved_ms > 0 else None
    return row


def write_report(result: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gnn_end_to_end.json").write_text(json.dumps(result, indent=1))
    g = result["graph"]
    lines = [f"# GCN epoch: tuned kernels vs torch.sparse ({result['device']})", "",
             f"`{result['command']}`", "",
             f"Graph {g['name']}: {g['nodes']} nodes, {g['nnz']} nonzeros (GCN-normalised, self-loops); "
             f"{result['features']} input features, {result['classes']} classes; {result['threads']} threads; "
             f"medians of {result['rounds']} rounds x {result['epochs']} epochs, sides in rotated order. "
             f"{result['machine']}", "",
             "| N | side | epoch ms | inference ms |", "|---|---|---|---|"]
    for row in result["rows"]:
        for side in SIDES:
            lines.append(f"| {row['width']} | {side} | {row['epoch_ms'][side]:.1f} | {row['inference_ms'][side]:.1f} |")
    lines += ["", "| N | tuning s | epoch speedup vs torch.sparse | vs torch.sparse+At | inference speedup vs "
              "torch.sparse | break-even epochs vs torch.sparse | vs torch.sparse+At |", "|---|---|---|---|---|---|---|"]
    fmt = lambda v: "never" if v is None else f"{v:.1f}"  # noqa: E731
    for row in result["rows"]:
        lines.append(f"| {row['width']} | {row['tuning_s']:.1f} | {row['speedup_vs_torch.sparse']:.2f}x | "
                     f"{row['speedup_vs_torch.sparse+At']:.2f}x | {row['inference_speedup_vs_torch.sparse']:.2f}x | "
                     f"{fmt(row['break_even_epochs_vs_torch.sparse'])} | {fmt(row['break_even_epochs_vs_torch.sparse+At'])} |")
    (out / "gnn_end_to_end.md").write_text("\n".join(lines) + "\n")
    plot(result, out / "gnn_end_to_end.png")


def plot(result: dict, path: Path) -> None:
    rows = result["rows"]
    step = 0.8 / len(SIDES)
    with figure(path, figsize=(7, 3.5)) as (_, ax):
        for n, side in enumerate(SIDES):
            ax.bar([i + n * step for i in range(len(rows))], [r["epoch_ms"][side] for r in rows], step, label=side)
        ax.set_xticks([i + 0.4 - step / 2 for i in range(len(rows))], [f"N={r['width']}" for r in rows])
        ax.set_ylabel("ms per training epoch")
        ax.set_title(f"GCN on {result['graph']['name']} ({result['device']}, {result['threads']} threads)")
        ax.legend(fontsize=7)


def start(threads: int):
    """TVM's and torch's thread counts and the log set up; returns the load average before the run."""
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    import torch

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    torch.set_num_threads(threads)
    return os.getloadavg()


def machine(load_before, extra: str = "") -> str:
    """The machine, torch (and `extra`) and the load average at the start and now, for a report."""
    import torch

    return (f"{_platform.processor() or _platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
            f"{extra}; load average (1 min) {load_before[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")


def main(argv=None) -> dict:
    args = parse_args(argv)
    load_before = start(args.threads)
    import torch

    from cognate_tvm.torch.graphs import make_graph

    device = torch.device(args.device)
    graph = make_graph(args.graph, args.nodes, features=args.features, classes=args.classes, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="gnn_e2e_") as tmp:
        sides, tuning = make_sides(graph, device, args, Path(tmp))
        rows = [summarize(w, time_width(graph, sides, w, device, args), tuning, args.classes) for w in args.widths]
    result = {"command": "python benchmarks/gnn_end_to_end.py " + shlex.join(sys.argv[1:] if argv is None else argv),
              "device": str(device), "threads": args.threads, "epochs": args.epochs, "rounds": args.rounds,
              "features": args.features, "classes": args.classes, "ready_s": tuning["ready_s"],
              "graph": {"name": graph.name, "nodes": graph.nodes, "nnz": int(graph.adjacency.nnz)},
              "machine": machine(load_before),
              "rows": rows}
    write_report(result, Path(args.out))
    print((Path(args.out) / "gnn_end_to_end.md").read_text())
    return result


if __name__ == "__main__":
    main()
