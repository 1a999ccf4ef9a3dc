"""Finite-element matrices assembled with scikit-fem on generated meshes.

A stiffness matrix's pattern is set by the mesh, the element and the unknowns
per node; its row order by how the code numbers the unknowns. Each matrix here is
a real assembly (`skfem.asm`) of

- ``fem_scalar``: the Laplacian with Lagrange elements P1-P3 on triangles, Q1-Q2
  on quadrilaterals, P1-P2 on tetrahedra or Q1-Q2 on hexahedra;
- ``fem_elasticity``: linear elasticity, a vector element (P1-P2 on triangles or
  tetrahedra, Q1 on quadrilaterals or hexahedra) whose unknowns sit node by node,
  so rows come in dense blocks of 2 or 3;

on a mesh of the unit square or cube that is either a jittered tensor grid or a
Delaunay triangulation of random points (unstructured, as a mesher gives), with
the unknowns numbered as scikit-fem numbers them (vertices, then edges, faces,
interiors), by reverse Cuthill-McKee, or at random. Each is deterministic by seed
and `rows` sets the size within a factor of about 1.5 (meshes come in whole cells).
"""
from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

# unknowns per mesh vertex, roughly, for each element on a tensor mesh (P2 adds the edges, P3 the
# edges twice and the faces): how many vertices a mesh needs for about `rows` rows
_SCALAR = {
    2: [("tri", "P1", 1.0), ("tri", "P2", 4.0), ("tri", "P3", 9.0), ("quad", "Q1", 1.0), ("quad", "Q2", 4.0)],
    3: [("tet", "P1", 1.0), ("tet", "P2", 8.0), ("hex", "Q1", 1.0), ("hex", "Q2", 8.0)],
}
_VECTOR = {
    2: [("tri", "P1", 1.0), ("tri", "P2", 4.0), ("quad", "Q1", 1.0)],
    3: [("tet", "P1", 1.0), ("tet", "P2", 8.0), ("hex", "Q1", 1.0)],
}


def _element(shape: str, order: str):
    import skfem

    return {
        ("tri", "P1"): skfem.ElementTriP1, ("tri", "P2"): skfem.ElementTriP2, ("tri", "P3"): skfem.ElementTriP3,
        ("quad", "Q1"): skfem.ElementQuad1, ("quad", "Q2"): skfem.ElementQuad2,
        ("tet", "P1"): skfem.ElementTetP1, ("tet", "P2"): skfem.ElementTetP2,
        ("hex", "Q1"): skfem.ElementHex1, ("hex", "Q2"): skfem.ElementHex2,
    }[(shape, order)]()


def _delaunay(points: np.ndarray):
    """Simplices of the Delaunay triangulation of `points`, degenerate ones (slivers) dropped."""
    from scipy.spatial import Delaunay

    simplices = Delaunay(points).simplices
    corners = points[simplices]
    edges = corners[:, 1:] - corners[:, :1]
    volume = np.abs(np.linalg.det(edges))
    return simplices[volume > 1e-9 * np.median(volume)]


def _mesh(shape: str, vertices: int, rng: np.random.Generator):
    """A mesh of about `vertices` vertices: a jittered tensor grid, or (simplices) Delaunay of random points."""
    import skfem

    dims = 2 if shape in ("tri", "quad") else 3
    # a random aspect ratio: the grid's lexicographic numbering then has rows of another length
    aspect = np.exp(rng.uniform(-0.7, 0.7, dims))
    per_dim = np.maximum(3, np.round((vertices / aspect.prod()) ** (1.0 / dims) * aspect)).astype(int)
    if shape in ("tri", "tet") and rng.random() < 0.5:
        count = int(per_dim.prod())
        corners = np.array(np.meshgrid(*[[0.0, 1.0]] * dims)).reshape(dims, -1).T
        points = np.vstack([corners, rng.random((count, dims))])
        # a mesher numbers vertices as it sweeps the domain: sort them cell by cell of a coarse grid
        cells = max(2, int(round(count ** (1.0 / dims) / 4)))
        cell = np.minimum(np.floor(points * cells), cells - 1).astype(np.int64) @ (cells ** np.arange(dims))
        points = points[np.lexsort((points[:, 0], cell))]
        kind = skfem.MeshTri if shape == "tri" else skfem.MeshTet
        return kind(points.T.copy(), _delaunay(points).T.copy())
    axes = [np.linspace(0.0, 1.0, n) for n in per_dim]
    kind = {"tri": skfem.MeshTri, "quad": skfem.MeshQuad, "tet": skfem.MeshTet, "hex": skfem.MeshHex}[shape]
    mesh = kind.init_tensor(*axes)
    # move interior vertices by up to a third of a cell: a distorted mesh, same pattern
    inside = np.all((mesh.p > 1e-12) & (mesh.p < 1 - 1e-12), axis=0)
    step = (1.0 / (per_dim - 1))[:, None]
    p = mesh.p.copy()
    p[:, inside] += rng.uniform(-1 / 3, 1 / 3, (dims, int(inside.sum()))) * step
    return kind(p, mesh.t)


def _renumber(matrix: sp.csr_matrix, rng: np.random.Generator) -> sp.csr_matrix:
    """Unknowns as scikit-fem numbers them (half the time), by reverse Cuthill-McKee, or at random."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    draw = rng.random()
    if draw < 0.5:
        return matrix
    if draw < 0.8:
        order = reverse_cuthill_mckee(matrix, symmetric_mode=True)
    else:
        order = rng.permutation(matrix.shape[0])
    return matrix[order][:, order]


def _assemble(rows: int, rng: np.random.Generator, vector: bool) -> sp.csr_matrix:
    import skfem
    from skfem.models.elasticity import lame_parameters, linear_elasticity
    from skfem.models.poisson import laplace

    quiet = logging.getLogger("skfem")
    if quiet.level == logging.NOTSET:  # scikit-fem logs every basis and assembly at INFO; a corpus builds hundreds
        quiet.setLevel(logging.WARNING)
    dims = int(rng.choice([2, 3]))
    choices = (_VECTOR if vector else _SCALAR)[dims]
    shape, order, per_vertex = choices[int(rng.integers(len(choices)))]
    components = dims if vector else 1
    mesh = _mesh(shape, max(8, int(rows / (per_vertex * components))), rng)
    element = _element(shape, order)
    if vector:
        basis = skfem.Basis(mesh, skfem.ElementVector(element, dims))
        form = linear_elasticity(*lame_parameters(1.0, float(rng.uniform(0.2, 0.45))))
    else:
        basis = skfem.Basis(mesh, element)
        form = laplace
    return _renumber(_with_element_pattern(skfem.asm(form, basis).tocsr(), basis.element_dofs), rng)


def _with_element_pattern(matrix: sp.csr_matrix, element_dofs: np.ndarray) -> sp.csr_matrix:
    """`matrix` storing every pair of unknowns that share an element: assembly drops the entries that
    cancel to 0.0 (elasticity's x-y couplings on right angles, one side only when rounding differs),
    a code stores the whole element pattern."""
    per_element = element_dofs.shape[0]
    rows = np.repeat(element_dofs, per_element, axis=0).ravel()
    cols = np.tile(element_dofs, (per_element, 1)).ravel()
    coo = matrix.tocoo()
    full = sp.csr_matrix((np.concatenate([coo.data, np.zeros(rows.size)]),
                          (np.concatenate([coo.row, rows]), np.concatenate([coo.col, cols]))), shape=matrix.shape)
    full.sum_duplicates()  # keeps the explicit zeros
    return full


def fem_scalar(rows: int, rng: np.random.Generator) -> sp.csr_matrix:
    """The Laplacian's stiffness matrix: P1-P3 / Q1-Q2 in 2-D, P1-P2 / Q1-Q2 in 3-D (see the module docstring)."""
    return _assemble(rows, rng, vector=False)


def fem_elasticity(rows: int, rng: np.random.Generator) -> sp.csr_matrix:
    """Linear elasticity's stiffness matrix, 2 or 3 unknowns per node (see the module docstring)."""
    return _assemble(rows, rng, vector=True)
