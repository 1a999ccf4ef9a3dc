"""A fused CPU kernel of dot-product graph attention: SDDMM, edge softmax and SpMM in one pass.

For a sparse pattern A (rows: the nodes that attend, columns: the nodes
attended to) and per-head queries Q, keys K and values V, it computes, for
every row i and head h::

    s_e   = scale * Q[i, h] . K[j_e, h]             for the row's nonzeros e (columns j_e)
    a_e   = exp(s_e - max_e s_e) / sum_e exp(...)    (the softmax over the row)
    O[i, h] = sum_e a_e * V[j_e, h]

as FusedMM does: one parallel loop over rows, each row's scores kept in the
attention output and its accumulator in registers, so neither the [nnz, d]
gathered operands nor the unnormalised scores make a round trip through
memory, and K and V rows are each read once per edge. A row without nonzeros
gets O = 0. The attention weights a are written too ([heads, nnz], in the
pattern's CSR order), for the backward pass.

The kernel has no tunable config: its schedule is fixed (rows dealt round-robin
to the workers in chunks of `ROW_CHUNK`, as the CPU space's round-robin configs
do, because graph degrees are skewed; dot products and the value accumulation
vectorised over the head width). Head widths are padded with zero columns to a
multiple of the vector width (:func:`padded_dim`), which leaves the dot products
unchanged.

Kernel arguments, in order: ``m, ncols, nnz`` (int32), ``scale`` (float32),
``indptr`` (int32 [m + 1]), ``indices`` (int32 [nnz]), ``Q`` (float32
[m, heads * dim]), ``K`` ([ncols, heads * dim]), ``V`` ([ncols, heads *
value_dim]), then the outputs ``O`` ([m, heads * value_dim]) and ``P``
(attention weights, [heads, nnz]); dims padded.

The scores are written in TVMScript directly (not derived with schedule
primitives) for the reason given in :mod:`cognate_tvm.kernels.cpu`: the
per-row loops have data-dependent extents.
"""
from __future__ import annotations

from dataclasses import dataclass

from .cache import KernelCache, kernel_key
from .cpu_nest import ScriptWriter

# Bumped whenever the generated code changes, so stale cached libraries are not reused.
GENERATOR_VERSION = 1

# float32 lanes of one AVX-512 register; narrower heads use the next power of two.
MAX_LANES = 16
# Rows per round-robin chunk: small enough to spread hubs of a power-law graph over the workers,
# large enough that consecutive rows share cache lines of indptr and of the outputs.
ROW_CHUNK = 16


def lanes_for(dim: int) -> int:
    """Vector lanes for a head width: the next power of two >= dim, at most MAX_LANES."""
    lanes = 1
    while lanes < min(int(dim), MAX_LANES):
        lanes *= 2
    return lanes


def padded_dim(dim: int) -> int:
    """The head width the kernel computes with: `dim` rounded up to a multiple of its lanes."""
    lanes = lanes_for(dim)
    return -(-int(dim) // lanes) * lanes


@dataclass(frozen=True)
class AttentionSpec:
    """What a compiled attention kernel depends on (dims already padded); `key()` names it in the cache."""

    heads: int
    dim: int
    value_dim: int
    target: str
    workers: int

    def __post_init__(self):
        for name in ("heads", "dim", "value_dim", "workers"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"attention kernel: {name} must be >= 1, got {getattr(self, name)}")
        for name in ("dim", "value_dim"):
            if padded_dim(getattr(self, name)) != getattr(self, name):
                raise ValueError(f"attention kernel: {name} {getattr(self, name)} is not padded "
                                 f"(use padded_dim: {padded_dim(getattr(self, name))})")

    def key(self) -> str:
        import tvm

        return kernel_key({"kernel": "graph_attention", "heads": self.heads, "dim": self.dim,
                           "value_dim": self.value_dim, "target": self.target, "workers": self.workers,
                           "tvm": tvm.__version__, "generator": GENERATOR_VERSION})


class _AttentionWriter:
    """Writes the TVMScript of one attention kernel; see the module docstring."""

    def __init__(self, spec: AttentionSpec):
        self.spec = spec
        self.w = ScriptWriter()

    def vector(self, depth: int, width: int, body: str) -> None:
        """Loops over `width` columns as unrolled chunks of vector lanes (column index `col`) around `body`."""
        lanes = lanes_for(width)
        self.w(depth, f"for jo in T.unroll({width // lanes}):")
        self.w(depth + 1, f"for jv in T.vectorized({lanes}):")
        self.w(depth + 2, body.replace("col", f"(jo * {lanes} + jv)"))

    def source(self) -> str:
        s, w = self.spec, self.w
        heads, dim, vdim, workers = s.heads, s.dim, s.value_dim, s.workers
        lanes = lanes_for(dim)
        w(0, "@T.prim_func")
        w(0, "def main(m: T.int32, ncols: T.int32, nnz: T.int32, scale: T.float32, indptr_h: T.handle, "
             "indices_h: T.handle, q_h: T.handle, k_h: T.handle, v_h: T.handle, out_h: T.handle, "
             "p_h: T.handle):")
        w(1, 'T.func_attr({"global_symbol": "main", "tirx.noalias": True})')
        w(1, 'indptr = T.match_buffer(indptr_h, (m + 1,), "int32")')
        w(1, 'indices = T.match_buffer(indices_h, (nnz,), "int32")')
        w(1, f'Q = T.match_buffer(q_h, (m, {heads * dim}), "float32")')
        w(1, f'K = T.match_buffer(k_h, (ncols, {heads * dim}), "float32")')
        w(1, f'V = T.match_buffer(v_h, (ncols, {heads * vdim}), "float32")')
        w(1, f'O = T.match_buffer(out_h, (m, {heads * vdim}), "float32")')
        w(1, f'P = T.match_buffer(p_h, ({heads}, nnz), "float32")')
        step = workers * ROW_CHUNK
        row = f"((c1 * {workers} + wk) * {ROW_CHUNK} + c0)"
        w(1, f"for wk in T.parallel({workers}):")
        w(2, f"for c1 in T.serial(T.ceildiv(m, {step})):")
        w(3, f"for c0 in T.serial({ROW_CHUNK}):")
        w(4, f"if {row} < m:")
        w(5, f"for h in T.serial({heads}):")
        d = 6
        start, count = f"indptr[{row}]", f"indptr[{row} + 1] - indptr[{row}]"
        nz = f"({start} + e)"
        w(d, f'dot = T.alloc_buffer(({lanes},), "float32", scope="local")')
        w(d, f'acc = T.alloc_buffer(({vdim},), "float32", scope="local")')
        w(d, 'peak = T.alloc_buffer((1,), "float32", scope="local")')
        w(d, 'total = T.alloc_buffer((1,), "float32", scope="local")')
        w(d, 'peak[0] = T.min_value("float32")')
        w(d, "total[0] = T.float32(0)")
        # scores and their row maximum
        w(d, f"for e in T.serial({count}):")
        w(d + 1, f"for jv in T.vectorized({lanes}):")
        w(d + 2, "dot[jv] = T.float32(0)")
        self.vector(d + 1, dim, f"dot[jv] = dot[jv] + Q[{row}, h * {dim} + col] * "
                                f"K[indices[{nz}], h * {dim} + col]")
        live = lanes
        while live > 1:  # tree reduction of the lanes
            half = live // 2
            w(d + 1, f"for t in T.vectorized({half}):")
            w(d + 2, f"dot[t] = dot[t] + dot[t + {half}]")
            live = half
        w(d + 1, f"P[h, {nz}] = dot[0] * scale")
        w(d + 1, f"peak[0] = T.max(peak[0], dot[0] * scale)")
        # exponentials, their sum and the weighted values
        self.vector(d, vdim, "acc[col] = T.float32(0)")
        w(d, f"for e in T.serial({count}):")
        w(d + 1, f"P[h, {nz}] = T.exp(P[h, {nz}] - peak[0])")
        w(d + 1, f"total[0] = total[0] + P[h, {nz}]")
        self.vector(d + 1, vdim, f"acc[col] = acc[col] + P[h, {nz}] * V[indices[{nz}], h * {vdim} + col]")
        # normalise (an empty row has total 0 and writes zeros)
        w(d, "if total[0] > T.float32(0):")
        w(d + 1, f"for e in T.serial({count}):")
        w(d + 2, f"P[h, {nz}] = P[h, {nz}] / total[0]")
        self.vector(d + 1, vdim, f"O[{row}, h * {vdim} + col] = acc[col] / total[0]")
        w(d, "else:")
        self.vector(d + 1, vdim, f"O[{row}, h * {vdim} + col] = T.float32(0)")
        return w.text()


def attention_source(spec: AttentionSpec) -> str:
    """TVMScript of the attention kernel of `spec`."""
    return _AttentionWriter(spec).source()


def build_attention_kernel(heads: int, dim: int, value_dim: int, target, *, cache: KernelCache | None = None):
    """The compiled attention kernel (entry point "main") for padded head widths, through `cache` when given."""
    import tvm

    spec = AttentionSpec(int(heads), int(dim), int(value_dim), str(target), int(target.attrs.get("num-cores", 1)))

    def build():
        return tvm.tirx.build(tvm.script.from_source(attention_source(spec)), target=target)

    return build() if cache is None else cache.get(spec.key(), build)
