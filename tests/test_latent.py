"""Knob encoders: the autoencoder reconstructs its whole space; the ablation encoders keep shapes."""
import itertools

import numpy as np
import pytest
import torch

from cognate_tvm.errors import UnknownKindError
from cognate_tvm.mapper import create as create_mapper
from cognate_tvm.model.config import LatentConfig
from cognate_tvm.model.latent import LatentAutoencoder, create_encoder
from toy_space import ToyAccelSpace, ToySpace, real_spaces

torch.set_num_threads(1)  # small ops: one thread is faster on a shared 2-core machine


@pytest.mark.parametrize("space", [ToySpace("spmm"), ToyAccelSpace("spmm"), *real_spaces()], ids=repr)
def test_autoencoder_reconstructs_its_space(space):
    knobs = create_mapper("standard").knobs(space, space.configs())
    ae = LatentAutoencoder(knobs.shape[1], LatentConfig())
    report = ae.fit_on(knobs, seed=0)
    assert report.exact_fraction == 1.0, report
    assert report.mse < 1e-2
    z = ae(torch.from_numpy(knobs))
    assert z.shape == (len(knobs), 64)
    # distinct knob vectors get distinct codes
    assert len(np.unique(z.detach().numpy().round(5), axis=0)) == len(np.unique(knobs, axis=0))


def test_autoencoder_on_a_larger_knob_grid():
    grid = np.array(list(itertools.product([0, 1, 2, 3], [1, 2, 4, 8], [0, 1], [16, 32, 64])), dtype=np.float32)
    ae = LatentAutoencoder(grid.shape[1], LatentConfig(latent_dim=16, epochs=600))
    report = ae.fit_on(grid, seed=1)
    assert report.vectors == len(grid) and report.exact_fraction == 1.0, report


def test_untrained_autoencoder_does_not_reconstruct():
    grid = np.array(list(itertools.product([0, 1, 2, 3], [1, 2, 4, 8], [0, 1])), dtype=np.float32)
    ae = LatentAutoencoder(grid.shape[1], LatentConfig(epochs=0))
    assert ae.fit_on(grid, seed=0).exact_fraction < 0.5  # the test above is not trivially true


def test_fit_is_seeded():
    knobs = np.array([[0, 1], [1, 0], [1, 1], [2, 0]], dtype=np.float32)
    codes = []
    for _ in range(2):
        ae = LatentAutoencoder(2, LatentConfig(epochs=50))
        ae.fit_on(knobs, seed=5)
        codes.append(ae(torch.from_numpy(knobs)).detach())
    assert torch.equal(codes[0], codes[1])


def test_pad_none_and_empty_encoders():
    knobs = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    pad = create_encoder("pad", 2, LatentConfig(latent_dim=8))
    pad.fit_on(knobs.numpy())
    out = pad(knobs)
    assert out.shape == (2, 8) and torch.all(out[:, 2:] == 0) and torch.allclose(out[:, 0], torch.tensor([-1.0, 1.0]))
    none = create_encoder("none", 2, LatentConfig(latent_dim=8))
    assert torch.all(none(knobs) == 0) and none(knobs).shape == (2, 8)
    empty = create_encoder("latent", 0, LatentConfig(latent_dim=8))
    assert empty.fit_on(np.zeros((3, 0), dtype=np.float32)).exact_fraction == 1.0
    assert empty(torch.zeros((3, 0))).shape == (3, 8)
    with pytest.raises(UnknownKindError, match="unknown knob encoder 'vae'"):
        create_encoder("vae", 2)
