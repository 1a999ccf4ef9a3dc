// A set-associative LRU cache over fixed-size blocks.
//
// The simulator's block is one row segment of a dense operand in the current
// pass (all of its lines are touched together, so they share one LRU age).
// Capacity is given in blocks; the set of a block is its id modulo the number
// of sets, so consecutive rows fall into consecutive sets as consecutive
// addresses do in a real cache. Recency is kept as a per-way time stamp (exact
// LRU: the victim is the way with the oldest stamp, empty ways first), which
// makes a lookup a branch-free scan of the set instead of a reordering.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace cognate {
namespace spade {

class LruCache {
 public:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;

  // A cache of `capacity_blocks` blocks with `assoc` ways per set (both >= 1).
  LruCache(int64_t capacity_blocks, int64_t assoc) {
    capacity_blocks = std::max<int64_t>(1, capacity_blocks);
    ways_ = static_cast<uint32_t>(std::max<int64_t>(1, std::min(assoc, capacity_blocks)));
    sets_ = static_cast<uint32_t>(std::max<int64_t>(1, capacity_blocks / ways_));
    // Lemire's fast modulo: (id % sets) without a division per access.
    magic_ = UINT64_C(0xFFFFFFFFFFFFFFFF) / sets_ + 1;
    ways_data_.assign(static_cast<size_t>(sets_) * ways_ * 2, 0);
    for (size_t set = 0; set < sets_; ++set)
      std::fill_n(ways_data_.begin() + set * ways_ * 2, ways_, kEmpty);
  }

  // Looks `block` up; on a hit makes it most recent, on a miss inserts it in
  // place of the least recent way. Returns true on a hit.
  bool access(uint32_t block) {
    // A set is stored as ways_ tags followed by ways_ stamps (one or two host lines).
    uint32_t* tags = ways_data_.data() + static_cast<size_t>(set_of(block)) * ways_ * 2;
    uint32_t* stamps = tags + ways_;
    const uint32_t now = ++clock_;  // a pass makes far fewer than 2^32 accesses per cache
    uint32_t hit = ways_, victim = 0, oldest = stamps[0];
    for (uint32_t w = 0; w < ways_; ++w) {
      hit = tags[w] == block ? w : hit;
      const bool older = stamps[w] < oldest;
      victim = older ? w : victim;
      oldest = older ? stamps[w] : oldest;
    }
    if (hit != ways_) {
      stamps[hit] = now;
      return true;
    }
    tags[victim] = block;
    stamps[victim] = now;
    return false;
  }

  int64_t capacity_blocks() const { return static_cast<int64_t>(sets_) * ways_; }

 private:
  uint32_t set_of(uint32_t block) const {
    const uint64_t low = magic_ * block;
    return static_cast<uint32_t>((static_cast<__uint128_t>(low) * sets_) >> 64);
  }

  uint32_t ways_;
  uint32_t sets_;
  uint64_t magic_;
  uint32_t clock_ = 0;
  std::vector<uint32_t> ways_data_;
};

}  // namespace spade
}  // namespace cognate
