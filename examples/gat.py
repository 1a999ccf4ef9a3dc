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

import time

import torch

from gnn_common import parser, setup

from cognate_tvm.torch.nn import GAT


def main(argv=None) -> dict:
    cli = parser(__doc__.splitlines()[0], nodes=2000, features=32, hidden=16)
    cli.add_argument("--heads", type=int, default=2)
    args = cli.parse_args(argv)
    run = setup(args)
    model = GAT(args.features, args.hidden, run.graph.classes, heads=args.heads).to(run.x.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):  # the first epoch tunes (or reads) every kernel it needs
        model.train()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(run.x, run.adjacency)[run.train], run.labels[run.train])
        loss.backward()
        optimizer.step()
        if epoch == 1:
            print(f"graph {run.graph.name}: {run.adjacency.nnz} nonzeros; first epoch "
                  f"{time.perf_counter() - start:.1f} s (tuning {run.adjacency.kernels.tuning_seconds():.1f} s)")
            start = time.perf_counter()
        if epoch % 10 == 0 or epoch == args.epochs:
            model.eval()
            with torch.no_grad():
                test = run.accuracy(model(run.x, run.adjacency), ~run.train)
            print(f"epoch {epoch:3d}  loss {loss.item():.4f}  test acc {test:.3f}")
    seconds = (time.perf_counter() - start) / max(1, args.epochs - 1)
    print(f"{seconds * 1e3:.1f} ms per epoch after the first")
    return {"loss": loss.item(), "test_accuracy": test, "epoch_s": seconds}


if __name__ == "__main__":
    main()
