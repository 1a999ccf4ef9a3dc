"""The sparse-convolution featurizer: dense conv2d reference, binning cap, memory, cache key."""
import dataclasses
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from cognate_tvm.data import matrix_hash

from cognate_tvm.matrix import as_csr, generate
from cognate_tvm.model.config import FeaturizerConfig
from cognate_tvm.model.featurizer import (SparseConvFeaturizer, pattern_of, resolve_backend,
                                          torchsparse_usable)

torch.set_num_threads(1)  # small ops: one thread is faster on a shared 2-core machine
SMALL = FeaturizerConfig(stem_channels=4, stage_channels=(5, 6, 3), stats_hidden=4, out_dim=8, backend="torch")


def _matrix(rows=37, cols=50, density=0.12, seed=0):
    return as_csr(sp.random_array((rows, cols), density=density, rng=np.random.default_rng(seed)))


def _dense_weight(conv, k):
    # SparseConv weight [k*k, in, out] (offsets row-major, (dr, dc)) -> conv2d weight [out, in, k, k]
    w = conv.weight.detach()
    return w.reshape(k, k, w.shape[1], w.shape[2]).permute(3, 2, 0, 1)


def _dense_pooled(net, pattern, rows, cols):
    """The whole multi-scale network evaluated densely with F.conv2d and masks."""
    stages = len(net.down)
    side_r = -(-rows // 2 ** stages) * 2 ** stages
    side_c = -(-cols // 2 ** stages) * 2 ** stages
    img = torch.zeros(1, 1, side_r, side_c)
    r, c = pattern.coords[:, 0], pattern.coords[:, 1]
    img[0, 0, r, c] = pattern.features()[:, 0]
    mask = torch.zeros(1, 1, side_r, side_c)
    mask[0, 0, r, c] = 1.0

    def sub(x, conv, mask):
        y = F.conv2d(x, _dense_weight(conv, 3), conv.bias.detach(), padding=1)
        return torch.relu(y) * mask

    def pool(x, mask):
        return (x * mask).sum((0, 2, 3)) / mask.sum()

    x = sub(img, net.stem, mask)
    pooled = [pool(x, mask)]
    for down, conv in zip(net.down, net.sub):
        mask = F.max_pool2d(mask, 2)
        x = torch.relu(F.conv2d(x, _dense_weight(down, 2), down.bias.detach(), stride=2)) * mask
        x = sub(x, conv, mask)
        pooled.append(pool(x, mask))
    return pooled


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_dense_conv2d_reference(seed):
    torch.manual_seed(seed)
    net = SparseConvFeaturizer(SMALL)
    matrix = _matrix(seed=seed)
    pattern = net.pattern(matrix)
    with torch.no_grad():
        sparse = net.pooled(pattern)
    dense = _dense_pooled(net, pattern, *matrix.shape)
    assert len(sparse) == len(dense) == 1 + len(SMALL.stage_channels)
    for s, d in zip(sparse, dense):
        torch.testing.assert_close(s, d, rtol=1e-5, atol=1e-6)


def test_matches_dense_reference_on_binned_pattern():
    torch.manual_seed(3)
    net = SparseConvFeaturizer(FeaturizerConfig(**{**SMALL.__dict__, "max_points": 60}))
    matrix = generate("rmat", 300, seed=2)
    pattern = net.pattern(matrix)
    assert pattern.level >= 1 and pattern.points <= 60
    rows = -(-matrix.shape[0] // 2 ** pattern.level)
    cols = -(-matrix.shape[1] // 2 ** pattern.level)
    with torch.no_grad():
        sparse = net.pooled(pattern)
    for s, d in zip(sparse, _dense_pooled(net, pattern, rows, cols)):
        torch.testing.assert_close(s, d, rtol=1e-5, atol=1e-6)


def test_binning_merges_counts():
    matrix = generate("stencil2d", 2500, seed=0)
    pattern = pattern_of(matrix, max_points=1000)
    assert pattern.points <= 1000 and pattern.level >= 1
    assert float(pattern.counts.sum()) == matrix.nnz
    coo = matrix.tocoo()
    expected = {(int(r) >> pattern.level, int(c) >> pattern.level) for r, c in zip(coo.row, coo.col)}
    assert {tuple(x) for x in pattern.coords.tolist()} == expected
    exact = pattern_of(matrix, max_points=matrix.nnz)
    assert exact.level == 0 and exact.points == matrix.nnz and torch.all(exact.counts == 1)


def test_embedding_shape_gradient_and_empty_matrix():
    torch.manual_seed(0)
    net = SparseConvFeaturizer(SMALL)
    emb = net.embed(_matrix())
    assert emb.shape == (SMALL.out_dim,)
    emb.sum().backward()
    assert net.stem.weight.grad is not None and net.stem.weight.grad.abs().sum() > 0
    empty = net.embed(sp.csr_matrix((10, 12), dtype=np.float32))
    assert torch.all(torch.isfinite(empty))


def test_different_patterns_give_different_embeddings():
    torch.manual_seed(0)
    net = SparseConvFeaturizer(FeaturizerConfig(backend="torch"))
    with torch.no_grad():
        a = net.embed(generate("banded", 500, seed=1))
        b = net.embed(generate("rmat", 500, seed=1))
    assert not torch.allclose(a, b, atol=1e-4)


def test_matrix_hash_ignores_values_only():
    m = _matrix()
    scaled = m.copy()
    scaled.data *= 3
    assert matrix_hash(m) == matrix_hash(scaled)
    other = _matrix(seed=5)
    assert matrix_hash(m) != matrix_hash(other)


def test_memory_bounded_on_2m_nonzeros():
    """Embedding a 2M-nnz matrix in a fresh process stays far below the uncapped cost (~10 GB)."""
    script = textwrap.dedent("""
        import json, resource, numpy as np, scipy.sparse as sp, torch
        torch.set_num_threads(2)
        from cognate_tvm.model.featurizer import SparseConvFeaturizer
        from cognate_tvm.model.config import FeaturizerConfig
        n = 200_000
        m = sp.random_array((n, n), density=10 / n, rng=np.random.default_rng(0), format="csr")
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        net = SparseConvFeaturizer(FeaturizerConfig(backend="torch"))
        pattern = net.pattern(m)
        with torch.no_grad():
            emb = net(pattern)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"nnz": int(m.nnz), "points": pattern.points, "level": pattern.level,
                          "base_mb": base / 1024, "peak_mb": peak / 1024, "finite": bool(torch.isfinite(emb).all())}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["nnz"] >= 1_900_000 and info["finite"]
    assert info["points"] <= FeaturizerConfig().max_points
    # the matrix itself takes ~25 MB; embedding it may add a few hundred MB at most
    assert info["peak_mb"] - info["base_mb"] < 600, info


def test_backend_selection():
    assert resolve_backend("torch", on_cuda=True) == "torch"
    assert resolve_backend("auto", on_cuda=False) == "torch"  # torchsparse's strided convs are GPU-only
    assert resolve_backend("auto", on_cuda=True) == ("torchsparse" if torchsparse_usable() else "torch")
    assert SparseConvFeaturizer(FeaturizerConfig()).backend == "torch"
    with pytest.raises(ValueError, match="unknown featurizer backend 'mink'"):
        resolve_backend("mink", on_cuda=False)
    with pytest.raises(ValueError, match="unknown featurizer backend 'mink'"):
        SparseConvFeaturizer(FeaturizerConfig(backend="mink"))


@pytest.mark.skipif(not torchsparse_usable(), reason="torchsparse is not installed or no CUDA device "
                    "(its strided convolutions are GPU-only); the torch backend is used")
def test_torchsparse_backend_matches_torch_backend():
    torch.manual_seed(0)
    net = SparseConvFeaturizer(SMALL)
    ts = SparseConvFeaturizer(FeaturizerConfig(**{**SMALL.__dict__, "backend": "torchsparse"}))
    ts.load_state_dict(net.state_dict())
    ts = ts.cuda()
    pattern = net.pattern(_matrix())
    with torch.no_grad():
        for a, b in zip(net.pooled(pattern), ts.pooled(pattern)):
            torch.testing.assert_close(a, b.cpu(), rtol=1e-4, atol=1e-5)


def _brute_force_binning(matrix, max_points):
    coo = matrix.tocoo()
    level = 0
    while True:
        cells = {}
        for r, c in zip(coo.row >> level, coo.col >> level):
            cells[(int(r), int(c))] = cells.get((int(r), int(c)), 0) + 1
        if len(cells) <= max_points:
            return level, cells
        level += 1


@pytest.mark.parametrize("bitmap_cells", [1 << 23, 64], ids=["bitmap", "sort"])
@pytest.mark.parametrize("family", ["banded", "rmat", "uniform", "bipartite"])
def test_binning_picks_the_smallest_level_that_fits(family, bitmap_cells, monkeypatch):
    from cognate_tvm.model import featurizer

    monkeypatch.setattr(featurizer, "BITMAP_CELLS", bitmap_cells)
    matrix = generate(family, 1500, seed=1)
    for max_points in (10, 200, 3000):
        pattern = pattern_of(matrix, max_points=max_points)
        level, cells = _brute_force_binning(matrix, max_points)
        got = {tuple(x): cnt for x, cnt in zip(pattern.coords.tolist(), pattern.counts.tolist())}
        keys = (pattern.coords[:, 0] << 32) | pattern.coords[:, 1]
        assert pattern.level == level and got == cells
        assert torch.all(keys[1:] > keys[:-1])  # sorted, distinct


def test_locality_featurizer_reads_the_profile():
    from cognate_tvm.matrix import LOCALITY_WIDTH, locality_profile

    m = _matrix(rows=300, cols=200, density=0.02)
    net = SparseConvFeaturizer(dataclasses.replace(SMALL, locality=True))
    assert net.stats_mlp[0].in_features == 4 + LOCALITY_WIDTH
    pattern = net.pattern(m)
    assert torch.equal(pattern.locality, torch.from_numpy(locality_profile(m)))
    assert pattern_of(m, max_points=SMALL.max_points).locality is None  # only made when asked for
    with pytest.raises(ValueError, match="locality profile"):
        net(pattern_of(m, max_points=SMALL.max_points))
    # the embedding moves with the profile, all else equal
    other = dataclasses.replace(pattern, locality=torch.zeros(LOCALITY_WIDTH))
    assert not torch.allclose(net(pattern), net(other))
