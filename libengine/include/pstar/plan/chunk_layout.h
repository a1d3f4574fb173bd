// The chunk layout: which chunk each leaf module lands in, and each chunk's size. Shared by the
// chunk engine, `pstar estimate` and checkpoint resharding, so that they cannot disagree.
//
// Note [chunk sizes]
// Leaves are packed whole and in construction order, first fit: a new chunk whenever a leaf does
// not fit the current one, or it changes between host-pinned (use_cpu_embedding) and not. Every
// chunk has the ordinary size, with one exception: with one rank, a leaf larger than the ordinary
// size (Llama-3's 525M-element embedding beside 58.7M-element MLP weights) gets a chunk of its own,
// sized to it on the size grid, and the next leaf starts a new chunk. The ordinary size is then
// searched for the rest, up to 4x the configured one, for the fewest elements in such chunks
// first (they cannot keep their optimizer state on NVMe or be speculated), then the least padding:
// raising every chunk to the largest leaf (what pstar did before) wasted 4.89 GiB of Llama-3.1-8B's
// model data in padding and moved a gigabyte at a time. With several ranks every chunk of a
// communication group must have one size and an oversized leaf must not land whole on one rank, so
// there the ordinary size is still raised to the largest leaf (issue 35 item 2 leaves the split of
// an oversized leaf across ranks open). Placement and eviction work in bytes (Note [mixed chunk
// sizes] in pstar/chunk/eviction.h).
#pragma once

#include <cstdint>
#include <vector>

namespace pstar::plan {

// A leaf module that owns parameters, as the chunk plan sees it.
struct LeafModule {
  int64_t numel = 0;
  bool embedding = false;  // kept on the host with use_cpu_embedding
};

struct LayoutOptions {
  int64_t configured_size = 0;  // default_chunk_size, elements
  bool search = false;          // engine.chunk_size_search
  bool use_cpu_embedding = false;
  // Ranks sharing the chunks: with one, oversized leaves get chunks of their own (Note [chunk
  // sizes]).
  int64_t world_size = 1;
};

struct ChunkLayout {
  // kMixed: oversized leaves have chunks of their own, and the ordinary size was searched.
  enum class Choice { kConfigured, kSearched, kShrunk, kRaised, kMixed };
  int64_t chunk_size = 0;  // elements, the ordinary chunk's
  int64_t num_chunks = 0;
  int64_t host_pinned_chunks = 0;  // embedding chunks with use_cpu_embedding
  int64_t params = 0;
  int64_t largest_leaf = 0;
  int64_t oversized_chunks = 0;  // chunks of their own, larger than chunk_size
  Choice choice = Choice::kConfigured;
  int64_t searched_lo = 0, searched_hi = 0;  // the searched range, for kSearched, kShrunk, kMixed
  // Each chunk's capacity in elements; empty: every chunk is chunk_size.
  std::vector<int64_t> sizes;

  int64_t size_of(int64_t k) const {
    return sizes.empty() ? chunk_size : sizes[static_cast<size_t>(k)];
  }
  int64_t total_elements() const {
    int64_t total = 0;
    for (int64_t k = 0; k < num_chunks; ++k) total += size_of(k);
    return total;
  }
  int64_t largest_chunk() const {
    int64_t largest = chunk_size;
    for (int64_t size : sizes) largest = largest > size ? largest : size;
    return largest;
  }
  int64_t padding_elements() const { return total_elements() - params; }
};

// Leaves packed into chunks of `size` elements by the rule of Note [chunk sizes] (`own_oversized`:
// leaves larger than `size` get chunks of their own, on a grid of `grid` elements).
struct Packing {
  std::vector<int64_t> sizes;       // per chunk
  std::vector<int64_t> leaf_chunk;  // per leaf
  int64_t capacity() const {
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    return total;
  }
};
Packing pack_leaves(const std::vector<LeafModule>& leaves, int64_t size, bool use_cpu_embedding,
                    bool own_oversized = false, int64_t grid = 1);

// Chunks needed for `leaves` (in construction order) at `size` elements per chunk, none oversized.
int64_t count_chunks(const std::vector<LeafModule>& leaves, int64_t size, bool use_cpu_embedding);

// The chunk of each leaf in `leaves` under `layout`: the chunk engine registers parameters this
// way (Note [chunk layout] in engine/chunked_engine.h).
std::vector<int64_t> leaf_chunks(const std::vector<LeafModule>& leaves, const ChunkLayout& layout,
                                 bool use_cpu_embedding);
// The same at one size, none oversized.
std::vector<int64_t> leaf_chunks(const std::vector<LeafModule>& leaves, int64_t size,
                                 bool use_cpu_embedding);

// The layout: the configured size; raised to the largest leaf, or (one rank) with chunks of their
// own for the larger leaves and a searched ordinary size (Note [chunk sizes]); or the least
// wasteful size on a 64Ki-element grid when searching (and when the configured size exceeds the
// whole model).
ChunkLayout plan_layout(const std::vector<LeafModule>& leaves, const LayoutOptions& options);

}  // namespace pstar::plan
