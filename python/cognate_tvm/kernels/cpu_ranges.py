"""Balanced row ranges of the CPU loop nest (`CPUConfig.balanced`): each parallel worker takes one
contiguous range of row tiles holding an equal share of the nonzeros, found by a binary search on the row
pointers inside the kernel. A part of :class:`cognate_tvm.kernels.cpu_nest._NestGenerator`, kept apart
because it is one concept with its own index arithmetic.
"""
from __future__ import annotations


class BalancedRanges:
    """The balanced-range loops of the nest generator (which gives `w`, `depth`, `open`, `close`,
    `workers`, `csr`, `order`, `tile_i` and `units`)."""

    def open_balanced(self, tiles: str) -> int:
        """One contiguous range of row tiles per worker, holding 1/workers of the nonzeros: worker w's range
        starts at the first tile whose first nonzero is at or past w/workers of them (a binary search on
        the row pointers, 32 halvings, enough for any int32 count) and ends where worker w + 1's starts;
        the last one runs to the end, so trailing empty rows are written too. With column panels the share
        is of panel k1's nonzeros inside its loop, else of every panel's (each probe sums their pointers)."""
        workers = self.workers
        self.open(f"for w in T.parallel({workers}):")
        self.w(self.depth, 'edge = T.alloc_buffer((2,), "int32", scope="local")')
        self.w(self.depth, 'span = T.alloc_buffer((2,), "int32", scope="local")')
        summed = not self.csr and "k1" not in self.order[:self.order.index("i1")]
        if summed:
            self.w(self.depth, 'count = T.alloc_buffer((2,), "int64", scope="local")')
            self.count_before(tiles, slot=1)
        self.open("for e in T.serial(2):")
        self.w(self.depth, "span[0] = 0")
        self.w(self.depth, f"span[1] = {tiles}")
        self.open("for halving in T.serial(32):")
        self.open("if span[0] < span[1]:")
        mid = "T.shift_right(span[0] + span[1], 1)"
        if summed:
            self.count_before(mid, slot=0)
            before, total = "count[0]", "count[1]"
        else:
            before, total = (self.nonzeros_before(t, None if self.csr else "k1") for t in (mid, tiles))
        self.open(f'if {before} * {workers} < T.Cast("int64", w + e) * {total}:')
        self.w(self.depth, f"span[0] = {mid} + 1")
        self.close(1)
        self.open("else:")
        self.w(self.depth, f"span[1] = {mid}")
        self.close(3)
        self.w(self.depth, f"edge[e] = T.if_then_else(w + e == {workers}, {tiles}, span[0])")
        self.close(1)
        self.open("for i1 in T.serial(edge[0], edge[1]):")
        return 2

    def nonzeros_before(self, tile: str, panel: str | None) -> str:
        """The nonzeros in the rows before row tile `tile`: of plain CSR, or of column panel `panel`."""
        row = f"T.min({tile} * {self.tile_i}, {self.units})"
        if panel is None:
            return f'T.Cast("int64", indptr[{row}])'
        base = f"{panel} * ({self.units} + 1)"
        return f'T.Cast("int64", indptr[{base} + {row}] - indptr[{base}])'

    def count_before(self, tile: str, slot: int) -> None:
        """count[slot] = the nonzeros of every panel in the rows before row tile `tile`."""
        self.w(self.depth, f"count[{slot}] = T.int64(0)")
        self.open("for p in T.serial(npanels):")
        self.w(self.depth, f"count[{slot}] = count[{slot}] + {self.nonzeros_before(tile, 'p')}")
        self.close(1)
