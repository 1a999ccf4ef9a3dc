// The tile structure of a CSR matrix for one (row panel, column panel) pair.
//
// A tile is the part of one row panel that falls into one column panel; it holds
// one segment per row with nonzeros there. Because column indices are sorted
// within a row, a segment is a contiguous range [begin, end) of the original CSR
// arrays, so no nonzero is copied. Only non-empty tiles are kept. The tiles
// and their segments are stored twice, in the two orders the schedules walk
// them (row panel major and column panel major), so that both walks read
// memory sequentially.
#pragma once

#include <cstdint>
#include <vector>

#include "spade.h"

namespace cognate {
namespace spade {

struct Segment {
  int32_t row;
  int32_t begin;
  int32_t end;
};

struct Tile {
  int64_t seg_begin;  // [seg_begin, seg_end) in the segments of the same order
  int64_t seg_end;
  int64_t rows;       // rows of the row panel (the tile instruction visits all of them)
};

// Tiles and segments in one order, with groups: group g (a row panel in row
// order, a column panel in column order) owns tiles [group_ptr[g], group_ptr[g + 1]).
struct TileOrder {
  std::vector<Segment> segments;
  std::vector<Tile> tiles;
  std::vector<int64_t> group_ptr;
};

struct Tiles {
  int64_t row_panels = 0;
  int64_t col_panels = 0;
  TileOrder by_row;  // row panel major; tiles of a row panel in column order
  TileOrder by_col;  // column panel major; tiles of a column panel in row-panel order
};

Tiles build_tiles(const Csr& csr, int64_t row_panel, int64_t col_panel);

}  // namespace spade
}  // namespace cognate
