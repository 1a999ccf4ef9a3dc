"""Train a 2-layer GCN whose graph propagation runs the tuned SpMM kernels.

    python examples/gcn.py                       # 3000-node community graph, seconds
    python examples/gcn.py --nodes 100000 --graph rmat --hidden 128

The first run tunes the SpMM of the graph at each width the model uses (the
hidden width and the class count; Aᵀ = A here, so backward reuses them) and
stores the choices under --cache-dir (default ~/.cache/cognate_tvm); a second
run measures nothing.
"""
from __future__ import annotations

import argparse
import logging
import time

import torch

from cognate_tvm.torch import SparseMatrix
from cognate_tvm.torch.graphs import GRAPHS, make_graph
from cognate_tvm.torch.nn import GCN


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", choices=GRAPHS, default="community")
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (torch and the kernels)")
    parser.add_argument("--cache-dir", default=None, help="tuned choices and kernels (default ~/.cache/cognate_tvm)")
    parser.add_argument("--no-tune", action="store_true", help="use the space's baseline config, measure nothing")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def accuracy(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> float:
    return float((logits[mask].argmax(1) == labels[mask]).float().mean())


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
    model = GCN(args.features, args.hidden, graph.classes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    start = time.perf_counter()
    adjacency.prepare([args.hidden, graph.classes])
    print(f"graph {graph.name}: {adjacency.nnz} nonzeros; kernels ready in {time.perf_counter() - start:.1f} s "
          f"(tuning {adjacency.kernels.tuning_seconds():.1f} s)")
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x, adjacency)[train], labels[train])
        loss.backward()
        optimizer.step()
        if epoch == 1 or epoch % 10 == 0 or epoch == args.epochs:
            model.eval()
            with torch.no_grad():
                logits = model(x, adjacency)
            print(f"epoch {epoch:3d}  loss {loss.item():.4f}  train acc {accuracy(logits, labels, train):.3f}  "
                  f"test acc {accuracy(logits, labels, ~train):.3f}")
    seconds = (time.perf_counter() - start) / args.epochs
    print(f"{seconds * 1e3:.1f} ms per epoch (training step and evaluation)")
    return {"loss": loss.item(), "test_accuracy": accuracy(logits, labels, ~train), "epoch_s": seconds}


if __name__ == "__main__":
    main()
