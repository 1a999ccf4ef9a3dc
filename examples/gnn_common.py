"""What examples/gcn.py and examples/gat.py share: their options, the graph and its SparseMatrix."""
from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

import torch

from cognate_tvm.torch import SparseMatrix
from cognate_tvm.torch.graphs import GRAPHS, NodeGraph, make_graph


def parser(description: str, *, nodes: int, features: int, hidden: int) -> argparse.ArgumentParser:
    """The options of both examples, with their own defaults for size and widths."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--graph", choices=GRAPHS, default="community")
    parser.add_argument("--nodes", type=int, default=nodes)
    parser.add_argument("--features", type=int, default=features)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=hidden)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (torch and the kernels)")
    parser.add_argument("--cache-dir", default=None, help="tuned choices and kernels (default ~/.cache/cognate_tvm)")
    parser.add_argument("--no-tune", action="store_true", help="use the space's baseline config, measure nothing")
    parser.add_argument("--seed", type=int, default=0)
    return parser


@dataclass
class Setup:
    graph: NodeGraph
    adjacency: SparseMatrix
    x: torch.Tensor
    labels: torch.Tensor
    train: torch.Tensor

    def accuracy(self, logits: torch.Tensor, mask: torch.Tensor) -> float:
        return float((logits[mask].argmax(1) == self.labels[mask]).float().mean())


def setup(args: argparse.Namespace) -> Setup:
    """Threads and seed set, the graph made, its adjacency as a SparseMatrix on --device."""
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    graph = make_graph(args.graph, args.nodes, features=args.features, classes=args.classes, seed=args.seed)
    device = torch.device(args.device)
    adjacency = SparseMatrix.from_scipy(graph.adjacency, device=device, num_threads=args.threads,
                                        cache_dir=args.cache_dir, tune=not args.no_tune)
    return Setup(graph, adjacency, graph.features.to(device), graph.labels.to(device), graph.train.to(device))
