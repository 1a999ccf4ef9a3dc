"""PyTorch Geometric models on their own layers against the same models on cognate_tvm's drop-in layers.

Two models, each with the same weights and inputs on every side; only the layers differ:

- GCN: two ``GCNConv`` layers (ReLU, dropout between: 0.5 as in PyG's examples, `--dropout`) on the
  graph's ``edge_index``.
  PyG sides: ``pyg`` (edge_index: gather and scatter), ``pyg-csr`` (a torch.sparse CSR ``adj_t``,
  PyG's SparseTensor path without torch_sparse; torch transposes it in every backward),
  ``pyg-csr+At`` (the same with the transpose made once, a ``GCNConv`` whose
  ``message_and_aggregate`` uses it). Ours (``cognate_tvm.torch.pyg.GCNConv``): ``tuned``
  (kernels chosen by tune with the shipped model), ``baseline-config`` (the space's baseline,
  no tuning), ``random-search`` (the best of as many random configs as tune measured),
  ``tuned-bf16`` (bfloat16 dense operands, float32 accumulation).
- Attention: two ``TransformerConv`` layers (dot-product attention; ELU between), `--heads` heads
  in the first. Sides: ``pyg`` (``torch_geometric.nn.TransformerConv``), ``tuned-fused`` (the fused
  attention kernel, tuned SpMM/SDDMM in backward) and ``tuned-composed`` (tuned SDDMM, edge softmax,
  tuned SpMM). The graphs' edges are given without self-loops; GCNConv adds them, the attention
  layers do not.

Per graph it reports the training epoch time (forward, backward, Adam step) of every side as the
median over rounds that rotate the sides' order, the tuning time and the epochs after which
tuning has paid for itself against PyG's fastest side (break-even). On the community graph, whose
labels are learnable, both models also train from the same weights with PyG's layers and with
ours, and the loss and test accuracy curves are compared.

DGL is not among the sides: its newest release on PyPI (2.1.0) ships native libraries for
torch <= 2.2 only and does not load with the torch this project pins.

    python benchmarks/gnn_pyg.py --threads 2

Writes ``gnn_pyg.json``, ``.md`` and ``.png`` under --out.
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import shlex
import sys
import tempfile
from pathlib import Path

import numpy as np

from common import figure
from gnn_end_to_end import Timer, TransposedCSR, machine, random_search, start

log = logging.getLogger("gnn_pyg")
GCN_SIDES = ("pyg", "pyg-csr", "pyg-csr+At", "tuned", "baseline-config", "random-search", "tuned-bf16")
PYG_SIDES = ("pyg", "pyg-csr", "pyg-csr+At")
ATTENTION_SIDES = ("pyg", "tuned-fused", "tuned-composed")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=["rmat:65536", "community:100000", "social:100000"],
                        help="KIND:NODES of cognate_tvm.torch.graphs.make_graph")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64, help="GCN hidden width")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-width", type=int, default=16, help="attention width per head")
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dropout", type=float, default=0.5, help="GCN dropout between the layers")
    parser.add_argument("--accuracy-epochs", type=int, default=30, help="0: no accuracy comparison")
    parser.add_argument("--no-bf16", action="store_true", help="leave out the tuned-bf16 side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="docs/results/gnn_pyg")
    return parser.parse_args(argv)


# -- models ------------------------------------------------------------------------------

def gcn_model(conv, args, classes, **options):
    import torch

    class GCN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = conv(args.features, args.hidden, cached=True, **options)
            self.conv2 = conv(args.hidden, classes, cached=True, **options)

        def forward(self, x, edges):
            h = torch.nn.functional.dropout(torch.relu(self.conv1(x, edges)), args.dropout, self.training)
            return self.conv2(h, edges)

    return GCN()


def attention_model(conv, args, classes, **options):
    import torch

    class Transformer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = conv(args.features, args.head_width, heads=args.heads, **options)
            self.conv2 = conv(args.head_width * args.heads, classes, heads=1, **options)

        def forward(self, x, edges):
            return self.conv2(torch.nn.functional.elu(self.conv1(x, edges)), edges)

    return Transformer()


def transpose_cached_gcnconv():
    """PyG's GCNConv whose sparse-adjacency product keeps the transpose it needs in backward
    (gnn_end_to_end's `TransposedCSR`, made once per adjacency)."""
    from torch_geometric.nn import GCNConv

    class CachedTransposeGCNConv(GCNConv):
        def message_and_aggregate(self, adj_t, x):
            if getattr(self, "_product_of", None) is not adj_t:
                at = adj_t.to_sparse_coo().t().coalesce().to_sparse_csr()
                self._product_of, self._product = adj_t, TransposedCSR(adj_t, at)
            return self._product @ x

    return CachedTransposeGCNConv


# -- sides -------------------------------------------------------------------------------

def edge_index_of(graph):
    """The graph's edges without its self-loops: GCNConv adds them on every side (PyG's sparse path adds
    loops even where there are some, its edge_index path only where there are none)."""
    import torch

    coo = graph.adjacency.tocoo()
    off_diagonal = coo.row != coo.col
    return torch.from_numpy(np.stack([coo.col[off_diagonal], coo.row[off_diagonal]]).astype(np.int64))


def csr_adj_t(edge_index, nodes):
    """PyG's transposed adjacency as a torch.sparse CSR tensor (its ToSparseTensor transform)."""
    import torch
    import torch_geometric.transforms as T
    from torch_geometric.data import Data

    return T.ToSparseTensor(layout=torch.sparse_csr)(Data(edge_index=edge_index, num_nodes=nodes)).adj_t


def kernel_sets(args, root: Path) -> dict:
    from cognate_tvm.torch import TunedKernels

    sets = {"tuned": TunedKernels("cpu", num_threads=args.threads, cache_dir=root / "tuned"),
            "baseline-config": TunedKernels("cpu", num_threads=args.threads, cache_dir=root / "base", tune=False)}
    if not args.no_bf16:
        sets["tuned-bf16"] = TunedKernels("cpu", num_threads=args.threads, cache_dir=root / "bf16",
                                          dtype="bfloat16")
    return sets


def timed_tuning(kernels, run) -> float:
    """Seconds `kernels` spent tuning while `run()` made its kernels ready."""
    before = kernels.tuning_seconds()
    run()
    return kernels.tuning_seconds() - before


def gcn_sides(graph, args, sets, root: Path):
    """{side: (model, edges)}, and the tuning seconds per side of ours."""
    import torch
    from torch_geometric.nn import GCNConv as PygGCNConv

    from cognate_tvm.torch import TunedKernels, pyg

    edges = edge_index_of(graph)
    adj_t = csr_adj_t(edges, graph.nodes)
    torch.manual_seed(args.seed)
    reference = gcn_model(PygGCNConv, args, graph.classes)
    state = reference.state_dict()
    sides = {"pyg": (reference, edges), "pyg-csr": (copy.deepcopy(reference), adj_t)}
    sides["pyg-csr+At"] = (gcn_model(transpose_cached_gcnconv(), args, graph.classes), adj_t)
    for name, kernels in sets.items():
        sides[name] = (gcn_model(pyg.GCNConv, args, graph.classes, kernels=kernels), edges)
    tuning = {}
    for name in sets:
        sides[name][0].load_state_dict(state)
        tuning[name] = timed_tuning(sets[name], lambda: one_epoch(*sides[name], graph))
    adjacency = sides["tuned"][0].conv1.adjacency(edges, graph.nodes)
    history = {h["feat"]: h for h in sets["tuned"].history if h["op"] == "spmm"}
    random_search(adjacency, sets["tuned"], sorted(history), {w: max(1, h["measured"]) for w, h in history.items()},
                  args.seed, root / "random")
    random = TunedKernels("cpu", num_threads=args.threads, cache_dir=root / "random")
    sides["random-search"] = (gcn_model(pyg.GCNConv, args, graph.classes, kernels=random), edges)
    for name in ("pyg-csr+At", "random-search"):
        sides[name][0].load_state_dict(state)
    return {s: sides[s] for s in GCN_SIDES if s in sides}, tuning


def attention_sides(graph, args, tuned):
    import torch
    from torch_geometric.nn import TransformerConv as PygTransformerConv

    from cognate_tvm.torch import pyg

    edges = edge_index_of(graph)
    torch.manual_seed(args.seed)
    reference = attention_model(PygTransformerConv, args, graph.classes)
    sides = {"pyg": (reference, edges)}
    for name, fused in (("tuned-fused", True), ("tuned-composed", False)):
        model = attention_model(pyg.TransformerConv, args, graph.classes, kernels=tuned, fused=fused)
        model.load_state_dict(reference.state_dict())
        sides[name] = (model, edges)
    fused = timed_tuning(tuned, lambda: one_epoch(*sides["tuned-fused"], graph))
    # the composed side reuses kernels the fused side's backward tuned: it is charged with both
    return sides, {"tuned-fused": fused,
                   "tuned-composed": fused + timed_tuning(tuned, lambda: one_epoch(*sides["tuned-composed"], graph))}


# -- timing and accuracy --------------------------------------------------------------------

def one_epoch(model, edges, graph, optimizer=None) -> float:
    import torch

    model.train()
    if optimizer is not None:
        optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(graph.features, edges)[graph.train], graph.labels[graph.train])
    loss.backward()
    if optimizer is not None:
        optimizer.step()
    return float(loss.detach())


def time_sides(sides: dict, graph, args) -> dict:
    """{side: [ms per epoch, one per round]}, sides in rotated order per round."""
    import torch

    models = {s: copy.deepcopy(m) for s, (m, _) in sides.items()}
    optimizers = {s: torch.optim.Adam(m.parameters(), lr=0.01) for s, m in models.items()}
    timer, names = Timer(torch.device("cpu")), list(sides)
    times = {s: [] for s in names}
    for r in range(args.rounds):
        for side in names[r % len(names):] + names[:r % len(names)]:
            times[side].append(timer(lambda: one_epoch(models[side], sides[side][1], graph, optimizers[side]),
                                     args.epochs))
        log.info("round %d of %d: %s", r + 1, args.rounds, {s: round(v[-1]) for s, v in times.items()})
    return times


def train_curve(model, edges, graph, epochs: int, seed: int) -> dict:
    """Train loss and test accuracy per epoch (the same dropout masks on every side: seeded)."""
    import torch

    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    test = ~graph.train
    curve = {"loss": [], "test_accuracy": []}
    for _ in range(epochs):
        curve["loss"].append(one_epoch(model, edges, graph, optimizer))
        model.eval()
        with torch.no_grad():
            predicted = model(graph.features, edges).argmax(dim=1)
        curve["test_accuracy"].append(float((predicted[test] == graph.labels[test]).float().mean()))
    return curve


def accuracy(sides: dict, ours: str, graph, args) -> dict:
    curves = {s: train_curve(copy.deepcopy(sides[s][0]), sides[s][1], graph, args.accuracy_epochs, args.seed)
              for s in ("pyg", ours)}
    gap = np.abs(np.subtract(curves["pyg"]["loss"], curves[ours]["loss"]))
    return {"curves": curves, "max_loss_gap": float(gap.max()),
            "final_accuracy": {s: c["test_accuracy"][-1] for s, c in curves.items()}}


def summarize(times: dict, tuning_s: dict, baselines) -> dict:
    epoch = {s: float(np.median(v)) for s, v in times.items()}
    best = min(baselines, key=lambda s: epoch[s])
    out = {"epoch_ms": epoch, "epoch_rounds_ms": times, "tuning_s": tuning_s, "pyg_best": best,
           "speedup_vs_pyg_best": {}, "break_even_epochs": {}}
    for side, seconds in tuning_s.items():
        out["speedup_vs_pyg_best"][side] = epoch[best] / epoch[side]
        saved = epoch[best] - epoch[side]
        out["break_even_epochs"][side] = seconds * 1e3 / saved if saved > 0 else None
    return out


# -- the run -----------------------------------------------------------------------------------

def run_graph(spec: str, args, root: Path) -> dict:
    from cognate_tvm.torch.graphs import make_graph

    kind, nodes = spec.split(":")
    graph = make_graph(kind, int(nodes), features=args.features, classes=args.classes, seed=args.seed)
    log.info("%s: %d nodes, %d nonzeros", graph.name, graph.nodes, graph.adjacency.nnz)
    sets = kernel_sets(args, root / graph.name)
    gcn, gcn_tuning = gcn_sides(graph, args, sets, root / graph.name)
    gcn_tuning["random-search"] = gcn_tuning["tuned"]  # its measurements: as many as tune's
    attention, attention_tuning = attention_sides(graph, args, sets["tuned"])
    row = {"graph": graph.name, "nodes": graph.nodes, "nnz": int(graph.adjacency.nnz),
           "gcn": summarize(time_sides(gcn, graph, args), gcn_tuning, PYG_SIDES),
           "attention": summarize(time_sides(attention, graph, args), attention_tuning, ("pyg",))}
    if kind == "community" and args.accuracy_epochs:
        row["gcn"]["accuracy"] = accuracy(gcn, "tuned", graph, args)
        row["attention"]["accuracy"] = accuracy(attention, "tuned-fused", graph, args)
    return row


def main(argv=None) -> dict:
    args = parse_args(argv)
    load_before = start(args.threads)
    log.setLevel(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="gnn_pyg_") as tmp:
        rows = [run_graph(spec, args, Path(tmp)) for spec in args.graphs]
    import torch_geometric

    result = {"command": "python benchmarks/gnn_pyg.py " + shlex.join(sys.argv[1:] if argv is None else argv),
              "threads": args.threads, "epochs": args.epochs, "rounds": args.rounds, "features": args.features,
              "hidden": args.hidden, "dropout": args.dropout, "heads": args.heads, "head_width": args.head_width,
              "classes": args.classes,
              "machine": machine(load_before, f", torch_geometric {torch_geometric.__version__}"),
              "rows": rows}
    write_report(result, Path(args.out))
    print((Path(args.out) / "gnn_pyg.md").read_text())
    return result


def _fmt(value, spec=".1f", none="never") -> str:
    return none if value is None else format(value, spec)


def write_report(result: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gnn_pyg.json").write_text(json.dumps(result, indent=1))
    lines = ["# GNN epochs: PyTorch Geometric's layers against cognate_tvm's drop-in layers", "",
             f"`{result['command']}`", "",
             f"{result['features']} input features, {result['classes']} classes; GCN hidden {result['hidden']}, "
             f"dropout {result['dropout']}; "
             f"attention {result['heads']} heads x {result['head_width']}; {result['threads']} threads; "
             f"medians of {result['rounds']} rounds x {result['epochs']} epochs, sides in rotated order. "
             f"{result['machine']}", ""]
    for model in ("gcn", "attention"):
        lines += [f"## {'GCN' if model == 'gcn' else 'Attention (TransformerConv)'}", "",
                  "| graph | nnz | side | epoch ms | vs PyG's fastest | tuning s | break-even epochs |",
                  "|---|---|---|---|---|---|---|"]
        for row in result["rows"]:
            part = row[model]
            for side, ms in part["epoch_ms"].items():
                speed = part["speedup_vs_pyg_best"].get(side)
                tuning = part["tuning_s"].get(side)
                mark = " (fastest PyG)" if side == part["pyg_best"] else ""
                lines.append(f"| {row['graph']} | {row['nnz']} | {side}{mark} | {ms:.0f} | "
                             f"{_fmt(speed, '.2f', '')}{'x' if speed else ''} | {_fmt(tuning, '.0f', '')} | "
                             f"{_fmt(part['break_even_epochs'].get(side)) if side in part['tuning_s'] else ''} |")
        lines.append("")
    lines += ["## Same training, PyG's layers or ours (community graph, same initial weights and seed)", "",
              "| model | epochs | max abs loss difference | final test accuracy PyG | ours |", "|---|---|---|---|---|"]
    for row in result["rows"]:
        for model, ours in (("gcn", "tuned"), ("attention", "tuned-fused")):
            acc = row[model].get("accuracy")
            if acc:
                epochs = len(acc["curves"]["pyg"]["loss"])
                lines.append(f"| {model} | {epochs} | {acc['max_loss_gap']:.2e} | "
                             f"{acc['final_accuracy']['pyg']:.3f} | {acc['final_accuracy'][ours]:.3f} |")
    (out / "gnn_pyg.md").write_text("\n".join(lines) + "\n")
    plot(result, out / "gnn_pyg.png")


def plot(result: dict, path: Path) -> None:
    """Speedup of each of our sides over PyG's fastest side, per graph."""
    rows = result["rows"]
    bars = [(model, side) for model in ("gcn", "attention") for side in rows[0][model]["speedup_vs_pyg_best"]]
    step = 0.8 / len(bars)
    with figure(path, figsize=(8, 3.6)) as (_, ax):
        for n, (model, side) in enumerate(bars):
            ax.bar([i + n * step for i in range(len(rows))],
                   [r[model]["speedup_vs_pyg_best"][side] for r in rows], step, label=f"{model}: {side}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([i + 0.4 - step / 2 for i in range(len(rows))], [r["graph"] for r in rows])
        ax.set_ylabel("epoch speedup over PyG's fastest")
        ax.set_title(f"GCN and TransformerConv training, CPU, {result['threads']} threads")
        ax.legend(fontsize=7)


if __name__ == "__main__":
    main()
