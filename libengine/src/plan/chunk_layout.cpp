#include "pstar/plan/chunk_layout.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "pstar/base/error.h"

namespace pstar::plan {
namespace {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// The grid of searched sizes and of oversized chunks: 64Ki elements (PatrickStar's and Gemini's
// search; a chunk's fp32 payloads are then whole 4 KiB blocks for O_DIRECT), finer only for
// ordinary sizes below it (small test models).
int64_t size_grid(int64_t ordinary) { return std::min<int64_t>(int64_t{1} << 16, ordinary); }

}  // namespace

Packing pack_leaves(const std::vector<LeafModule>& leaves, int64_t size, bool use_cpu_embedding,
                    bool own_oversized, int64_t grid) {
  PSTAR_INTERNAL_ASSERT(size > 0 && grid > 0, "packing at ", size, " on a grid of ", grid);
  Packing p;
  p.leaf_chunk.reserve(leaves.size());
  int64_t used = 0;
  bool pinned = false, closed = true;  // `closed`: the current chunk takes no more leaves
  for (const auto& leaf : leaves) {
    const bool leaf_pinned = leaf.embedding && use_cpu_embedding;
    const bool oversized = own_oversized && leaf.numel > size;
    if (closed || oversized || used + leaf.numel > p.sizes.back() || leaf_pinned != pinned) {
      p.sizes.push_back(oversized ? round_up(leaf.numel, grid) : size);
      used = 0;
    }
    closed = oversized;
    pinned = leaf_pinned;
    used += leaf.numel;
    p.leaf_chunk.push_back(static_cast<int64_t>(p.sizes.size()) - 1);
  }
  return p;
}

int64_t count_chunks(const std::vector<LeafModule>& leaves, int64_t size, bool use_cpu_embedding) {
  return static_cast<int64_t>(pack_leaves(leaves, size, use_cpu_embedding).sizes.size());
}

std::vector<int64_t> leaf_chunks(const std::vector<LeafModule>& leaves, int64_t size,
                                 bool use_cpu_embedding) {
  return pack_leaves(leaves, size, use_cpu_embedding).leaf_chunk;
}

std::vector<int64_t> leaf_chunks(const std::vector<LeafModule>& leaves, const ChunkLayout& layout,
                                 bool use_cpu_embedding) {
  // The grid only rounds the capacity of a module's own chunk, which takes no other leaf: the
  // assignment is the same on any grid.
  const bool mixed = layout.choice == ChunkLayout::Choice::kMixed;
  const Packing p = pack_leaves(leaves, layout.chunk_size, use_cpu_embedding, mixed,
                                size_grid(layout.chunk_size));
  PSTAR_INTERNAL_ASSERT(static_cast<int64_t>(p.sizes.size()) == layout.num_chunks,
                        "the leaves pack into ", p.sizes.size(), " chunks, the layout has ",
                        layout.num_chunks);
  return p.leaf_chunk;
}

ChunkLayout plan_layout(const std::vector<LeafModule>& leaves, const LayoutOptions& options) {
  PSTAR_CHECK(!leaves.empty(), ConfigError, "the model has no parameters to train");
  PSTAR_CHECK(options.configured_size > 0, ConfigError, "default_chunk_size must be positive, got ",
              options.configured_size);
  ChunkLayout layout;
  for (const auto& leaf : leaves) {
    layout.largest_leaf = std::max(layout.largest_leaf, leaf.numel);
    layout.params += leaf.numel;
  }
  const int64_t largest = layout.largest_leaf, total = layout.params;
  // The least wasteful size in [lo, hi] on the grid; ties go to the smaller size. At most ~512
  // candidates are tried. `own`: oversized leaves get chunks of their own at each candidate, and
  // the fewest elements in such chunks come first: an oversized chunk cannot keep its optimizer
  // state on NVMe or be speculated (Note [chunk sizes]).
  auto search = [&](int64_t lo_elems, int64_t hi_elems, int64_t step, bool own) {
    const int64_t lo = round_up(lo_elems, step);
    const int64_t hi = std::max(lo, round_up(hi_elems, step));
    const int64_t stride = std::max<int64_t>(step, (hi - lo) / 512 / step * step);
    int64_t best = lo;
    std::pair<int64_t, int64_t> best_cost{std::numeric_limits<int64_t>::max(), 0};
    for (int64_t candidate = lo; candidate <= hi; candidate += stride) {
      const Packing p = pack_leaves(leaves, candidate, options.use_cpu_embedding, own, step);
      int64_t oversized = 0;
      for (int64_t size : p.sizes) oversized += size > candidate ? size : 0;
      const std::pair<int64_t, int64_t> cost{oversized, p.capacity() - total};
      if (cost < best_cost) {
        best_cost = cost;
        best = candidate;
      }
    }
    layout.searched_lo = lo;
    layout.searched_hi = hi;
    return best;
  };
  const int64_t configured = options.configured_size;
  int64_t size = configured;
  const bool own = options.world_size == 1 && largest > configured;
  if (own) {
    // Note [chunk sizes]: ordinary sizes up to 4x the configured one, so that several of a
    // layer's modules share a chunk (one Llama-3.1-8B layer is 218M elements).
    size = search(configured, 4 * configured, size_grid(configured), /*own=*/true);
    layout.choice = ChunkLayout::Choice::kMixed;
  } else if (options.search) {
    size = search(largest, std::max(largest, size) * 2, int64_t{1} << 16, false);
    layout.choice = ChunkLayout::Choice::kSearched;
  } else if (size > total && size > largest) {
    // One chunk larger than the whole model would be mostly padding.
    size = search(std::max(largest, total / 16), total, int64_t{1} << 16, false);
    layout.choice = ChunkLayout::Choice::kShrunk;
  } else if (largest > size) {
    size = round_up(largest, 1 << 16);
    layout.choice = ChunkLayout::Choice::kRaised;
  }
  layout.chunk_size = size;
  const Packing packing =
      pack_leaves(leaves, size, options.use_cpu_embedding, own, size_grid(configured));
  layout.num_chunks = static_cast<int64_t>(packing.sizes.size());
  if (own) {
    layout.sizes = packing.sizes;
    for (int64_t s : packing.sizes) layout.oversized_chunks += s > size ? 1 : 0;
  }
  if (options.use_cpu_embedding) {
    std::set<int64_t> pinned;
    for (size_t i = 0; i < leaves.size(); ++i)
      if (leaves[i].embedding) pinned.insert(packing.leaf_chunk[i]);
    layout.host_pinned_chunks = static_cast<int64_t>(pinned.size());
  }
  return layout;
}

}  // namespace pstar::plan
