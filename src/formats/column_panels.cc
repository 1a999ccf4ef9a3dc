// CSR -> column-panel CSR.
//
// The matrix is cut into P = ceil(ncols / width) column panels; every panel is a
// CSR matrix over all rows. The panels are stored back to back: panel p's row i
// holds the nonzeros in [indptr[p, i], indptr[p, i + 1]) of the shared
// `indices`/`data` arrays, and indptr[p, 0] == indptr[p - 1, M]. Column ids stay
// global, so a kernel can index the dense operand directly. Within a row, the
// original order of the nonzeros is kept (a stable counting sort by panel).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <algorithm>
#include <tuple>
#include <vector>

#include "formats.h"

namespace py = pybind11;

namespace cognate {
namespace {

using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

void check_csr(const IntArray& indptr, const IntArray& indices, const FloatArray& data,
               int64_t ncols, int64_t width) {
  if (indptr.ndim() != 1 || indices.ndim() != 1 || data.ndim() != 1)
    throw std::invalid_argument("indptr, indices and data must be 1-D arrays");
  if (indptr.shape(0) < 1) throw std::invalid_argument("indptr must have at least one entry");
  if (indices.shape(0) != data.shape(0))
    throw std::invalid_argument("indices and data differ in length: " +
                                std::to_string(indices.shape(0)) + " vs " +
                                std::to_string(data.shape(0)));
  if (width < 1) throw std::invalid_argument("panel width must be >= 1, got " + std::to_string(width));
  if (ncols < 0) throw std::invalid_argument("ncols must be >= 0, got " + std::to_string(ncols));
  const int32_t* ptr = indptr.data();
  const int64_t rows = indptr.shape(0) - 1;
  if (ptr[0] != 0 || ptr[rows] != indices.shape(0))
    throw std::invalid_argument("indptr must start at 0 and end at nnz");
  for (int64_t i = 0; i < rows; ++i)
    if (ptr[i + 1] < ptr[i]) throw std::invalid_argument("indptr must be non-decreasing");
  const int32_t* idx = indices.data();
  for (int64_t n = 0; n < indices.shape(0); ++n)
    if (idx[n] < 0 || idx[n] >= ncols)
      throw std::invalid_argument("column index " + std::to_string(idx[n]) +
                                  " out of range [0, " + std::to_string(ncols) + ")");
}

std::tuple<IntArray, IntArray, FloatArray> csr_to_column_panels(
    const IntArray& indptr, const IntArray& indices, const FloatArray& data, int64_t ncols,
    int64_t width) {
  check_csr(indptr, indices, data, ncols, width);
  const int64_t rows = indptr.shape(0) - 1;
  const int64_t nnz = indices.shape(0);
  const int64_t panels = ncols == 0 ? 1 : (ncols + width - 1) / width;
  const int32_t* ptr = indptr.data();
  const int32_t* idx = indices.data();
  const float* val = data.data();

  IntArray out_ptr({panels, rows + 1});
  IntArray out_idx(nnz);
  FloatArray out_val(nnz);
  int32_t* optr = out_ptr.mutable_data();
  int32_t* oidx = out_idx.mutable_data();
  float* oval = out_val.mutable_data();

  // Count nonzeros per (panel, row) into optr[p, i + 1].
  std::fill(optr, optr + panels * (rows + 1), 0);
  for (int64_t i = 0; i < rows; ++i)
    for (int32_t n = ptr[i]; n < ptr[i + 1]; ++n) ++optr[(idx[n] / width) * (rows + 1) + i + 1];
  // Exclusive prefix sum in panel-major order: panel p starts where p - 1 ended.
  int64_t running = 0;
  for (int64_t p = 0; p < panels; ++p) {
    int32_t* row_ptr = optr + p * (rows + 1);
    row_ptr[0] = static_cast<int32_t>(running);
    for (int64_t i = 1; i <= rows; ++i) {
      running += row_ptr[i];
      row_ptr[i] = static_cast<int32_t>(running);
    }
  }
  // Scatter, keeping the row's original order inside each panel: cursor[p, i] is
  // the next free slot of (panel p, row i).
  std::vector<int32_t> cursor(optr, optr + panels * (rows + 1));
  for (int64_t i = 0; i < rows; ++i) {
    for (int32_t n = ptr[i]; n < ptr[i + 1]; ++n) {
      const int32_t dst = cursor[(idx[n] / width) * (rows + 1) + i]++;
      oidx[dst] = idx[n];
      oval[dst] = val[n];
    }
  }
  return {out_ptr, out_idx, out_val};
}

}  // namespace

void register_column_panels(py::module_& m) {
  m.def("csr_to_column_panels", &csr_to_column_panels, py::arg("indptr"), py::arg("indices"),
        py::arg("data"), py::arg("ncols"), py::arg("width"),
        "Split a CSR matrix into column panels of `width` columns, stored back to back.\n"
        "Returns (indptr[panels, rows + 1], indices, data); column ids stay global.");
}

}  // namespace cognate
