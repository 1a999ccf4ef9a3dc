"""The TVMScript loop nest of each (op, CPU config, dense width, dense type): the code generator behind
:mod:`cognate_tvm.kernels.cpu`.

The nest is written directly in the scheduled form rather than derived by
``s_tir.Schedule`` primitives: the sparse loop's extent is data dependent
(``indptr[i + 1] - indptr[i]``), and reordering it against the dense loops,
hoisting accumulators across panels, round-robin and nonzero-balanced row
distribution are simpler to state as the nest they produce.
"""
from __future__ import annotations

from ..ops import Op, get_op
from ..space.cpu import CPUConfig, accumulator_start, nest_order, writes_output_once
from .cpu_operands import check_dense_dtype, paired_lanes
from .cpu_ranges import BalancedRanges
from .cpu_stream import PRAGMA, store_function_ir, store_statement

# Bumped whenever the generated code changes, so stale cached libraries are not reused.
GENERATOR_VERSION = 8


class ScriptWriter:
    """Indented TVMScript lines."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _NestGenerator(BalancedRanges):
    """Writes the TVMScript of one (op, config, feat) kernel; see module docstring."""

    def __init__(self, op: Op, config: CPUConfig, feat: int, workers: int, dtype: str = "float32"):
        self.op, self.config = op, config
        self.dtype = check_dense_dtype(dtype)
        self.block = config.block_rows
        # the row loops run over register blocks of `block` rows (one row each when unblocked)
        self.units = "m" if self.block == 1 else f"T.ceildiv(m, {self.block})"
        self.csr = config.single_panel
        self.sddmm = op.name == "sddmm"
        self.tile_i = config.i_tile
        self.tile_j = config.dense_tile(feat)
        self.width = config.padded_width(feat)
        self.lanes = max(1, config.vector)
        self.pair = paired_lanes(op, config, feat, self.dtype)  # 0: dense operands read element by element
        self.workers = max(1, int(workers))
        self.order = nest_order(config)
        self.w = ScriptWriter()
        self.depth = 1
        self.ends: list[int] = []

    # index expressions of the loops opened so far
    def i1(self) -> str:
        chunk = self.config.chunk
        return f"((c1 * {self.workers} + w) * {chunk} + c0)" if self.config.parallel and chunk > 0 else "i1"

    def row(self) -> str:
        return self.i1() if self.tile_i == 1 else f"({self.i1()} * {self.tile_i} + i0)"

    def row_ptr(self, offset: str = "") -> str:
        base = self.row() if self.csr else f"k1 * ({self.units} + 1) + {self.row()}"
        return f"indptr[{base}{offset}]"

    def nz(self) -> str:
        return f"({self.row_ptr()} + k0)"

    def j1(self) -> str:
        return "0" if self.width == self.tile_j else "j1"

    def load(self, read: str) -> str:
        """A read of a dense operand, widened to float32 when it is stored in bfloat16."""
        return read if self.dtype == "float32" else f'T.Cast("float32", {read})'

    def chunks(self) -> int:
        return self.tile_j // self.lanes

    def col(self, vector: bool, jo: str = "jo") -> str:
        if not vector:
            return f"({self.j1()} * {self.tile_j} + j0)"
        inner = "jv" if self.chunks() == 1 else f"{jo} * {self.lanes} + jv"
        return f"({self.j1()} * {self.tile_j} + {inner})"

    def lane(self, jo: str = "jo") -> str:
        return "jv" if self.chunks() == 1 else f"{jo} * {self.lanes} + jv"

    def dense_read(self, buffer: str, row: str, jo: str = "jo", half: int | None = None) -> str:
        """Element (`row`, chunk `jo`, lane jv) of a dense operand as float32. In the paired layout the
        caller gives the half of the word it wants (0: chunk 2q, 1: chunk 2q + 1; see `dense_loops`)."""
        if not self.pair:
            return self.load(f"{buffer}[{row}, {self.col(True, jo)}]")
        pairs = self.chunks() // 2
        word = f"{buffer}[{row}, {self.j1()} * {self.tile_j // 2} + {'jp * ' + str(self.lanes) + ' + ' if pairs > 1 else ''}jv]"
        bits = f"{word} << T.int32(16)" if half == 0 else f"T.bitwise_and({word}, T.int32(-65536))"
        return f'T.reinterpret("float32", {bits})'

    def dense_loops(self, body) -> None:
        """The dense tile's loops around `body(jo, half)` (a statement reading chunk `jo`): one
        statement per chunk, or in the paired layout two per vector of words (the low halves are
        chunk 2q, the high halves chunk 2q + 1)."""
        if not self.pair:
            self.vector_loops(body("jo", None))
            return
        pairs = self.chunks() // 2
        if pairs > 1:
            self.open(f"for jp in T.{'unroll' if self.config.unroll else 'serial'}({pairs}):")
        self.open(f"for jv in T.vectorized({self.lanes}):")
        for half in (0, 1):
            self.w(self.depth, body(f"(jp * 2 + {half})" if pairs > 1 else str(half), half))
        self.close(2 if pairs > 1 else 1)

    # loops
    def open(self, header: str) -> None:
        self.w(self.depth, header)
        self.depth += 1

    def close(self, levels: int) -> None:
        self.depth -= levels

    def open_loop(self, name: str) -> int:
        """Open `name`'s loop(s) (and guards); return how many levels were opened."""
        tiles = f"T.ceildiv({self.units}, {self.tile_i})"
        if name == "i1":
            if self.config.parallel and self.config.balanced:
                return self.open_balanced(tiles)
            if self.config.parallel and self.config.chunk:
                step = self.workers * self.config.chunk
                self.open(f"for w in T.parallel({self.workers}):")
                self.open(f"for c1 in T.serial(T.ceildiv({tiles}, {step})):")
                self.open(f"for c0 in T.serial({self.config.chunk}):")
                self.open(f"if {self.i1()} < {tiles}:")
                return 4
            kind = "parallel" if self.config.parallel else "serial"
            self.open(f"for i1 in T.{kind}({tiles}):")
            return 1
        if name == "i0":
            if self.tile_i == 1:
                return 0
            self.open(f"for i0 in T.serial({self.tile_i}):")
            self.open(f"if {self.row()} < {self.units}:")
            return 2
        if name == "k1":
            self.open("for k1 in T.serial(npanels):")
            return 1
        if name == "k0":
            self.open(f"for k0 in T.serial({self.row_ptr(' + 1')} - {self.row_ptr()}):")
            return 1
        if name == "j1":
            if self.width == self.tile_j:
                return 0
            self.open(f"for j1 in T.serial({self.width // self.tile_j}):")
            return 1
        if name == "j0":
            self.open(f"for j0 in T.serial({self.tile_j}):")
            return 1
        raise AssertionError(name)

    def vector_loops(self, body: str, *, size: int | None = None) -> None:
        """The dense tile as (unrolled) chunks of vectorized lanes around `body`."""
        size = self.tile_j if size is None else size
        opened = 0
        if size // self.lanes > 1:
            kind = "unroll" if self.config.unroll else "serial"
            self.open(f"for jo in T.{kind}({size // self.lanes}):")
            opened += 1
        self.open(f"for jv in T.vectorized({self.lanes}):")
        self.w(self.depth, body)
        self.close(opened + 1)

    # the kernel
    def source(self) -> str:
        w = self.w
        w(0, "@T.prim_func")
        args = ["m: T.int32", "ncols: T.int32", "nnz: T.int32", "npanels: T.int32",
                "indptr_h: T.handle", "indices_h: T.handle", "vals_h: T.handle"]
        if self.sddmm and not self.csr:
            args.append("perm_h: T.handle")
        dense = ("x_h", "y_h") if self.sddmm else ("b_h",)
        args += [f"{d}: T.handle" for d in dense] + ["out_h: T.handle"]
        w(0, f"def main({', '.join(args)}):")
        w(1, 'T.func_attr({"global_symbol": "main", "tirx.noalias": True})')
        w(1, f'indptr = T.match_buffer(indptr_h, (npanels * ({self.units} + 1),), "int32")')
        w(1, 'indices = T.match_buffer(indices_h, (nnz,), "int32")')
        w(1, f'vals = T.match_buffer(vals_h, (nnz{"" if self.block == 1 else f" * {self.block}"},), "float32")')
        if self.sddmm:
            if not self.csr:
                w(1, 'perm = T.match_buffer(perm_h, (nnz,), "int32")')
            w(1, f'X = T.match_buffer(x_h, (m, {self.dense_shape()}), "{self.dense_dtype()}")')
            w(1, f'Y = T.match_buffer(y_h, (ncols, {self.dense_shape()}), "{self.dense_dtype()}")')
            w(1, 'O = T.match_buffer(out_h, (nnz,), "float32")')
        else:
            w(1, f'B = T.match_buffer(b_h, (ncols, {self.dense_shape()}), "{self.dense_dtype()}")')
            w(1, f'C = T.match_buffer(out_h, (m, {self.width}), "float32")')
        if self.config.stream:  # the body inside the attribute that links the store function
            self.open(f"with T.attr(0, {PRAGMA!r}, {store_function_ir(self.lanes)!r}):")
        (self._sddmm if self.sddmm else self._spmm)()
        return w.text()

    def dense_shape(self) -> int:
        return self.width // 2 if self.pair else self.width

    def dense_dtype(self) -> str:
        return "int32" if self.pair else self.dtype

    def _zero_output(self) -> None:
        kind = "parallel" if self.config.parallel else "serial"
        if self.sddmm:
            self.open(f"for n in T.{kind}(nnz):")
            self.w(self.depth, "O[n] = T.float32(0)")
            self.close(1)
        else:
            self.open(f"for r in T.{kind}(m):")
            self.open(f"for c in T.vectorized({self.width}):")
            self.w(self.depth, "C[r, c] = T.float32(0)")
            self.close(2)

    def _spmm(self) -> None:
        order = self.order
        if self.block > 1:  # plain CSR in the register-accumulator order (space/cpu.py checks it)
            self._nest(0, order.index("k0"), self._spmm_blocked)
        elif (start := accumulator_start(order)) is not None:
            # A register accumulator for the dense tile spans the run of sparse loops around j0.
            covers_all = writes_output_once(self.config)  # the accumulator holds every panel's nonzeros
            if not covers_all:
                self._zero_output()
            store = "=" if covers_all else "+="
            self._nest(0, start, lambda: self._spmm_accumulated(start, store))
        elif order[-1] == "j0":
            self._zero_output()
            self._nest(0, len(order) - 1, lambda: self.dense_loops(lambda jo, half: (
                f"C[{self.row()}, {self.col(True, jo)}] = C[{self.row()}, {self.col(True, jo)}] "
                f"+ vals[{self.nz()}] * {self.dense_read('B', f'indices[{self.nz()}]', jo, half)}")))
        else:  # sparse loop innermost: a scalar sum over the nonzeros per output element
            if not self.csr:
                self._zero_output()
            self._nest(0, len(order) - 1, self._spmm_scalar)

    def _spmm_accumulated(self, start: int, store: str) -> None:
        self.w(self.depth, f'acc = T.alloc_buffer(({self.tile_j},), "float32", scope="local")')
        self.vector_loops(f"acc[{self.lane()}] = T.float32(0)")
        self._nest(start, len(self.order) - 1, lambda: self.dense_loops(lambda jo, half: (
            f"acc[{self.lane(jo)}] = acc[{self.lane(jo)}] + vals[{self.nz()}] * "
            f"{self.dense_read('B', f'indices[{self.nz()}]', jo, half)}")))
        if store == "=":
            self.store_output(self.row())
            return
        out = f"C[{self.row()}, {self.col(True)}]"
        self.vector_loops(f"{out} = {out} + acc[{self.lane()}]")

    def store_output(self, row: str, first: str = "") -> None:
        """C[row, dense tile] = acc[first + lane] for every lane: vector stores, or with `config.stream`
        one streaming store per vector chunk (:mod:`cognate_tvm.kernels.cpu_stream`)."""
        if not self.config.stream:
            self.vector_loops(f"C[{row}, {self.col(True)}] = acc[{first}{self.lane()}]")
            return
        chunks = self.chunks()
        if chunks > 1:
            self.open(f"for jo in T.{'unroll' if self.config.unroll else 'serial'}({chunks}):")
        lane = "jo * " + str(self.lanes) if chunks > 1 else "0"
        address = f"T.address_of(C[{row}, {self.j1()} * {self.tile_j} + {lane}])"
        self.w(self.depth, store_statement(address, f"acc[T.ramp({first}{lane}, 1, {self.lanes})]", self.lanes))
        self.close(1 if chunks > 1 else 0)

    def _spmm_blocked(self) -> None:
        """A register block of `block` rows: each slot's B row is loaded once and feeds every row's
        accumulator (rows unrolled between the dense chunk and its vector lanes)."""
        rows, tile = self.block, self.tile_j
        lane = f"rr * {tile} + {self.lane()}"
        self.w(self.depth, f'acc = T.alloc_buffer(({rows * tile},), "float32", scope="local")')
        self.open(f"for rr in T.unroll({rows}):")
        self.vector_loops(f"acc[{lane}] = T.float32(0)")
        self.close(1)
        self.open_loop("k0")
        # the rows sit between the dense chunks and the lanes, so dense_loops' nest does not fit here
        outer = self.chunks() // 2 if self.pair else self.chunks()
        name = "jp" if self.pair else "jo"
        if outer > 1:
            self.open(f"for {name} in T.{'unroll' if self.config.unroll else 'serial'}({outer}):")
        self.open(f"for rr in T.unroll({rows}):")
        self.open(f"for jv in T.vectorized({self.lanes}):")

        def update(jo: str, half: int | None) -> str:
            slot = f"rr * {tile} + {self.lane(jo)}"
            return (f"acc[{slot}] = acc[{slot}] + vals[{self.nz()} * {rows} + rr] * "
                    f"{self.dense_read('B', f'indices[{self.nz()}]', jo, half)}")

        halves = [(f"(jp * 2 + {h})" if outer > 1 else str(h), h) for h in (0, 1)] if self.pair else [("jo", None)]
        for jo, half in halves:
            self.w(self.depth, update(jo, half))
        self.close(4 if outer > 1 else 3)
        row = f"{self.row()} * {rows} + rr"
        self.open(f"for rr in T.unroll({rows}):")
        self.open(f"if {row} < m:")
        self.store_output(row, f"rr * {tile} + ")
        self.close(2)

    def _spmm_scalar(self) -> None:
        self.w(self.depth, 'acc = T.alloc_buffer((1,), "float32", scope="local")')
        self.w(self.depth, "acc[0] = T.float32(0)")
        self.open_loop("k0")
        self.w(self.depth, f"acc[0] = acc[0] + vals[{self.nz()}] * "
                           f"{self.load(f'B[indices[{self.nz()}], {self.col(False)}]')}")
        self.close(1)
        out = f"C[{self.row()}, {self.col(False)}]"
        self.w(self.depth, f"{out} = acc[0]" if self.csr else f"{out} = {out} + acc[0]")

    def _sddmm(self) -> None:
        order = self.order
        if order[-1] == "k0":  # j0 outside the sparse loop: scalar updates of each output
            self._zero_output()
            out = f"O[perm[{self.nz()}]]" if not self.csr else f"O[{self.nz()}]"
            body = (f"{out} = {out} + vals[{self.nz()}] * {self.load(f'X[{self.row()}, {self.col(False)}]')} * "
                    f"{self.load(f'Y[indices[{self.nz()}], {self.col(False)}]')}")
            self._nest(0, len(order), lambda: self.w(self.depth, body))
            return
        k0 = order.index("k0")
        whole_dot = "j1" in order[k0:] or self.width == self.tile_j
        if not whole_dot:
            self._zero_output()
        self._nest(0, k0 + 1, lambda: self._sddmm_dot(k0, whole_dot))

    def _sddmm_dot(self, k0: int, whole_dot: bool) -> None:
        size = self.tile_j if self.config.unroll else self.lanes
        self.w(self.depth, f'acc = T.alloc_buffer(({size},), "float32", scope="local")')
        self.vector_loops(f"acc[{self.lane() if self.config.unroll else 'jv'}] = T.float32(0)", size=size)

        def update(jo: str, half: int | None) -> str:
            slot = self.lane(jo) if self.config.unroll else "jv"
            return (f"acc[{slot}] = acc[{slot}] + {self.dense_read('X', self.row(), jo, half)} * "
                    f"{self.dense_read('Y', f'indices[{self.nz()}]', jo, half)}")

        self._nest(k0 + 1, len(self.order) - 1, lambda: self.dense_loops(update))
        # Tree reduction of the lanes: ceil(log2(size)) folding steps, each one vector add
        # (an odd count folds its upper half onto the lower, keeping the middle element).
        live = size
        while live > 1:
            half, rest = live // 2, live - live // 2
            self.open(f"for t in T.vectorized({half}):")
            self.w(self.depth, f"acc[t] = acc[t] + acc[t + {rest}]")
            self.close(1)
            live = rest
        out = f"O[perm[{self.nz()}]]" if not self.csr else f"O[{self.nz()}]"
        value = f"vals[{self.nz()}] * acc[0]"
        self.w(self.depth, f"{out} = {value}" if whole_dot else f"{out} = {out} + {value}")

    def _nest(self, first: int, last: int, inner) -> None:
        """Open loops order[first:last], call `inner()` in the innermost body, close them."""
        opened = [self.open_loop(name) for name in self.order[first:last]]
        inner()
        self.close(sum(opened))


def kernel_source(op: str | Op, config: CPUConfig, feat: int, *, workers: int, dtype: str = "float32") -> str:
    """TVMScript of the kernel for `op`, `config`, dense width `feat` and dense element type `dtype`.

    `workers` is the number of parallel tasks of round-robin configs (chunk > 0),
    normally the target's core count.
    """
    return _NestGenerator(get_op(op), config, int(feat), workers, dtype).source()
