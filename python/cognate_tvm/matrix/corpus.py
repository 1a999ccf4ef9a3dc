"""Corpus specs: which matrices a collection or an experiment runs on.

A spec is ``synthetic:N[:SEED[:MIN-MAX]]`` (N generated matrices from every
family, log-uniform sizes, see `generate_corpus`), ``realistic:N[:SEED[:MIN-MAX]]``
(the same from the families of `realistic`: FEM-like block rows, community graphs,
dense rows, scikit-fem stiffness matrices, import-graph pieces) or a directory of
matrix files (.mtx, .npz, edge lists ``.edges``/``.txt``/``.el``), read lazily.
``MIN-MAX`` fixes the corpus's row range in the spec itself (names hold the
sizes, so a spec that keeps its range names the same matrices wherever it is
read, e.g. beside a corpus of another range in one training run); without it the
caller's ``min_rows`` / ``max_rows`` apply.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import scipy.sparse as sp

from ..errors import CognateError
from .generators import CorpusEntry, generate_corpus
from .io import load_matrix
from .realistic import RealisticEntry, realistic_corpus

MATRIX_SUFFIXES = (".mtx", ".npz", ".edges", ".el", ".txt")
_SYNTHETIC = re.compile(r"^(synthetic|realistic):(\d+)(?::(\d+)(?::(\d+)-(\d+))?)?$")


class CorpusSpecError(CognateError, ValueError):
    """A corpus spec that is none of ``synthetic:N[:SEED[:MIN-MAX]]``, ``realistic:N[:SEED[:MIN-MAX]]`` or a
    directory of matrices."""


@dataclass(frozen=True)
class FileEntry:
    """A matrix file of a corpus directory, read when built."""

    name: str
    path: str

    def build(self) -> sp.csr_matrix:
        return load_matrix(self.path)


def load_corpus(spec: str | os.PathLike, *, min_rows: int = 1000, max_rows: int = 1_000_000
                ) -> list[CorpusEntry | RealisticEntry | FileEntry]:
    """The entries (each with ``.name`` and ``.build()``) of corpus `spec`, in a fixed order."""
    text = str(spec)
    match = _SYNTHETIC.match(text)
    if match:
        kind, count, seed = match.group(1), int(match.group(2)), int(match.group(3) or 0)
        if match.group(4) is not None:
            min_rows, max_rows = int(match.group(4)), int(match.group(5))
        if count < 1:
            raise CorpusSpecError(f"corpus {text!r}: N must be >= 1")
        if not 1 <= min_rows <= max_rows:
            raise CorpusSpecError(f"corpus sizes need 1 <= min_rows <= max_rows, got {min_rows}, {max_rows}")
        make = generate_corpus if kind == "synthetic" else realistic_corpus
        return make(count, seed=seed, min_rows=min_rows, max_rows=max_rows)
    if text.startswith(("synthetic", "realistic")):
        kind = text.split(":")[0]
        raise CorpusSpecError(f"corpus {text!r}: expected '{kind}:N', '{kind}:N:SEED' or '{kind}:N:SEED:MIN-MAX' "
                              "with integers")
    path = Path(text)
    if not path.is_dir():
        raise CorpusSpecError(f"corpus {text!r} is neither 'synthetic:N[:SEED]' nor an existing directory")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in MATRIX_SUFFIXES)
    if not files:
        raise CorpusSpecError(f"corpus directory {path} holds no matrix files ({', '.join(MATRIX_SUFFIXES)})")
    return [FileEntry(p.stem, str(p)) for p in files]
