// (Column-panel) CSR -> ELL buckets of short rows plus a CSR remainder.
//
// In the style of SparseTIR's hybrid format: every (panel, row) pair with L > 0
// nonzeros goes to bucket b = ceil(log2(L)), whose rows are padded to width 2^b,
// when b < num_buckets; longer rows stay in CSR and are listed in the remainder
// as (row, start, end) ranges of the source `indices`/`data` arrays. Empty rows
// appear nowhere.
//
// The buckets are stored back to back (bucket-major; panel-major then row order
// inside a bucket): bucket b holds counts[b] rows starting at row offset
// sum(counts[:b]) of `rows`, and counts[b] * 2^b slots starting at slot offset
// sum(counts[c] * 2^c for c < b) of `cols`, `vals` and `pos`. A padding slot has
// column 0 (a valid index whenever a row is non-empty), value 0 and position -1;
// a real slot has the position of its nonzero in the source arrays, so results
// computed per slot can be scattered back to the source order.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats.h"

namespace py = pybind11;

namespace cognate {
namespace {

using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

constexpr int64_t kMaxBuckets = 16;

int bucket_of(int64_t length) {
  int b = 0;
  while ((int64_t{1} << b) < length) ++b;
  return b;
}

py::tuple csr_to_ell_buckets(const IntArray& indptr, const IntArray& indices,
                             const FloatArray& data, int64_t num_buckets) {
  if (num_buckets < 1 || num_buckets > kMaxBuckets)
    throw std::invalid_argument("num_buckets must be in [1, " + std::to_string(kMaxBuckets) +
                                "], got " + std::to_string(num_buckets));
  if (indptr.ndim() != 1 && indptr.ndim() != 2)
    throw std::invalid_argument("indptr must be 1-D (CSR) or 2-D (column panels), got " +
                                std::to_string(indptr.ndim()) + " dimensions");
  if (indices.ndim() != 1 || data.ndim() != 1 || indices.shape(0) != data.shape(0))
    throw std::invalid_argument("indices and data must be 1-D arrays of equal length");
  const int64_t panels = indptr.ndim() == 2 ? indptr.shape(0) : 1;
  const int64_t width = indptr.ndim() == 2 ? indptr.shape(1) : indptr.shape(0);
  if (panels < 1 || width < 1) throw std::invalid_argument("indptr must not be empty");
  const int64_t rows = width - 1;
  const int64_t nnz = indices.shape(0);
  const int32_t* ptr = indptr.data();
  const int32_t* idx = indices.data();
  const float* val = data.data();
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t lo = ptr[p * width + i], hi = ptr[p * width + i + 1];
      if (lo < 0 || hi < lo || hi > nnz)
        throw std::invalid_argument("indptr entry out of order or out of range at panel " +
                                    std::to_string(p) + ", row " + std::to_string(i));
    }

  // Pass 1: bucket sizes.
  std::vector<int64_t> counts(num_buckets, 0);
  int64_t rest = 0;
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t len = ptr[p * width + i + 1] - ptr[p * width + i];
      if (len == 0) continue;
      const int b = bucket_of(len);
      if (b < num_buckets) ++counts[b]; else ++rest;
    }
  std::vector<int64_t> row_off(num_buckets + 1, 0), slot_off(num_buckets + 1, 0);
  for (int64_t b = 0; b < num_buckets; ++b) {
    row_off[b + 1] = row_off[b] + counts[b];
    slot_off[b + 1] = slot_off[b] + (counts[b] << b);
  }

  IntArray out_counts(num_buckets), out_rows(row_off[num_buckets]);
  IntArray out_cols(slot_off[num_buckets]), out_pos(slot_off[num_buckets]);
  FloatArray out_vals(slot_off[num_buckets]);
  IntArray rest_rows(rest), rest_start(rest), rest_end(rest);
  int32_t* c = out_counts.mutable_data();
  for (int64_t b = 0; b < num_buckets; ++b) c[b] = static_cast<int32_t>(counts[b]);
  int32_t* orow = out_rows.mutable_data();
  int32_t* ocol = out_cols.mutable_data();
  int32_t* opos = out_pos.mutable_data();
  float* oval = out_vals.mutable_data();
  int32_t* rrow = rest_rows.mutable_data();
  int32_t* rlo = rest_start.mutable_data();
  int32_t* rhi = rest_end.mutable_data();

  // Pass 2: fill, cursor[b] = next bucket row of bucket b.
  std::vector<int64_t> cursor(num_buckets, 0);
  int64_t rest_at = 0;
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t lo = ptr[p * width + i], hi = ptr[p * width + i + 1];
      const int64_t len = hi - lo;
      if (len == 0) continue;
      const int b = bucket_of(len);
      if (b >= num_buckets) {
        rrow[rest_at] = static_cast<int32_t>(i);
        rlo[rest_at] = lo;
        rhi[rest_at] = hi;
        ++rest_at;
        continue;
      }
      const int64_t r = cursor[b]++;
      orow[row_off[b] + r] = static_cast<int32_t>(i);
      const int64_t base = slot_off[b] + (r << b);
      for (int64_t s = 0; s < (int64_t{1} << b); ++s) {
        const bool real = s < len;
        ocol[base + s] = real ? idx[lo + s] : 0;
        oval[base + s] = real ? val[lo + s] : 0.0f;
        opos[base + s] = real ? static_cast<int32_t>(lo + s) : -1;
      }
    }
  return py::make_tuple(out_counts, out_rows, out_cols, out_vals, out_pos, rest_rows, rest_start,
                        rest_end);
}

}  // namespace

void register_ell(py::module_& m) {
  m.def("csr_to_ell_buckets", &csr_to_ell_buckets, py::arg("indptr"), py::arg("indices"),
        py::arg("data"), py::arg("num_buckets"),
        "Group the non-empty rows of a CSR (1-D indptr) or column-panel CSR (2-D indptr)\n"
        "matrix into ELL buckets of widths 2^b, b < num_buckets; longer rows form a CSR\n"
        "remainder. Returns (counts, rows, cols, vals, pos, rest_rows, rest_start, rest_end).");
}

}  // namespace cognate
