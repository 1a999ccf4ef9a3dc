"""A PyTorch Geometric GCN moved onto tuned kernels by changing its import (--layers pyg|cognate).

    python examples/pyg_gcn.py                       # cognate_tvm's drop-in GCNConv
    python examples/pyg_gcn.py --layers pyg          # PyG's own GCNConv, for comparison

The model is written as for PyG: ``GCNConv(in, out)`` layers called with ``(x, edge_index)`` of a
``torch_geometric.data.Data``. With ``--layers cognate`` the only difference is where GCNConv comes
from; the first epoch tunes the SpMM at each width (stored under --cache-dir for later runs).
Needs the [pyg] extra (torch_geometric).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from gnn_common import parser
from torch_geometric.data import Data

from cognate_tvm.torch.graphs import make_graph


def gcn_class(layers: str, args):
    if layers == "pyg":
        from torch_geometric.nn import GCNConv

        return GCNConv, {}
    from cognate_tvm.torch.pyg import GCNConv  # the one change a PyG model needs

    return GCNConv, {"num_threads": args.threads, "cache_dir": args.cache_dir, "tune": not args.no_tune}


class GCN(torch.nn.Module):
    def __init__(self, conv, options, features, hidden, classes):
        super().__init__()
        self.conv1, self.conv2 = conv(features, hidden, **options), conv(hidden, classes, **options)

    def forward(self, x, edge_index):
        h = torch.nn.functional.dropout(torch.relu(self.conv1(x, edge_index)), 0.5, self.training)
        return self.conv2(h, edge_index)


def main(argv=None) -> dict:
    cli = parser(__doc__.splitlines()[0], nodes=3000, features=64, hidden=64)
    cli.add_argument("--layers", choices=("cognate", "pyg"), default="cognate")
    args = cli.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    graph = make_graph(args.graph, args.nodes, features=args.features, classes=args.classes, seed=args.seed)
    coo = graph.adjacency.tocoo()
    data = Data(x=graph.features, edge_index=torch.from_numpy(np.stack([coo.col, coo.row]).astype(np.int64)),
                y=graph.labels, train_mask=graph.train, num_nodes=graph.nodes)
    conv, options = gcn_class(args.layers, args)
    model = GCN(conv, options, args.features, args.hidden, graph.classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data.x, data.edge_index)[data.train_mask],
                                                 data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        if epoch == 1 or epoch % 10 == 0 or epoch == args.epochs:
            model.eval()
            with torch.no_grad():
                predicted = model(data.x, data.edge_index).argmax(dim=1)
            accuracy = float((predicted[~data.train_mask] == data.y[~data.train_mask]).float().mean())
            print(f"epoch {epoch:3d}  loss {loss.item():.4f}  test acc {accuracy:.3f}")
        if epoch == 1:
            first_s, start = time.perf_counter() - start, time.perf_counter()
    seconds = (time.perf_counter() - start) / max(1, args.epochs - 1)
    print(f"{args.layers} layers: first epoch {first_s:.1f} s (tuning included), then {seconds * 1e3:.1f} ms per epoch")
    return {"loss": loss.item(), "test_accuracy": accuracy, "epoch_s": seconds}


if __name__ == "__main__":
    main()
