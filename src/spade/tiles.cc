#include "tiles.h"

#include <algorithm>

namespace cognate {
namespace spade {

Tiles build_tiles(const Csr& csr, int64_t row_panel, int64_t col_panel) {
  Tiles out;
  out.row_panels = (csr.rows + row_panel - 1) / row_panel;
  out.col_panels = std::max<int64_t>(1, (csr.cols + col_panel - 1) / col_panel);
  TileOrder& rows = out.by_row;
  rows.segments.reserve(static_cast<size_t>(std::min<int64_t>(csr.indptr[csr.rows], csr.rows * 4)));
  rows.group_ptr.assign(out.row_panels + 1, 0);
  std::vector<int64_t> tile_col;  // column panel of each tile, in row order

  // Per row panel: cut each row at column-panel boundaries, then order the
  // segments by (column panel, row) (rows already ascend within a panel).
  struct Cut {
    int64_t col_panel;
    Segment seg;
  };
  std::vector<Cut> cuts, sorted;
  std::vector<int64_t> count;
  for (int64_t r = 0; r < out.row_panels; ++r) {
    const int64_t row0 = r * row_panel;
    const int64_t row1 = std::min(csr.rows, row0 + row_panel);
    cuts.clear();
    for (int64_t i = row0; i < row1; ++i) {
      int32_t n = csr.indptr[i];
      const int32_t end = csr.indptr[i + 1];
      while (n < end) {
        const int64_t c = csr.indices[n] / col_panel;
        const int64_t limit = (c + 1) * col_panel;
        const int32_t start = n;
        // Indices are sorted: the segment ends at the first index past the panel.
        n = static_cast<int32_t>(std::lower_bound(csr.indices + n, csr.indices + end, limit) -
                                 csr.indices);
        cuts.push_back({c, {static_cast<int32_t>(i), start, n}});
      }
    }
    if (out.col_panels > 1 && cuts.size() > 1) {
      // Counting sort when the panels are few, else a comparison sort on (panel, row);
      // both give the same order.
      if (out.col_panels <= 4 * static_cast<int64_t>(cuts.size())) {
        count.assign(static_cast<size_t>(out.col_panels) + 1, 0);
        for (const Cut& cut : cuts) ++count[static_cast<size_t>(cut.col_panel) + 1];
        for (size_t c = 1; c < count.size(); ++c) count[c] += count[c - 1];
        sorted.resize(cuts.size());
        for (const Cut& cut : cuts) sorted[count[static_cast<size_t>(cut.col_panel)]++] = cut;
        cuts.swap(sorted);
      } else {
        std::sort(cuts.begin(), cuts.end(), [](const Cut& a, const Cut& b) {
          return a.col_panel != b.col_panel ? a.col_panel < b.col_panel : a.seg.row < b.seg.row;
        });
      }
    }
    for (size_t k = 0; k < cuts.size(); ++k) {
      if (k == 0 || cuts[k].col_panel != cuts[k - 1].col_panel) {
        const int64_t s = static_cast<int64_t>(rows.segments.size());
        rows.tiles.push_back({s, s, row1 - row0});
        tile_col.push_back(cuts[k].col_panel);
      }
      rows.segments.push_back(cuts[k].seg);
      rows.tiles.back().seg_end = static_cast<int64_t>(rows.segments.size());
    }
    rows.group_ptr[r + 1] = static_cast<int64_t>(rows.tiles.size());
  }

  // The same tiles grouped by column panel (a stable counting sort keeps the
  // row-panel order), with their segments copied alongside.
  TileOrder& cols = out.by_col;
  cols.group_ptr.assign(out.col_panels + 1, 0);
  for (int64_t c : tile_col) ++cols.group_ptr[c + 1];
  for (int64_t c = 0; c < out.col_panels; ++c) cols.group_ptr[c + 1] += cols.group_ptr[c];
  std::vector<int64_t> slot(cols.group_ptr.begin(), cols.group_ptr.end() - 1);
  std::vector<int64_t> position(rows.tiles.size());
  for (size_t t = 0; t < rows.tiles.size(); ++t) position[t] = slot[tile_col[t]]++;
  std::vector<int64_t> by_position(rows.tiles.size());
  for (size_t t = 0; t < rows.tiles.size(); ++t) by_position[position[t]] = static_cast<int64_t>(t);
  cols.tiles.reserve(rows.tiles.size());
  cols.segments.reserve(rows.segments.size());
  for (int64_t t : by_position) {
    const Tile& src = rows.tiles[t];
    const int64_t s = static_cast<int64_t>(cols.segments.size());
    cols.segments.insert(cols.segments.end(), rows.segments.begin() + src.seg_begin,
                         rows.segments.begin() + src.seg_end);
    cols.tiles.push_back({s, static_cast<int64_t>(cols.segments.size()), src.rows});
  }
  return out;
}

}  // namespace spade
}  // namespace cognate
