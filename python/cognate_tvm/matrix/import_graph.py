"""Software dependency graphs: the import graph of the Python packages installed here.

Every ``.py`` file under the interpreter's site-packages is a node (its dotted
module name); each ``import a.b`` / ``from a.b import c`` in it is an edge to the
module it names, a standard-library or unscanned module becoming a node too. The
graph has what generated graphs lack: hub columns (``typing``, ``numpy``, ``os``)
imported by a large share of the modules, dense clusters inside packages, and a
numbering that groups each package (modules sorted by name).

The graph depends on what is installed (the Python version, every package and
its version), so corpora do not read it from the running environment: the package
ships one scan of it, `import_graph.npz` (16,477 modules and 113,910 imports of the
project's pinned environment on Python 3.11), and `import_graph_matrix` cuts its
pieces from that, the same on every machine. `python -m
cognate_tvm.matrix.import_graph --write FILE` scans this environment into a new
file; a corpus built from another file is another corpus (datasets record each
matrix's hash, and training refuses timings of a matrix that no longer builds the same).

`import_graph_matrix` cuts a piece of about `rows` nodes from it: the modules met
by a breadth-first walk (over edges both ways) from a seeded random module,
numbered by name or at random, the edges kept directed (importer -> imported) or
made symmetric.
"""
from __future__ import annotations

import argparse
import functools
import re
import sys
import sysconfig
from collections import deque
from pathlib import Path

import numpy as np
import scipy.sparse as sp

# module names after `import` and `from` at the start of a line (relative imports are resolved below)
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import|import[ \t]+([\w.]+(?:[ \t]*,[ \t]*[\w.]+)*))",
                     re.MULTILINE)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(text: str, module: str, is_package: bool) -> set[str]:
    found = set()
    for relative, absolute in _IMPORT.findall(text):
        if absolute:
            found.update(name.strip() for name in absolute.split(","))
            continue
        dots = len(relative) - len(relative.lstrip("."))
        if dots == 0:
            found.add(relative)
            continue
        # `from ..x import y` inside a.b.c: up `dots` levels from the module's package
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (dots - 1)] if dots > 1 else base
        name = ".".join(base + ([relative.lstrip(".")] if relative.lstrip(".") else []))
        if name:
            found.add(name)
    return found


def _scan(base: Path, edges: dict[str, set[str]]) -> None:
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base).parts
        if not all(part.isidentifier() for part in rel[:-1]):  # dist-info, data and script folders
            continue
        if rel[0] in ("site-packages", "dist-packages"):  # scanned as their own root, or not at all
            continue
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        module = _module_name(path, base)
        if module and module not in edges:
            edges[module] = _imports(text, module, path.name == "__init__.py")


@functools.lru_cache(maxsize=2)
def python_import_graph(roots: tuple[str, ...] | None = None) -> tuple[tuple[str, ...], sp.csr_matrix]:
    """(module names sorted, adjacency importer -> imported) of every module under `roots`
    (default: this interpreter's site-packages and standard library)."""
    paths = sysconfig.get_paths()
    edges: dict[str, set[str]] = {}
    for root in roots or (paths["purelib"], paths["stdlib"]):
        _scan(Path(root), edges)
    known = set(edges)
    targets = set()
    for module, imported in edges.items():
        # an import of a.b.c where only a.b is a module here (c being a name in it) points at a.b
        resolved = set()
        for name in imported:
            parts = name.split(".")
            while len(parts) > 1 and ".".join(parts) not in known:
                parts.pop()
            resolved.add(".".join(parts))
        resolved.discard(module)
        edges[module] = resolved
        targets |= resolved
    names = tuple(sorted(known | targets))
    index = {name: i for i, name in enumerate(names)}
    src = np.array([index[m] for m, imported in edges.items() for _ in imported], dtype=np.int64)
    dst = np.array([index[t] for imported in edges.values() for t in imported], dtype=np.int64)
    adjacency = sp.csr_matrix((np.ones(src.size), (src, dst)), shape=(len(names), len(names)))
    adjacency.sum_duplicates()
    adjacency.data[:] = 1.0
    return names, adjacency


SNAPSHOT = Path(__file__).with_name("import_graph.npz")


def write_snapshot(path: str | Path, roots: tuple[str, ...] | None = None) -> Path:
    """Scan `roots` (default: this environment) with `python_import_graph` into `path` (.npz)."""
    names, adjacency = python_import_graph(roots)
    adjacency = adjacency.tocsr()
    adjacency.sort_indices()
    # names as one UTF-8 text, a line each: numpy's fixed-width unicode array pads every name to the
    # longest in 4-byte characters, which even compressed doubles the file
    text = np.frombuffer("\n".join(names).encode(), dtype=np.uint8)
    np.savez_compressed(path, names_utf8=text, indptr=adjacency.indptr.astype(np.int32),
                        indices=adjacency.indices.astype(np.int32))
    return Path(path)


@functools.lru_cache(maxsize=2)
def load_snapshot(path: str | Path = SNAPSHOT) -> tuple[tuple[str, ...], sp.csr_matrix]:
    """(module names sorted, adjacency importer -> imported) of a scan written by `write_snapshot`."""
    with np.load(path) as data:
        names = tuple(data["names_utf8"].tobytes().decode().split("\n"))
        indptr, indices = data["indptr"], data["indices"]
    adjacency = sp.csr_matrix((np.ones(indices.size), indices, indptr), shape=(len(names), len(names)))
    return names, adjacency


def import_graph_matrix(rows: int, rng: np.random.Generator) -> sp.csr_matrix:
    """About `rows` modules of the shipped import graph (`SNAPSHOT`) around a random one (at most 3/4
    of the graph, so that pieces differ by seed)."""
    _, adjacency = load_snapshot()
    n = adjacency.shape[0]
    rows = min(rows, 3 * n // 4)
    undirected = (adjacency + adjacency.T).tocsr()
    seen = np.zeros(n, dtype=bool)
    picked: list[int] = []
    # walk from random starts until enough modules are met (a start's component may be small)
    while len(picked) < rows:
        start = int(rng.choice(np.flatnonzero(~seen)))
        seen[start] = True
        queue = deque([start])
        while queue and len(picked) < rows:
            node = queue.popleft()
            picked.append(node)
            neighbours = undirected.indices[undirected.indptr[node]:undirected.indptr[node + 1]]
            fresh = neighbours[~seen[neighbours]]
            seen[fresh] = True
            queue.extend(fresh.tolist())
    nodes = np.sort(np.array(picked))  # sorted by module name: packages stay together
    if rng.random() < 0.3:
        nodes = rng.permutation(nodes)
    piece = adjacency[nodes][:, nodes]
    if rng.random() < 0.5:
        piece = ((piece + piece.T) > 0).astype(np.float64)
    # a self loop per node: SpMM on a graph is usually A + I (a GNN layer), and no row is empty
    return (piece + sp.identity(piece.shape[0], format="csr")).tocsr()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Scan this environment's import graph into an .npz file.")
    parser.add_argument("--write", type=Path, required=True, help="the .npz file to write")
    args = parser.parse_args(argv)
    names, adjacency = load_snapshot(write_snapshot(args.write))
    print(f"{args.write}: {len(names)} modules, {adjacency.nnz} imports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
