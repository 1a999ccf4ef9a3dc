"""cognate_tvm.torch.pyg against PyTorch Geometric itself: the propagation matrices, GCNConv and
TransformerConv outputs and gradients with the same weights, a training run's loss curve, the
edge_index cache, and bad edge lists."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cognate_tvm.errors import IndexOutOfRangeError, MatrixFormatError, ShapeError
from cognate_tvm.torch import SparseMatrix, TunedKernels
from cognate_tvm.torch import pyg
from cognate_tvm.torch.graphs import make_graph

geometric = pytest.importorskip("torch_geometric", reason="torch_geometric (the [pyg] extra) is not installed")
from torch_geometric.nn import GCNConv as PygGCNConv  # noqa: E402
from torch_geometric.nn import TransformerConv as PygTransformerConv  # noqa: E402
from torch_geometric.nn.conv.gcn_conv import gcn_norm  # noqa: E402


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return TunedKernels("cpu", num_threads=2, cache_dir=tmp_path_factory.mktemp("cache"), tune=False)


def edges(nodes=40, count=160, seed=0, *, loops=True):
    """A directed edge list with duplicates, self-loops (some) and isolated nodes (the last 3)."""
    gen = torch.Generator().manual_seed(seed)
    index = torch.randint(0, nodes - 3, (2, count), generator=gen)
    index[:, :5] = index[:, 5:10]  # duplicates
    if loops:
        index[1, 10:14] = index[0, 10:14]
    weight = torch.rand(count, generator=gen) + 0.5
    return index, weight


def dense(matrix: SparseMatrix) -> np.ndarray:
    return matrix.to_torch().to_dense().numpy()


def test_from_edge_index_is_target_by_source(kernels):
    index, weight = edges()
    a = pyg.from_edge_index(index, 40, edge_weight=weight, kernels=kernels)
    want = np.zeros((40, 40), np.float32)
    np.add.at(want, (index[1].numpy(), index[0].numpy()), weight.numpy())
    np.testing.assert_allclose(dense(a), want, rtol=1e-6)
    bipartite = pyg.from_edge_index(torch.tensor([[0, 5], [1, 2]]), size=(6, 3), kernels=kernels)
    assert bipartite.shape == (3, 6)


@pytest.mark.parametrize("improved", [False, True])
def test_gcn_adjacency_matches_gcn_norm(kernels, improved):
    index, weight = edges()
    a = pyg.gcn_adjacency(index, 40, edge_weight=weight, improved=improved, kernels=kernels)
    norm_index, norm_weight = gcn_norm(index, weight, 40, improved=improved)
    want = torch.zeros(40, 40).index_put_((norm_index[1], norm_index[0]), norm_weight, accumulate=True)
    np.testing.assert_allclose(dense(a), want.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("normalize", [True, False])
def test_gcnconv_matches_pyg(kernels, normalize):
    index, weight = edges(seed=1)
    torch.manual_seed(0)
    theirs = PygGCNConv(12, 9, normalize=normalize)
    ours = pyg.GCNConv(12, 9, normalize=normalize, kernels=kernels)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(40, 12)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out, want = ours(xa, index, weight), theirs(xb, index, weight)
    assert torch.allclose(out, want, rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    want.square().sum().backward()
    assert torch.allclose(xa.grad, xb.grad, rtol=1e-4, atol=1e-5)
    for name, param in ours.named_parameters():
        assert torch.allclose(param.grad, dict(theirs.named_parameters())[name].grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("heads,concat,root_weight", [(2, True, True), (3, False, True), (1, True, False)])
def test_transformerconv_matches_pyg(kernels, heads, concat, root_weight):
    index, _ = edges(seed=2, loops=False)
    index = torch.unique(index, dim=1)  # PyG's softmax counts a duplicated edge twice; ours merges it
    torch.manual_seed(1)
    theirs = PygTransformerConv(10, 6, heads=heads, concat=concat, root_weight=root_weight)
    ours = pyg.TransformerConv(10, 6, heads=heads, concat=concat, root_weight=root_weight, kernels=kernels)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(40, 10)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out, want = ours(xa, index), theirs(xb, index)
    assert torch.allclose(out, want, rtol=1e-4, atol=1e-5)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    (want * torch.linspace(-1, 1, want.numel()).view_as(want)).sum().backward()
    assert torch.allclose(xa.grad, xb.grad, rtol=1e-3, atol=1e-4)


def test_transformerconv_bipartite_matches_pyg(kernels):
    index = torch.stack([torch.randint(0, 30, (90,)), torch.randint(0, 12, (90,))])
    index = torch.unique(index, dim=1)
    torch.manual_seed(2)
    theirs = PygTransformerConv((8, 5), 4, heads=2)
    ours = pyg.TransformerConv((8, 5), 4, heads=2, kernels=kernels)
    ours.load_state_dict(theirs.state_dict())
    x = (torch.randn(30, 8), torch.randn(12, 5))
    assert torch.allclose(ours(x, index), theirs(x, index), rtol=1e-4, atol=1e-5)


def test_unsupported_transformer_settings_are_named():
    for option in ({"beta": True}, {"dropout": 0.1}, {"edge_dim": 4}):
        with pytest.raises(ValueError, match=next(iter(option))):
            pyg.TransformerConv(8, 4, **option)


def test_from_data_and_cache(kernels):
    from torch_geometric.data import Data

    index, weight = edges(seed=3)
    data = Data(edge_index=index, edge_weight=weight, num_nodes=40)
    a = pyg.from_data(data, normalize="gcn", kernels=kernels)
    np.testing.assert_allclose(dense(a), dense(pyg.gcn_adjacency(index, 40, edge_weight=weight, kernels=kernels)))
    with pytest.raises(ValueError, match="normalize"):
        pyg.from_data(data, normalize="sym", kernels=kernels)
    conv = pyg.GCNConv(4, 4, kernels=kernels)
    first = conv.adjacency(index, 40, weight)
    assert conv.adjacency(index, 40, weight) is first
    index[0, 0] = 39  # an in-place edit makes a new matrix
    assert conv.adjacency(index, 40, weight) is not first


def test_bad_edge_lists_are_named(kernels):
    with pytest.raises(ShapeError, match=r"\[2, E\]"):
        pyg.from_edge_index(torch.zeros(3, 4, dtype=torch.long), kernels=kernels)
    with pytest.raises(MatrixFormatError, match="integers"):
        pyg.from_edge_index(torch.zeros(2, 4), kernels=kernels)
    with pytest.raises(IndexOutOfRangeError, match="node 7"):
        pyg.from_edge_index(torch.tensor([[0, 7], [1, 2]]), 5, kernels=kernels)
    with pytest.raises(MatrixFormatError, match="NaN"):
        pyg.from_edge_index(torch.tensor([[0, 1], [1, 2]]), 3, edge_weight=torch.tensor([1.0, float("nan")]),
                            kernels=kernels)
    with pytest.raises(ShapeError, match="edge_weight has 1"):
        pyg.from_edge_index(torch.tensor([[0, 1], [1, 2]]), 3, edge_weight=torch.ones(1), kernels=kernels)


class TwoLayerGCN(torch.nn.Module):
    def __init__(self, conv, features, hidden, classes, **options):
        super().__init__()
        self.conv1, self.conv2 = conv(features, hidden, **options), conv(hidden, classes, **options)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


def test_training_curve_matches_pyg(kernels):
    """The same GCN from the same weights trains to the same losses with either layer (fixed seed)."""
    graph = make_graph("community", 600, features=16, classes=4, seed=3)
    coo = graph.adjacency.tocoo()
    index = torch.from_numpy(np.stack([coo.col, coo.row]).astype(np.int64))  # the normalised graph's edges
    losses = {}
    for name, conv, options in (("pyg", PygGCNConv, {}), ("ours", pyg.GCNConv, {"kernels": kernels})):
        torch.manual_seed(5)
        model = TwoLayerGCN(conv, 16, 16, 4, **options)
        if name == "ours":
            model.load_state_dict(start)
        else:
            start = {k: v.clone() for k, v in model.state_dict().items()}
        optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
        losses[name] = []
        for _ in range(15):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(graph.features, index)[graph.train],
                                                     graph.labels[graph.train])
            loss.backward()
            optimizer.step()
            losses[name].append(float(loss))
    np.testing.assert_allclose(losses["ours"], losses["pyg"], rtol=1e-4)
    assert losses["ours"][-1] < 0.8 * losses["ours"][0]
