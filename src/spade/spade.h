// A SPADE-like accelerator performance model (docs/spade_model.md).
//
// P processing elements (PEs), `pes_per_core` of them coupled to each core of a
// multicore; each core has a private L2, all cores share an LLC and a DRAM
// channel set. A sparse matrix A (CSR) is cut into row panels x column panels
// (tiles); a dense operand of width N is processed in `split` passes of N/split
// columns each. The model replays every dense-operand access, at the granularity
// of one row segment of the current pass, through LRU models of the L2s and the
// LLC in the order an event-driven schedule of the PEs produces, adds compute
// time from the nonzeros and the PE vector width, and bounds each phase by the
// DRAM bandwidth. Everything is deterministic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cognate {
namespace spade {

enum class OpKind { kSpMM, kSDDMM };

// Hardware parameters; defaults and their sources are listed in docs/spade_model.md.
struct Hardware {
  int64_t pes = 224;               // processing elements
  int64_t pes_per_core = 4;        // PEs sharing one core's private L2 (224 PEs / 56 cores)
  double clock_ghz = 2.0;          // PE and core clock
  int64_t vector_width = 16;       // fp32 lanes per PE vector op (512 bits)
  int64_t l2_bytes = 1 << 20;      // private L2 per core
  int64_t l2_assoc = 16;
  double l2_output_share = 0.5;    // share of a core's L2 that can hold owned output tiles (barrier)
  int64_t llc_bytes = 32ll << 20;  // shared last-level cache
  int64_t llc_assoc = 16;
  int64_t line_bytes = 64;
  double dram_gbps = 200.0;        // sustained DRAM bandwidth, GB/s
  double dram_latency_ns = 90.0;   // DRAM access latency after an LLC miss
  double l2_latency_cycles = 14.0;
  double llc_latency_cycles = 50.0;
  int64_t mlp = 8;                 // outstanding cache-line misses per PE (cached accesses)
  int64_t stream_mlp = 32;         // outstanding lines per PE for streamed (bypassed, sparse) data
  double barrier_cycles = 2000.0;  // one global barrier across all PEs
  double tile_cycles = 40.0;       // dispatching one tile instruction to a PE
  double row_cycles = 1.0;         // visiting one row of a tile (reading its row pointers)
  double nnz_cycles = 1.0;         // issuing one nonzero (index and value load)

  void validate() const;  // throws std::invalid_argument naming the bad field
  double dram_bytes_per_cycle() const { return dram_gbps / clock_ghz; }
  double dram_latency_cycles() const { return dram_latency_ns * clock_ghz; }
};

struct Config {
  int64_t row_panel = 64;     // rows of A per tile
  int64_t col_panel = 1 << 20;  // columns of A per tile
  int64_t split = 1;          // passes over A, each with ~N / split dense columns
  bool barrier = false;       // all PEs finish column panel c before any starts c + 1;
                              // row panel r is then owned by PE r mod P in every phase
  bool bypass = false;        // the row-indexed dense operand (SpMM: C, SDDMM: X) is streamed, never cached

  void validate() const;
};

struct Result {
  double cycles = 0;        // = compute + memory_stall + sync
  double compute = 0;       // on the critical path
  double memory_stall = 0;  // latency not hidden by compute, plus DRAM-bandwidth excess
  double sync = 0;          // barriers and tile dispatch on the critical path
  double dram_bytes = 0;
  double llc_hit_rate = 0;  // hits / lookups in lines, over accesses that missed their L2
  double l2_hit_rate = 0;   // hits / lookups in lines, over cached accesses
  double imbalance = 1;     // critical-path busy time / mean PE busy time
  double bandwidth_bound_fraction = 0;  // share of phases limited by DRAM bandwidth
  int64_t macs = 0;         // multiply-adds: nnz x N for both ops
  int64_t passes = 0;
  int64_t phases = 0;       // barrier-delimited phases over all passes
  std::string error;        // non-empty when the config cannot run on this input
};

// CSR view (not owned). Column indices sorted within each row.
struct Csr {
  int64_t rows = 0;
  int64_t cols = 0;
  const int32_t* indptr = nullptr;
  const int32_t* indices = nullptr;
};

// Simulates each config; configs sharing (row_panel, col_panel) share their tile
// structure. `threads` <= 1 runs on the calling thread. Results are in config order
// and do not depend on `threads`. `sampling` (a power of two; 1 = every access
// through the cache models) is the largest block-sampling factor of the cache
// models (see simulator.cc and docs/spade_model.md).
std::vector<Result> simulate(const Csr& csr, OpKind op, int64_t feat,
                             const std::vector<Config>& configs, const Hardware& hw,
                             int64_t threads, int64_t sampling = 1);

}  // namespace spade
}  // namespace cognate
