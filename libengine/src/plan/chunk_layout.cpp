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
                    bool own_oversized, int64_t grid, int64_t world) {
  PSTAR_INTERNAL_ASSERT(size > 0 && grid > 0 && world > 0, "packing at ", size, " on a grid of ",
                        grid, " for ", world, " ranks");
  Packing p;
  p.leaf_chunk.assign(leaves.size(), -1);
  int64_t used = 0;
  bool pinned = false, closed = true;  // `closed`: the current chunk takes no more leaves
  const auto add_chunk = [&p](int64_t chunk_size, int64_t part) {
    p.sizes.push_back(chunk_size);
    p.parts.push_back(part);
  };
  const auto pinned_leaf = [&](size_t i) { return leaves[i].embedding && use_cpu_embedding; };
  const auto split_leaf = [&](size_t i) {
    return world > 1 && own_oversized && leaves[i].numel > size;
  };
  // Note [split modules]: empty ordinary chunks complete the group being filled, then the leaf's
  // parts make a group of their own.
  const auto place_split = [&](size_t i) {
    while (p.sizes.size() % static_cast<size_t>(world) != 0) add_chunk(size, -1);
    p.leaf_chunk[i] = static_cast<int64_t>(p.sizes.size());
    const int64_t part = round_up((leaves[i].numel + world - 1) / world, grid);
    for (int64_t r = 0; r < world; ++r) add_chunk(part, r);
    closed = true;
    pinned = pinned_leaf(i);
  };
  bool groups_placed = false;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (p.leaf_chunk[i] >= 0) continue;  // a split leaf placed ahead
    const bool leaf_pinned = pinned_leaf(i);
    if (!groups_placed && !leaf_pinned && world > 1) {
      // Split groups go before the first leaf that is not host-pinned (the host-pinned chunks
      // stay first, Note [fit]): placed where they fall, the last one (an LM head) would leave up
      // to N - 1 empty chunks before it.
      for (size_t j = i; j < leaves.size(); ++j)
        if (split_leaf(j)) place_split(j);
      groups_placed = true;
      if (p.leaf_chunk[i] >= 0) continue;
    }
    if (split_leaf(i)) {
      place_split(i);
      continue;
    }
    const bool oversized = own_oversized && leaves[i].numel > size;
    if (closed || oversized || used + leaves[i].numel > p.sizes.back() || leaf_pinned != pinned) {
      add_chunk(oversized ? round_up(leaves[i].numel, grid) : size, -1);
      used = 0;
    }
    closed = oversized;
    pinned = leaf_pinned;
    used += leaves[i].numel;
    p.leaf_chunk[i] = static_cast<int64_t>(p.sizes.size()) - 1;
  }
  // Note [split modules]: where the chunks leave the last group short, its leaves are laid end to
  // end over a group of N parts instead of waiting for empty chunks to complete it, if that is
  // smaller (not on a grid as coarse as the chunk, the small models' case) and none of them is
  // host-pinned.
  const auto count = static_cast<int64_t>(p.sizes.size());
  const int64_t short_by = world > 1 ? count % world : 0;
  if (short_by == 0) return p;
  const int64_t first = count - short_by;
  int64_t tail = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (p.leaf_chunk[i] < first) continue;
    if (pinned_leaf(i)) return p;
    tail += leaves[i].numel;
  }
  const int64_t part = round_up((tail + world - 1) / world, grid);
  if (part >= size) return p;
  p.sizes.resize(static_cast<size_t>(first));
  p.parts.resize(static_cast<size_t>(first));
  for (int64_t r = 0; r < world; ++r) add_chunk(part, r);
  for (int64_t& k : p.leaf_chunk) k = std::min(k, first);
  p.tail_first = first;
  return p;
}

PieceRange piece_in_part(int64_t offset, int64_t numel, int64_t part, int64_t part_size) {
  PieceRange r;
  r.begin = std::clamp<int64_t>(part * part_size - offset, 0, numel);
  r.end = std::clamp<int64_t>((part + 1) * part_size - offset, 0, numel);
  r.chunk_offset = offset + r.begin - part * part_size;
  return r;
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
  // The layout's own grid: it decides whether the last group is split (Note [split modules]).
  const bool mixed = layout.choice == ChunkLayout::Choice::kMixed;
  const Packing p = pack_leaves(leaves, layout.chunk_size, use_cpu_embedding, mixed, layout.grid,
                                layout.world_size);
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
  const int64_t grid = size_grid(options.configured_size);
  // The least wasteful size in [lo, hi] on the grid; ties go to the smaller size. At most ~512
  // candidates are tried. `own`: oversized leaves get chunks or groups of their own at each
  // candidate, and the fewest elements in chunks of another size come first: such a chunk cannot
  // keep its optimizer state on NVMe or be speculated (Note [chunk sizes]).
  auto search = [&](int64_t lo_elems, int64_t hi_elems, int64_t step, bool own,
                    bool padding_first = false) {
    const int64_t lo = round_up(lo_elems, step);
    const int64_t hi = std::max(lo, round_up(hi_elems, step));
    const int64_t stride = std::max<int64_t>(step, (hi - lo) / 512 / step * step);
    int64_t best = lo;
    std::pair<int64_t, int64_t> best_cost{std::numeric_limits<int64_t>::max(), 0};
    for (int64_t candidate = lo; candidate <= hi; candidate += stride) {
      const Packing p =
          pack_leaves(leaves, candidate, options.use_cpu_embedding, own, grid, options.world_size);
      // The last group's parts (Note [split modules]) hold ordinary leaves: not counted here.
      int64_t oversized = 0;
      for (size_t k = 0; k < p.sizes.size(); ++k) {
        oversized += !p.in_tail(k) && (p.sizes[k] != candidate || p.parts[k] >= 0) ? p.sizes[k] : 0;
      }
      // With several ranks the empty chunks that complete the last group are allocated too
      // (counted where modules are split, whose groups already make the count matter).
      const auto chunks = static_cast<int64_t>(p.sizes.size());
      const int64_t completing =
          own ? (options.world_size - chunks % options.world_size) % options.world_size * candidate
              : 0;
      const int64_t padding = p.capacity() + completing - total;
      const std::pair<int64_t, int64_t> cost =
          padding_first ? std::pair{padding, oversized} : std::pair{oversized, padding};
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
  const bool own = largest > configured;
  if (own) {
    // Note [chunk sizes]: ordinary sizes up to 4x the configured one, so that several of a
    // layer's modules share a chunk (one Llama-3.1-8B layer is 218M elements).
    size = search(configured, 4 * configured, size_grid(configured), /*own=*/true);
    // A layer wider than that (Phi-4's 340M elements beside 92M-element MLP weights) can leave
    // every chunk a large gap: where the best size pads more than 1% of the model, sizes up to 16x
    // are tried too, for the least padding first, below the smallest module of its own (which
    // must keep its chunk: a larger ordinary size would be that module deciding every chunk's
    // size again), and taken where they pad less.
    int64_t smallest_own = std::numeric_limits<int64_t>::max();
    for (const auto& leaf : leaves)
      if (leaf.numel > size) smallest_own = std::min(smallest_own, leaf.numel);
    const int64_t step = size_grid(configured);
    const int64_t wider_hi = std::min(16 * configured, (smallest_own - 1) / step * step);
    const Packing best =
        pack_leaves(leaves, size, options.use_cpu_embedding, true, grid, options.world_size);
    if (100 * (best.capacity() - total) > total && wider_hi > 4 * configured) {
      const int64_t lo = layout.searched_lo, hi = layout.searched_hi;
      const int64_t wider =
          search(4 * configured, wider_hi, step, /*own=*/true, /*padding_first=*/true);
      const Packing other =
          pack_leaves(leaves, wider, options.use_cpu_embedding, true, grid, options.world_size);
      if (other.capacity() < best.capacity()) {
        size = wider;
      } else {
        layout.searched_hi = hi;
      }
      layout.searched_lo = lo;
    }
    layout.choice = ChunkLayout::Choice::kMixed;
  } else if (options.search) {
    size = search(largest, std::max(largest, size) * 2, int64_t{1} << 16, false);
    layout.choice = ChunkLayout::Choice::kSearched;
  } else if (size > total && size > largest) {
    // One chunk larger than the whole model would be mostly padding.
    size = search(std::max(largest, total / 16), total, int64_t{1} << 16, false);
    layout.choice = ChunkLayout::Choice::kShrunk;
  }
  layout.chunk_size = size;
  layout.world_size = options.world_size;
  layout.grid = grid;
  const Packing packing =
      pack_leaves(leaves, size, options.use_cpu_embedding, own, grid, options.world_size);
  layout.num_chunks = static_cast<int64_t>(packing.sizes.size());
  bool parts = false;
  for (size_t k = 0; k < packing.sizes.size(); ++k) {
    const int64_t part = packing.parts[k];
    parts = parts || part >= 0;
    if (packing.in_tail(k)) continue;
    layout.oversized_chunks += part >= 0 || packing.sizes[k] > size ? 1 : 0;
    layout.split_modules += part == 0 ? 1 : 0;
  }
  if (own || parts) layout.sizes = packing.sizes;
  if (parts) layout.parts = packing.parts;
  if (packing.tail_first >= 0) {
    for (const int64_t k : packing.leaf_chunk) layout.tail_leaves += k == packing.tail_first;
  }
  if (options.use_cpu_embedding) {
    std::set<int64_t> pinned;
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!leaves[i].embedding) continue;
      const int64_t k = packing.leaf_chunk[i];
      const int64_t parts = packing.parts[static_cast<size_t>(k)] >= 0 ? options.world_size : 1;
      for (int64_t part = 0; part < parts; ++part) pinned.insert(k + part);
    }
    layout.host_pinned_chunks = static_cast<int64_t>(pinned.size());
  }
  return layout;
}

}  // namespace pstar::plan
