"""Train a 2-layer graph attention network on tuned SDDMM, edge-softmax and SpMM kernels.

    python examples/gat.py                        # 2000-node community graph, seconds
    python examples/gat.py --nodes 50000 --hidden 32 --heads 4

Each attention layer scores every edge with an SDDMM (q_i . k_j), normalises the
scores over each node's edges (edge softmax) and aggregates the values with an
SpMM whose matrix values are the attention weights, so the gradients flow
through SpMM (into the weights: an SDDMM), edge softmax and SDDMM (SpMMs). The
kernels are tuned on first use per dense width and cached under --cache-dir.
"""
from __future__ import annotations

import argparse
import logging
import time

import torch

from cognate_tvm.torch import SparseMatrix
from cognate_tvm.torch.graphs import GRAPHS, make_graph
from cognate_tvm.torch.nn import GAT


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", choices=GRAPHS, default="community")
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=16, help="width of each head")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (torch and the kernels)")
    parser.add_argument("--cache-dir", default=None, help="tuned choices and kernels (default ~/.cache/cognate_tvm)")
    parser.add_argument("--no-tune", action="store_true", help="use the space's baseline config, measure nothing")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    graph = make_graph(args.graph, args.nodes, features=args.features, classes=args.classes, seed=args.seed)
    device = torch.device(args.device)
    adjacency = SparseMatrix.from_scipy(graph.adjacency, device=device, num_threads=args.threads,
                                        cache_dir=args.cache_dir, tune=not args.no_tune)
    x, labels, train = graph.features.to(device), graph.labels.to(device), graph.train.to(device)
    model = GAT(args.features, args.hidden, graph.classes, heads=args.heads).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):  # the first epoch tunes (or reads) every kernel it needs
        model.train()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x, adjacency)[train], labels[train])
        loss.backward()
        optimizer.step()
        if epoch == 1:
            print(f"graph {graph.name}: {adjacency.nnz} nonzeros; first epoch {time.perf_counter() - start:.1f} s "
                  f"(tuning {adjacency.kernels.tuning_seconds():.1f} s)")
            start = time.perf_counter()
        if epoch % 10 == 0 or epoch == args.epochs:
            model.eval()
            with torch.no_grad():
                predicted = model(x, adjacency).argmax(1)
            test = float((predicted[~train] == labels[~train]).float().mean())
            print(f"epoch {epoch:3d}  loss {loss.item():.4f}  test acc {test:.3f}")
    seconds = (time.perf_counter() - start) / max(1, args.epochs - 1)
    print(f"{seconds * 1e3:.1f} ms per epoch after the first")
    return {"loss": loss.item(), "test_accuracy": test, "epoch_s": seconds}


if __name__ == "__main__":
    main()
