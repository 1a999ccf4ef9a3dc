import numpy as np
import pytest

from cognate_tvm.errors import UnknownKindError
from cognate_tvm.matrix import FAMILIES, generate, generate_corpus, matrix_stats


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_is_deterministic_and_canonical(family):
    a = generate(family, 2000, seed=3)
    b = generate(family, 2000, seed=3)
    c = generate(family, 2000, seed=4)
    assert (a != b).nnz == 0
    assert a.nnz > 0 and a.has_sorted_indices and np.isfinite(a.data).all()
    assert 0.5 * 2000 <= a.shape[0] <= 1.5 * 2000
    assert a.shape != c.shape or (a != c).nnz > 0 or family.startswith("stencil")


def test_permutation_keeps_nnz_and_changes_layout():
    plain = generate("stencil2d", 4000, seed=1)
    shuffled = generate("stencil2d", 4000, seed=1, permute=True)
    assert plain.nnz == shuffled.nnz and plain.shape == shuffled.shape
    assert matrix_stats(shuffled).bandwidth > 10 * matrix_stats(plain).bandwidth


def test_families_differ_in_structure():
    stats = {f: matrix_stats(generate(f, 5000, seed=0)) for f in FAMILIES}
    assert stats["rmat"].row_len_max > 10 * stats["stencil2d"].row_len_max
    assert stats["banded"].bandwidth < stats["uniform"].bandwidth
    assert stats["bipartite"].rows != stats["bipartite"].cols


def test_large_sizes():
    m = generate("road", 1_000_000, seed=0)
    assert m.shape[0] == 1_000_000


def test_corpus_covers_families_and_is_reproducible():
    corpus = generate_corpus(24, seed=9, min_rows=1000, max_rows=3000)
    assert corpus == generate_corpus(24, seed=9, min_rows=1000, max_rows=3000)
    assert {e.family for e in corpus} == set(FAMILIES)
    assert len({e.name for e in corpus}) == 24
    m = corpus[0].build()
    assert (m != corpus[0].build()).nnz == 0


def test_bad_arguments():
    with pytest.raises(UnknownKindError, match="valid: .*rmat"):
        generate("nope", 1000, seed=0)
    with pytest.raises(ValueError, match="rows"):
        generate("rmat", 3, seed=0)
