// Python binding of the SPADE-like model: cognate_tvm._spade.simulate(...).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "spade.h"

namespace py = pybind11;

namespace cognate {
namespace spade {
namespace {

using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

void check_csr(const IntArray& indptr, const IntArray& indices, int64_t rows, int64_t cols) {
  if (indptr.ndim() != 1 || indices.ndim() != 1)
    throw std::invalid_argument("indptr and indices must be 1-D arrays");
  if (rows < 0 || cols < 0)
    throw std::invalid_argument("shape must be non-negative, got (" + std::to_string(rows) + ", " +
                                std::to_string(cols) + ")");
  if (indptr.shape(0) != rows + 1)
    throw std::invalid_argument("indptr has " + std::to_string(indptr.shape(0)) +
                                " entries, expected rows + 1 = " + std::to_string(rows + 1));
  const int32_t* ptr = indptr.data();
  const int32_t* idx = indices.data();
  if (ptr[0] != 0 || ptr[rows] != indices.shape(0))
    throw std::invalid_argument("indptr must start at 0 and end at nnz");
  for (int64_t i = 0; i < rows; ++i) {
    if (ptr[i + 1] < ptr[i]) throw std::invalid_argument("indptr must be non-decreasing");
    for (int32_t n = ptr[i]; n < ptr[i + 1]; ++n) {
      if (idx[n] < 0 || idx[n] >= cols)
        throw std::invalid_argument("column index " + std::to_string(idx[n]) + " out of range [0, " +
                                    std::to_string(cols) + ")");
      if (n > ptr[i] && idx[n] <= idx[n - 1])
        throw std::invalid_argument("column indices of row " + std::to_string(i) +
                                    " must be strictly increasing (canonical CSR)");
    }
  }
}

template <typename T>
void set_field(const py::dict& params, const char* name, T& field) {
  if (params.contains(name)) field = params[name].cast<T>();
}

Hardware hardware_from_dict(const py::dict& params) {
  Hardware hw;
  static const char* known[] = {
      "pes", "pes_per_core", "clock_ghz", "vector_width", "l2_bytes", "l2_assoc", "l2_output_share", "llc_bytes",
      "llc_assoc", "line_bytes", "dram_gbps", "dram_latency_ns", "l2_latency_cycles",
      "llc_latency_cycles", "mlp", "stream_mlp", "barrier_cycles", "tile_cycles", "row_cycles",
      "nnz_cycles"};
  for (const auto& item : params) {
    const std::string key = py::str(item.first);
    bool found = false;
    for (const char* k : known) found = found || key == k;
    if (!found) throw std::invalid_argument("unknown hardware parameter '" + key + "'");
  }
  set_field(params, "pes", hw.pes);
  set_field(params, "pes_per_core", hw.pes_per_core);
  set_field(params, "clock_ghz", hw.clock_ghz);
  set_field(params, "vector_width", hw.vector_width);
  set_field(params, "l2_bytes", hw.l2_bytes);
  set_field(params, "l2_assoc", hw.l2_assoc);
  set_field(params, "l2_output_share", hw.l2_output_share);
  set_field(params, "llc_bytes", hw.llc_bytes);
  set_field(params, "llc_assoc", hw.llc_assoc);
  set_field(params, "line_bytes", hw.line_bytes);
  set_field(params, "dram_gbps", hw.dram_gbps);
  set_field(params, "dram_latency_ns", hw.dram_latency_ns);
  set_field(params, "l2_latency_cycles", hw.l2_latency_cycles);
  set_field(params, "llc_latency_cycles", hw.llc_latency_cycles);
  set_field(params, "mlp", hw.mlp);
  set_field(params, "stream_mlp", hw.stream_mlp);
  set_field(params, "barrier_cycles", hw.barrier_cycles);
  set_field(params, "tile_cycles", hw.tile_cycles);
  set_field(params, "row_cycles", hw.row_cycles);
  set_field(params, "nnz_cycles", hw.nnz_cycles);
  hw.validate();
  return hw;
}

py::dict hardware_defaults() {
  const Hardware hw;
  py::dict d;
  d["pes"] = hw.pes;
  d["pes_per_core"] = hw.pes_per_core;
  d["clock_ghz"] = hw.clock_ghz;
  d["vector_width"] = hw.vector_width;
  d["l2_bytes"] = hw.l2_bytes;
  d["l2_assoc"] = hw.l2_assoc;
  d["l2_output_share"] = hw.l2_output_share;
  d["llc_bytes"] = hw.llc_bytes;
  d["llc_assoc"] = hw.llc_assoc;
  d["line_bytes"] = hw.line_bytes;
  d["dram_gbps"] = hw.dram_gbps;
  d["dram_latency_ns"] = hw.dram_latency_ns;
  d["l2_latency_cycles"] = hw.l2_latency_cycles;
  d["llc_latency_cycles"] = hw.llc_latency_cycles;
  d["mlp"] = hw.mlp;
  d["stream_mlp"] = hw.stream_mlp;
  d["barrier_cycles"] = hw.barrier_cycles;
  d["tile_cycles"] = hw.tile_cycles;
  d["row_cycles"] = hw.row_cycles;
  d["nnz_cycles"] = hw.nnz_cycles;
  return d;
}

using ConfigTuple = std::tuple<int64_t, int64_t, int64_t, bool, bool>;

py::list simulate_py(const IntArray& indptr, const IntArray& indices, int64_t rows, int64_t cols,
                     const std::string& op, int64_t feat, const std::vector<ConfigTuple>& configs,
                     const py::dict& hardware, int64_t threads, int64_t sampling) {
  OpKind kind;
  if (op == "spmm") kind = OpKind::kSpMM;
  else if (op == "sddmm") kind = OpKind::kSDDMM;
  else throw std::invalid_argument("unknown op '" + op + "'; valid: sddmm, spmm");
  check_csr(indptr, indices, rows, cols);
  const Hardware hw = hardware_from_dict(hardware);
  std::vector<Config> cfgs;
  cfgs.reserve(configs.size());
  for (const auto& [rp, cp, split, barrier, bypass] : configs) cfgs.push_back({rp, cp, split, barrier, bypass});
  const Csr csr{rows, cols, indptr.data(), indices.data()};
  std::vector<Result> results;
  {
    py::gil_scoped_release release;
    results = simulate(csr, kind, feat, cfgs, hw, threads, sampling);
  }
  py::list out;
  for (const Result& r : results) {
    py::dict d;
    if (!r.error.empty()) {
      d["error"] = r.error;
    } else {
      d["cycles"] = r.cycles;
      d["compute"] = r.compute;
      d["memory_stall"] = r.memory_stall;
      d["sync"] = r.sync;
      d["dram_bytes"] = r.dram_bytes;
      d["llc_hit_rate"] = r.llc_hit_rate;
      d["l2_hit_rate"] = r.l2_hit_rate;
      d["imbalance"] = r.imbalance;
      d["bandwidth_bound_fraction"] = r.bandwidth_bound_fraction;
      d["macs"] = r.macs;
      d["passes"] = r.passes;
      d["phases"] = r.phases;
    }
    out.append(d);
  }
  return out;
}

}  // namespace
}  // namespace spade
}  // namespace cognate

PYBIND11_MODULE(_spade, m) {
  m.doc() = "A SPADE-like accelerator performance model (docs/spade_model.md)";
  m.def("simulate", &cognate::spade::simulate_py, py::arg("indptr"), py::arg("indices"),
        py::arg("rows"), py::arg("cols"), py::arg("op"), py::arg("feat"), py::arg("configs"),
        py::arg("hardware"), py::arg("threads") = 1, py::arg("sampling") = 1,
        "Simulate each config (row_panel, col_panel, split, barrier, bypass) of `op` on a\n"
        "canonical CSR matrix with dense width `feat`. `hardware` overrides defaults by name;\n"
        "`sampling` (power of two, 1 = exact) is the cache models' block-sampling factor.\n"
        "Returns one dict per config: cycles and its breakdown, or {'error': message}.");
  m.def("hardware_defaults", &cognate::spade::hardware_defaults,
        "The model's default hardware parameters as a dict.");
}
