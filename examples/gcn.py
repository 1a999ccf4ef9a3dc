"""Train a 2-layer GCN whose graph propagation runs the tuned SpMM kernels.

    python examples/gcn.py                       # 3000-node community graph, seconds
    python examples/gcn.py --nodes 100000 --graph rmat --hidden 128

The first run tunes the SpMM of the graph at each width the model uses (the
hidden width and the class count; Aᵀ = A here, so backward reuses them) and
stores the choices under --cache-dir (default ~/.cache/cognate_tvm); a second
run measures nothing.
"""
from __future__ import annotations

import time

import torch

from gnn_common import parser, setup

from cognate_tvm.torch.nn import GCN


def main(argv=None) -> dict:
    args = parser(__doc__.splitlines()[0], nodes=3000, features=64, hidden=64).parse_args(argv)
    run = setup(args)
    model = GCN(args.features, args.hidden, run.graph.classes).to(run.x.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    start = time.perf_counter()
    run.adjacency.prepare([args.hidden, run.graph.classes])
    print(f"graph {run.graph.name}: {run.adjacency.nnz} nonzeros; kernels ready in "
          f"{time.perf_counter() - start:.1f} s (tuning {run.adjacency.kernels.tuning_seconds():.1f} s)")
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(run.x, run.adjacency)[run.train], run.labels[run.train])
        loss.backward()
        optimizer.step()
        if epoch == 1 or epoch % 10 == 0 or epoch == args.epochs:
            model.eval()
            with torch.no_grad():
                logits = model(run.x, run.adjacency)
            print(f"epoch {epoch:3d}  loss {loss.item():.4f}  train acc {run.accuracy(logits, run.train):.3f}  "
                  f"test acc {run.accuracy(logits, ~run.train):.3f}")
    seconds = (time.perf_counter() - start) / args.epochs
    print(f"{seconds * 1e3:.1f} ms per epoch (training step and evaluation)")
    return {"loss": loss.item(), "test_accuracy": run.accuracy(logits, ~run.train), "epoch_s": seconds}


if __name__ == "__main__":
    main()
