import pytest

from cognate_tvm.errors import InvalidConfigError, UnknownKindError
from cognate_tvm.space import LOOPS, SharedCoords, create, diverse_top
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


def test_knobs_differing_counts_fields():
    assert _Toy(4, ("a", "b")).knobs_differing(_Toy(4, ("a", "b"))) == 0
    assert _Toy(4, ("a", "b")).knobs_differing(_Toy(8, ("b", "a"))) == 2


def test_diverse_top_keeps_the_first_then_skips_near_copies_then_fills():
    spade = create("spade", "spmm")
    ranked = spade.configs()  # neighbours in this order differ in one knob
    plain = diverse_top(ranked, 5, 1)
    assert plain == ranked[:5]
    picks = diverse_top(ranked, 5, 3)
    assert picks[0] == ranked[0] and len(set(picks)) == 5
    assert all(a.knobs_differing(b) >= 3 for i, a in enumerate(picks) for b in picks[i + 1:])
    # each pick is the best-ranked config far enough from the earlier ones
    for n in range(1, 5):
        first = next(c for c in ranked if all(c.knobs_differing(p) >= 3 for p in picks[:n]))
        assert picks[n] == first
    # none of the other three differs from the first in all 5 knobs: the best-ranked of the rest fill in
    few = diverse_top(ranked[:4], 4, 5)
    assert few == ranked[:4]
    with pytest.raises(ValueError, match="k must be >= 1"):
        diverse_top(ranked, 0, 2)


def test_pick_distance_of_the_platforms():
    # tune's default: SPADE hedges its transferred models' errors (docs/decisions.md); CPU and GPU rank plainly
    assert create("spade", "spmm").pick_distance == 2
    assert create("cpu", "spmm").pick_distance == create("gpu", "spmm").pick_distance == 1
