// The SPADE-like model: one pass of the split is simulated per distinct pass
// shape, with a time-stepped schedule of the PEs that feeds the dense-operand
// accesses, in time order, through LRU models of the private L2s and the LLC.
// Equations and defaults: docs/spade_model.md.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lru_cache.h"
#include "spade.h"
#include "tiles.h"

namespace cognate {
namespace spade {
namespace {

constexpr double kValueBytes = 4.0;  // fp32 dense and sparse values
constexpr double kIndexBytes = 4.0;  // int32 column indices and row pointers
// Interleaving granularity of the PEs' access streams: time advances in rounds
// of this many cycles; within a round the PEs run one after another, each up
// to the end of the round (or past it, to the end of a row segment).
constexpr double kSliceCycles = 256.0;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// Running totals of one config over its passes.
struct Totals {
  double compute = 0, stall = 0, sync = 0, dram = 0;
  double l2_lookups = 0, l2_hits = 0, llc_lookups = 0, llc_hits = 0;
  double crit_busy = 0, mean_busy = 0;
  int64_t macs = 0, phases = 0, bw_phases = 0;

  void add(const Totals& o, int64_t times) {
    compute += o.compute * times; stall += o.stall * times; sync += o.sync * times;
    dram += o.dram * times;
    l2_lookups += o.l2_lookups * times; l2_hits += o.l2_hits * times;
    llc_lookups += o.llc_lookups * times; llc_hits += o.llc_hits * times;
    crit_busy += o.crit_busy * times; mean_busy += o.mean_busy * times;
    macs += o.macs * times; phases += o.phases * times; bw_phases += o.bw_phases * times;
  }
};

// Block sampling: only blocks whose multiplicative hash has its top `bits`
// bits zero go through the cache models, which are shrunk by 2^bits (a hashed
// set sample, Kessler et al. 1994); the other accesses are charged the moving
// average cost and DRAM traffic of the recent sampled accesses of the same
// operand, and the hit rates are those of the sampled accesses.
// `sampling` is the largest factor allowed (a power of two; 1 = exact); it is
// reduced so that every sampled cache keeps at least kMinSampledSets sets,
// and not used at all below kSampleMinNnz nonzeros.
constexpr int64_t kMinSampledSets = 16;
constexpr double kSampleWindow = 512.0;
// Inputs with fewer nonzeros are always simulated exactly: they are cheap, and
// their few hot rows make a hashed sample unrepresentative.
constexpr int64_t kSampleMinNnz = 1 << 18;

int sample_bits(const Hardware& hw, int64_t block_lines, int64_t sampling, int64_t nnz) {
  int bits = 0;
  if (nnz < kSampleMinNnz) return 0;  // small inputs are cheap: always exact
  const int64_t l2_sets = hw.l2_bytes / hw.line_bytes / block_lines / hw.l2_assoc;
  const int64_t llc_sets = hw.llc_bytes / hw.line_bytes / block_lines / hw.llc_assoc;
  while ((int64_t{2} << bits) <= sampling && (l2_sets >> (bits + 1)) >= kMinSampledSets &&
         (llc_sets >> (bits + 1)) >= kMinSampledSets)
    ++bits;
  return bits;
}

// One pass over A with `width` dense columns, from cold caches (the lines of
// other passes are never reused, so under LRU they behave as empty ways).
class PassSimulator {
 public:
  PassSimulator(const Csr& csr, const Tiles& tiles, OpKind op, const Hardware& hw,
                const Config& cfg, int64_t width, bool partial_output, int64_t sampling)
      : csr_(csr), tiles_(tiles), op_(op), hw_(hw), cfg_(cfg), width_(width),
        partial_output_(partial_output),
        block_lines_((width * static_cast<int64_t>(kValueBytes) + hw.line_bytes - 1) / hw.line_bytes),
        sample_bits_(sample_bits(hw, block_lines_, sampling, csr.indptr[csr.rows])),
        llc_((hw.llc_bytes / hw.line_bytes / block_lines_) >> sample_bits_, hw.llc_assoc) {
    const int64_t cores = (hw.pes + hw.pes_per_core - 1) / hw.pes_per_core;
    const int64_t l2_blocks = hw.l2_bytes / hw.line_bytes / block_lines_;
    // With barrier, row panel r is owned by PE r mod P in every phase, which
    // keeps its row-indexed tile (SpMM: C, SDDMM: X) on chip across the
    // column panels, up to l2_output_share of its core's L2; what is pinned
    // there is no longer available to the LRU-managed rest of the L2.
    std::vector<int64_t> pinned_blocks(static_cast<size_t>(cores), 0);
    row_state_.assign(static_cast<size_t>(csr.rows), 0);
    if (cfg.barrier && !cfg.bypass) pin_owned_rows(l2_blocks, &pinned_blocks);
    l2_.reserve(cores);
    for (int64_t c = 0; c < cores; ++c)
      l2_.emplace_back((l2_blocks - pinned_blocks[static_cast<size_t>(c)]) >> sample_bits_, hw.l2_assoc);
    const double mlp = static_cast<double>(hw.mlp);
    cost_l2_hit_ = hw.l2_latency_cycles / mlp;
    cost_llc_hit_ = (hw.l2_latency_cycles + hw.llc_latency_cycles) / mlp;
    cost_dram_ = (hw.l2_latency_cycles + hw.llc_latency_cycles + hw.dram_latency_cycles()) / mlp;
    cost_stream_byte_ = hw.dram_latency_cycles() / static_cast<double>(hw.stream_mlp) /
                        static_cast<double>(hw.line_bytes);
    vector_ops_ = static_cast<double>((width + hw.vector_width - 1) / hw.vector_width);
    reduce_ops_ = op == OpKind::kSDDMM ? std::ceil(std::log2(static_cast<double>(hw.vector_width))) : 0.0;
    block_bytes_ = static_cast<double>(block_lines_ * hw.line_bytes);
    pes_.resize(static_cast<size_t>(hw.pes));
  }

  Totals run() {
    const TileOrder& order = cfg_.barrier ? tiles_.by_col : tiles_.by_row;
    tiles_in_order_ = order.tiles.data();
    segments_in_order_ = order.segments.data();
    if (cfg_.barrier) {  // one phase per column panel; a PE's tasks are its own row panels' tiles
      own_ptr_.assign(static_cast<size_t>(hw_.pes) + 1, 0);
      for (int64_t c = 0; c < tiles_.col_panels; ++c) {
        const int64_t b = order.group_ptr[c], e = order.group_ptr[c + 1];
        if (b == e) continue;
        // Counting sort of the phase's tiles by owner (row panel mod P), keeping row-panel order.
        std::fill(own_ptr_.begin(), own_ptr_.end(), 0);
        for (int64_t k = b; k < e; ++k) ++own_ptr_[static_cast<size_t>(owner(k)) + 1];
        for (int64_t p = 0; p < hw_.pes; ++p) own_ptr_[p + 1] += own_ptr_[p];
        own_tiles_.resize(static_cast<size_t>(e - b));
        own_slot_.assign(own_ptr_.begin(), own_ptr_.end() - 1);
        for (int64_t k = b; k < e; ++k) own_tiles_[static_cast<size_t>(own_slot_[owner(k)]++)] = k;
        run_phase();
      }
    } else {  // one phase; a task is one row panel
      tasks_.clear();
      for (int64_t r = 0; r < tiles_.row_panels; ++r)
        if (order.group_ptr[r] < order.group_ptr[r + 1]) tasks_.push_back({order.group_ptr[r], order.group_ptr[r + 1]});
      run_phase();
    }
    // Output rows that no nonzero touched still get written (SpMM's dense output).
    if (op_ == OpKind::kSpMM) {
      int64_t untouched = 0;
      for (uint8_t t : row_state_) untouched += (t & kTouched) == 0;
      totals_.dram += static_cast<double>(untouched * width_) * kValueBytes;
    }
    return totals_;
  }

 private:
  struct Task {
    int64_t tile_begin, tile_end;  // tile ids
  };
  struct Pe {
    double clock = 0, tile_start = 0, comp = 0, mem = 0;
    double sum_comp = 0, sum_stall = 0, sum_sync = 0;
    int64_t tile = 0, tile_end = 0;  // tiles left in the current task
    int64_t seg = 0, seg_end = 0;    // segments left in the current tile
    int64_t own = 0;                 // next of its own tiles (barrier: static ownership)
  };
  static constexpr uint8_t kTouched = 1, kPinned = 2;  // row_state_ flags

  // The PE that owns a tile of the column-major order under barrier.
  int64_t owner(int64_t tile_id) const {
    const Segment& s = segments_in_order_[tiles_in_order_[tile_id].seg_begin];
    return (s.row / cfg_.row_panel) % hw_.pes;
  }

  // Pins the row-indexed tiles of each core's owned row panels (in row-panel
  // order) while they fit in l2_output_share of the core's L2.
  void pin_owned_rows(int64_t l2_blocks, std::vector<int64_t>* pinned_blocks) {
    const int64_t budget = static_cast<int64_t>(std::floor(static_cast<double>(l2_blocks) * hw_.l2_output_share));
    for (int64_t r = 0; r < tiles_.row_panels; ++r) {
      const int64_t row0 = r * cfg_.row_panel, row1 = std::min(csr_.rows, row0 + cfg_.row_panel);
      int64_t& used = (*pinned_blocks)[static_cast<size_t>((r % hw_.pes) / hw_.pes_per_core)];
      if (used + (row1 - row0) > budget) continue;
      used += row1 - row0;
      for (int64_t i = row0; i < row1; ++i) row_state_[static_cast<size_t>(i)] |= kPinned;
    }
  }

  // Schedules the phase's tasks over the PEs (without barrier dynamic: an idle
  // PE takes the next row panel; with barrier static: each PE runs its own
  // tiles), ends with a barrier, and bounds the phase by DRAM bandwidth.
  void run_phase() {
    for (size_t p = 0; p < pes_.size(); ++p) {
      pes_[p] = Pe{};
      if (cfg_.barrier) pes_[p].own = own_ptr_[p];
    }
    phase_dram_ = 0;
    size_t next_task = 0;
    // Time-stepped interleaving: in each round of kSliceCycles, every busy PE
    // (in id order) runs until its clock reaches the end of the round, taking
    // the next task whenever it finishes one. A PE with no task left retires.
    std::vector<int64_t> active(static_cast<size_t>(hw_.pes));
    for (int64_t p = 0; p < hw_.pes; ++p) active[static_cast<size_t>(p)] = p;
    double round_end = 0;
    while (!active.empty()) {
      round_end += kSliceCycles;
      size_t kept = 0;
      for (const int64_t p : active) {
        Pe& pe = pes_[static_cast<size_t>(p)];
        bool retired = false;
        while (pe.clock < round_end) {
          if (pe.seg == pe.seg_end) {  // needs a new tile
            if (pe.tile == pe.tile_end) {
              if (cfg_.barrier) {  // static: the PE's own tiles of this column panel
                if (pe.own == own_ptr_[static_cast<size_t>(p) + 1]) {
                  retired = true;
                  break;
                }
                pe.tile = own_tiles_[static_cast<size_t>(pe.own++)];
                pe.tile_end = pe.tile + 1;
              } else {  // dynamic: the next row panel
                if (next_task == tasks_.size()) {
                  retired = true;
                  break;
                }
                pe.tile = tasks_[next_task].tile_begin;
                pe.tile_end = tasks_[next_task].tile_end;
                ++next_task;
              }
            }
            start_tile(pe, pe.tile++);
          }
          process_segment(pe, p / hw_.pes_per_core);
          if (pe.seg == pe.seg_end) end_tile(pe);
        }
        if (!retired) active[kept++] = p;
      }
      active.resize(kept);
    }
    // The critical PE (the last to finish; lowest id on ties) defines the breakdown.
    size_t crit = 0;
    double busy_sum = 0;
    for (size_t p = 0; p < pes_.size(); ++p) {
      busy_sum += pes_[p].clock;
      if (pes_[p].clock > pes_[crit].clock) crit = p;
    }
    const Pe& c = pes_[crit];
    const double dram_cycles = phase_dram_ / hw_.dram_bytes_per_cycle();
    totals_.compute += c.sum_comp;
    totals_.stall += c.sum_stall + std::max(0.0, dram_cycles - c.clock);
    totals_.sync += c.sum_sync + hw_.barrier_cycles;
    totals_.crit_busy += c.clock;
    totals_.mean_busy += busy_sum / static_cast<double>(pes_.size());
    totals_.dram += phase_dram_;
    totals_.phases += 1;
    totals_.bw_phases += dram_cycles > c.clock;
  }

  void start_tile(Pe& pe, int64_t tile_id) {
    const Tile& t = tiles_in_order_[tile_id];
    pe.sum_sync += hw_.tile_cycles;
    pe.tile_start = pe.clock + hw_.tile_cycles;
    pe.seg = t.seg_begin;
    pe.seg_end = t.seg_end;
    // The tile instruction visits every row of its panel through the row pointers.
    pe.comp = static_cast<double>(t.rows) * hw_.row_cycles;
    const double ptr_bytes = static_cast<double>(t.rows + 1) * kIndexBytes;
    // A tile starts new streams for its sparse arrays: the first DRAM latency is
    // exposed before anything overlaps with it.
    pe.mem = hw_.dram_latency_cycles() + stream(ptr_bytes);
  }

  void end_tile(Pe& pe) {
    const double busy = std::max(pe.comp, pe.mem);
    pe.sum_comp += pe.comp;
    pe.sum_stall += busy - pe.comp;
    pe.clock = pe.tile_start + busy;
  }

  // Streamed data (sparse arrays, bypassed operands, SDDMM outputs): DRAM
  // traffic, and per-PE time at the streaming memory-level parallelism.
  double stream(double bytes) {
    phase_dram_ += bytes;
    return bytes * cost_stream_byte_;
  }

  bool is_sampled(uint32_t block) const {
    return sample_bits_ == 0 || ((block * 2654435761u) >> (32 - sample_bits_)) == 0;
  }

  // A cached block access from core `core` to operand `kind` (0: gathered,
  // 1: row-indexed); `refetch_dirty` charges the write-back of a dirty partial
  // result that an earlier eviction must have caused. Returns the PE's cycles.
  double cached(uint32_t block, int64_t core, int kind, bool refetch_dirty) {
    Running& run = running_[kind];
    if (!is_sampled(block)) {
      if (run.accesses == 0) {  // nothing sampled yet: a cold cache misses
        phase_dram_ += block_bytes_ * (refetch_dirty ? 2.0 : 1.0);
        return static_cast<double>(block_lines_) * cost_dram_;
      }
      phase_dram_ += run.mean_dram;
      return run.mean_cost;
    }
    const double lines = static_cast<double>(block_lines_);
    double cost, dram = 0;
    totals_.l2_lookups += lines;
    if (l2_[static_cast<size_t>(core)].access(block)) {
      totals_.l2_hits += lines;
      cost = lines * cost_l2_hit_;
    } else {
      totals_.llc_lookups += lines;
      if (llc_.access(block)) {
        totals_.llc_hits += lines;
        cost = lines * cost_llc_hit_;
      } else {
        dram = block_bytes_ * (refetch_dirty ? 2.0 : 1.0);
        cost = lines * cost_dram_;
      }
    }
    // Exponential moving averages over the last ~kSampleWindow sampled accesses
    // track the current hit rate (a cumulative mean would lag behind warm-up).
    run.accesses += 1;
    const double weight = std::max(1.0 / run.accesses, 1.0 / kSampleWindow);
    run.mean_cost += weight * (cost - run.mean_cost);
    run.mean_dram += weight * (dram - run.mean_dram);
    phase_dram_ += dram;
    return cost;
  }

  // Installs a freshly written block (no fetch) in the core's L2 and the LLC.
  void allocate(uint32_t block, int64_t core) {
    if (!is_sampled(block)) return;
    l2_[static_cast<size_t>(core)].access(block);
    llc_.access(block);
  }

  void process_segment(Pe& pe, int64_t core) {
    const Segment& s = segments_in_order_[pe.seg++];
    const int64_t nnz = s.end - s.begin;
    const uint32_t cols = static_cast<uint32_t>(csr_.cols);
    const uint32_t row_block = cols + static_cast<uint32_t>(s.row);
    uint8_t& state = row_state_[static_cast<size_t>(s.row)];
    const bool first = (state & kTouched) == 0;
    state |= kTouched;
    // The row-indexed dense operand (SpMM: the output row C[i]; SDDMM: X[i])
    // is moved once per segment between the PE and memory.
    if (cfg_.bypass) {
      // Streamed to and from DRAM without allocating (non-temporal), leaving
      // the caches to the gathered operand. SpMM: the first write is L lines,
      // a later segment (another column panel) reads and writes again (2L).
      const bool read_back = op_ == OpKind::kSpMM && !first;
      pe.mem += stream((read_back ? 2.0 : 1.0) * block_bytes_);
    } else if (state & kPinned) {
      // Owned and held on chip (barrier): the first touch allocates (SpMM: no
      // fetch, one write-back at the end) or fetches (SDDMM's X), later
      // column panels hit in the core's L2.
      const double lines = static_cast<double>(block_lines_);
      if (first && op_ == OpKind::kSDDMM) {  // compulsory miss
        totals_.l2_lookups += lines;
        totals_.llc_lookups += lines;
        pe.mem += lines * cost_dram_;
        phase_dram_ += block_bytes_;
      } else if (first) {  // SpMM's first write: allocated, written back once
        phase_dram_ += block_bytes_;
      } else {
        totals_.l2_lookups += lines;
        totals_.l2_hits += lines;
        pe.mem += lines * cost_l2_hit_;
      }
    } else if (op_ == OpKind::kSpMM && first) {
      // First write: no fetch; allocated in the core's L2 and the LLC, written back once.
      allocate(row_block, core);
      phase_dram_ += block_bytes_;
    } else {
      // SpMM: partial sums of an earlier column panel, wherever they are now
      // (an LLC miss also pays the write-back that evicted them); SDDMM: X[i].
      pe.mem += cached(row_block, core, 1, op_ == OpKind::kSpMM);
    }
    // The gathered dense operand (SpMM: B[k]; SDDMM: Y[k]), one block per
    // nonzero, always through the caches.
    for (int32_t n = s.begin; n < s.end; ++n)
      pe.mem += cached(static_cast<uint32_t>(csr_.indices[n]), core, 0, false);
    // The sparse operand's indices and values are streamed.
    double sparse_bytes = static_cast<double>(nnz) * (kIndexBytes + kValueBytes);
    if (op_ == OpKind::kSDDMM)  // the sampled output, read back when accumulating over passes
      sparse_bytes += static_cast<double>(nnz) * kValueBytes * (partial_output_ ? 2.0 : 1.0);
    pe.mem += stream(sparse_bytes);
    pe.comp += static_cast<double>(nnz) * (hw_.nnz_cycles + vector_ops_ + reduce_ops_);
    totals_.macs += nnz * width_;
    pe.clock = pe.tile_start + std::max(pe.comp, pe.mem);
  }

  const Csr& csr_;
  const Tiles& tiles_;
  const Tile* tiles_in_order_ = nullptr;        // the order this config walks
  const Segment* segments_in_order_ = nullptr;
  OpKind op_;
  const Hardware& hw_;
  const Config& cfg_;
  int64_t width_;
  bool partial_output_;
  int64_t block_lines_;
  int sample_bits_;
  LruCache llc_;
  std::vector<LruCache> l2_;
  double cost_l2_hit_ = 0, cost_llc_hit_ = 0, cost_dram_ = 0, cost_stream_byte_ = 0;
  double vector_ops_ = 0, reduce_ops_ = 0, block_bytes_ = 0;
  struct Running {  // sampled accesses of one operand: count, PE cycles, DRAM bytes
    double accesses = 0, mean_cost = 0, mean_dram = 0;
  };
  Running running_[2];
  std::vector<uint8_t> row_state_;              // per output row: kTouched, kPinned
  std::vector<int64_t> own_ptr_, own_slot_, own_tiles_;  // barrier: each PE's tiles of the phase
  std::vector<Pe> pes_;
  std::vector<Task> tasks_;
  double phase_dram_ = 0;
  Totals totals_;
};

Result simulate_one(const Csr& csr, const Tiles& tiles, OpKind op, int64_t feat,
                    const Config& cfg, const Hardware& hw, int64_t sampling) {
  // Passes of equal shape behave identically: simulate each shape once.
  // Widths: `feat % split` passes of base + 1 columns, the rest of base columns;
  // SDDMM passes after the first also read back the partial dot products.
  const int64_t base = feat / cfg.split, extra = feat % cfg.split;
  std::map<std::pair<int64_t, bool>, int64_t> shapes;
  for (int64_t p = 0; p < cfg.split; ++p) {
    const int64_t width = base + (p < extra ? 1 : 0);
    const bool partial = op == OpKind::kSDDMM && p > 0;
    ++shapes[{width, partial}];
  }
  Totals all;
  for (const auto& [shape, count] : shapes) {
    PassSimulator pass(csr, tiles, op, hw, cfg, shape.first, shape.second, sampling);
    all.add(pass.run(), count);
  }
  Result r;
  r.compute = all.compute;
  r.memory_stall = all.stall;
  r.sync = all.sync;
  r.cycles = r.compute + r.memory_stall + r.sync;
  r.dram_bytes = all.dram;
  r.l2_hit_rate = all.l2_lookups > 0 ? all.l2_hits / all.l2_lookups : 0.0;
  r.llc_hit_rate = all.llc_lookups > 0 ? all.llc_hits / all.llc_lookups : 0.0;
  r.imbalance = all.mean_busy > 0 ? all.crit_busy / all.mean_busy : 1.0;
  r.bandwidth_bound_fraction = all.phases > 0 ? static_cast<double>(all.bw_phases) / all.phases : 0.0;
  r.macs = all.macs;
  r.passes = cfg.split;
  r.phases = all.phases;
  return r;
}

}  // namespace

void Hardware::validate() const {
  require(pes >= 1, "pes must be >= 1, got " + std::to_string(pes));
  require(pes_per_core >= 1, "pes_per_core must be >= 1, got " + std::to_string(pes_per_core));
  require(clock_ghz > 0, "clock_ghz must be > 0, got " + std::to_string(clock_ghz));
  require(vector_width >= 1, "vector_width must be >= 1, got " + std::to_string(vector_width));
  require(line_bytes >= 4, "line_bytes must be >= 4, got " + std::to_string(line_bytes));
  require(l2_bytes >= line_bytes, "l2_bytes must hold at least one line, got " + std::to_string(l2_bytes));
  require(llc_bytes >= line_bytes, "llc_bytes must hold at least one line, got " + std::to_string(llc_bytes));
  require(l2_assoc >= 1, "l2_assoc must be >= 1, got " + std::to_string(l2_assoc));
  require(llc_assoc >= 1, "llc_assoc must be >= 1, got " + std::to_string(llc_assoc));
  require(dram_gbps > 0, "dram_gbps must be > 0, got " + std::to_string(dram_gbps));
  require(dram_latency_ns >= 0, "dram_latency_ns must be >= 0, got " + std::to_string(dram_latency_ns));
  require(l2_latency_cycles >= 0, "l2_latency_cycles must be >= 0");
  require(llc_latency_cycles >= 0, "llc_latency_cycles must be >= 0");
  require(mlp >= 1, "mlp must be >= 1, got " + std::to_string(mlp));
  require(stream_mlp >= 1, "stream_mlp must be >= 1, got " + std::to_string(stream_mlp));
  require(l2_output_share >= 0 && l2_output_share <= 1,
          "l2_output_share must be in [0, 1], got " + std::to_string(l2_output_share));
  require(barrier_cycles >= 0 && tile_cycles >= 0 && row_cycles >= 0 && nnz_cycles >= 0,
          "barrier_cycles, tile_cycles, row_cycles and nnz_cycles must be >= 0");
}

void Config::validate() const {
  require(row_panel >= 1, "row_panel must be >= 1, got " + std::to_string(row_panel));
  require(col_panel >= 1, "col_panel must be >= 1, got " + std::to_string(col_panel));
  require(split >= 1, "split must be >= 1, got " + std::to_string(split));
}

std::vector<Result> simulate(const Csr& csr, OpKind op, int64_t feat,
                             const std::vector<Config>& configs, const Hardware& hw,
                             int64_t threads, int64_t sampling) {
  hw.validate();
  require(sampling >= 1 && (sampling & (sampling - 1)) == 0,
          "sampling must be a power of two >= 1, got " + std::to_string(sampling));
  require(feat >= 1, "feat must be >= 1, got " + std::to_string(feat));
  require(csr.rows >= 0 && csr.cols >= 0, "matrix shape must be non-negative");
  require(csr.rows + csr.cols < (int64_t{1} << 32) - 1, "matrix too large for 32-bit block ids");
  for (const Config& c : configs) c.validate();

  // Configs sharing (row panel, column panel) share one tile structure, built
  // by the first thread that needs it and freed when its last config is done.
  // Work is handed out config by config, in group order.
  std::map<std::pair<int64_t, int64_t>, size_t> group_of;
  std::vector<size_t> order, group(configs.size());
  for (size_t i = 0; i < configs.size(); ++i)
    group[i] = group_of.emplace(std::make_pair(configs[i].row_panel, configs[i].col_panel),
                                group_of.size()).first->second;
  for (size_t g = 0; g < group_of.size(); ++g)
    for (size_t i = 0; i < configs.size(); ++i)
      if (group[i] == g) order.push_back(i);
  struct Shared {
    std::once_flag built;
    std::shared_ptr<const Tiles> tiles;
    std::atomic<size_t> left{0};
  };
  std::vector<Shared> shared(group_of.size());
  for (size_t i = 0; i < configs.size(); ++i) ++shared[group[i]].left;

  std::vector<Result> results(configs.size());
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto run_configs = [&]() {
    for (size_t k = next++; k < order.size(); k = next++) {
      const size_t i = order[k];
      const Config& cfg = configs[i];
      Shared& sh = shared[group[i]];
      std::call_once(sh.built, [&]() {
        sh.tiles = std::make_shared<const Tiles>(build_tiles(csr, cfg.row_panel, cfg.col_panel));
      });
      std::shared_ptr<const Tiles> tiles = std::atomic_load(&sh.tiles);
      if (cfg.split > feat) {
        results[i].error = "split " + std::to_string(cfg.split) +
                           " exceeds the dense width feat=" + std::to_string(feat);
      } else {
        results[i] = simulate_one(csr, *tiles, op, feat, cfg, hw, sampling);
      }
      if (--sh.left == 0) std::atomic_store(&sh.tiles, std::shared_ptr<const Tiles>());
    }
  };
  auto worker = [&]() {
    try {
      run_configs();
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = order.size();
    }
  };
  const size_t n_threads = static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(threads, static_cast<int64_t>(order.size()))));
  if (n_threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < n_threads; ++t) pool.emplace_back(worker);
    for (auto& th : pool) th.join();
  }
  if (failure) std::rethrow_exception(failure);
  return results;
}

}  // namespace spade
}  // namespace cognate
