import pytest

from cognate_tvm.errors import InvalidConfigError, UnknownKindError
from cognate_tvm.space import LOOPS, SharedCoords, create
from cognate_tvm.space.base import Config
from dataclasses import dataclass


@dataclass(frozen=True)
class _Toy(Config):
    tile: int
    order: tuple[str, ...]


def test_config_json_round_trip():
    c = _Toy(tile=4, order=("a", "b"))
    assert _Toy.from_dict(__import__("json").loads(c.to_json())) == c
    assert c.to_json() == '{"order":["a","b"],"tile":4}'
    with pytest.raises(InvalidConfigError, match="unknown fields \\['x'\\]"):
        _Toy.from_dict({"tile": 1, "order": [], "x": 2})


def test_shared_coords_omega_is_permutation():
    order = ("k1", "i1", "j1", "i0", "k0", "j0")
    omega = SharedCoords(1.0, 2.0, 3.0, order).omega()
    assert omega.sum() == 6 and (omega.sum(0) == 1).all() and (omega.sum(1) == 1).all()
    assert omega[0, LOOPS.index("k1")] == 1
    with pytest.raises(InvalidConfigError, match="permutation"):
        SharedCoords(1.0, 2.0, 3.0, ("i1",) * 6)


def test_unknown_platform():
    with pytest.raises(UnknownKindError, match="unknown platform 'tpu'; valid: cpu, gpu, spade"):
        create("tpu")
