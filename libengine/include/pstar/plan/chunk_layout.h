// The chunk layout: which chunk each leaf module lands in, and each chunk's size. Shared by the
// chunk engine, `pstar estimate` and checkpoint resharding, so that they cannot disagree.
//
// Note [chunk sizes]
// Leaves are packed whole and in construction order, first fit: a new chunk whenever a leaf does
// not fit the current one, or it changes between host-pinned (use_cpu_embedding) and not. Every
// chunk has the ordinary size, with one exception: a leaf larger than the ordinary size (Llama-3's
// 525M-element embedding beside 58.7M-element MLP weights) is not allowed to decide the size of
// every other chunk. With one rank it gets a chunk of its own, sized to it on the size grid; with
// several it is split over a communication group of its own (Note [split modules]). The next leaf
// starts a new chunk. The ordinary size is then searched for the rest, up to 4x the configured
// one (16x where the best of those pads more than 1% of the model: a layer much wider than 4x,
// as Phi-4's, then packs whole), for the fewest elements in chunks of another size first (they
// cannot keep their optimizer state on NVMe or be speculated), then the least padding: raising
// every chunk to the largest
// leaf (what pstar did before) wasted 4.89 GiB of Llama-3.1-8B's model data in padding and moved a
// gigabyte at a time. Placement and eviction work in bytes (Note [mixed chunk sizes] in
// pstar/chunk/eviction.h).
//
// Note [split modules]
// With N > 1 ranks, every chunk of a communication group must have one size (the group is
// all-gathered part by part) and a module larger than the ordinary chunk must not land whole on
// one rank (its optimizer state and its host Adam would all be that rank's). So such a module is
// split over a group of its own: N chunks ("parts") of S = ceil(elements / N) rounded up to the
// size grid, part p holding elements [p * S, (p + 1) * S) of the module's parameters laid end to
// end (its "span"). The split groups come first, after only the host-pinned chunks (which the fit
// keeps first): where they fell in order, the last one (Llama's LM head) would need up to N - 1
// empty chunks to complete the group before it (10% of Qwen2.5-7B's model data on 8 ranks). A
// group being filled when one must start is completed with empty ordinary chunks. Every rank owns
// exactly one part, so its share of the module is S, and the ranks' shares of the whole model
// differ by at most one ordinary chunk, as without the module. A tensor of the module may lie
// across parts. The chunk engine assembles the span only where the module computes: gathering the
// group puts the N parts side by side in one block, the tensors are views of it, and the
// reduce-scatter sums the gradients part by part into each owner's chunk as for any group (Note
// [gathering] in engine/chunked_engine.h). Checkpoints keep each rank's piece of such a tensor
// under a name of its own (checkpoint/schema.h, piece_name), and resharding joins and cuts the
// pieces.
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
  // Ranks sharing the chunks: oversized leaves get a chunk of their own with one, a group of their
  // own with several (Note [split modules]).
  int64_t world_size = 1;
};

struct ChunkLayout {
  // kMixed: oversized leaves have chunks (one rank) or groups (several, Note [split modules]) of
  // their own, and the ordinary size was searched.
  enum class Choice { kConfigured, kSearched, kShrunk, kMixed };
  int64_t chunk_size = 0;  // elements, the ordinary chunk's
  int64_t num_chunks = 0;
  int64_t world_size = 1;          // the ranks it was planned for
  int64_t grid = 1;                // elements: what own chunks and parts are rounded up to
  int64_t host_pinned_chunks = 0;  // embedding chunks with use_cpu_embedding
  int64_t params = 0;
  int64_t largest_leaf = 0;
  int64_t oversized_chunks = 0;  // chunks of one leaf each: its own, or its parts
  int64_t split_modules = 0;     // leaves split over a group (Note [split modules])
  // Leaves of the last group laid end to end over N parts rather than padded with empty chunks
  // (Note [split modules]); 0 where it is not.
  int64_t tail_leaves = 0;
  Choice choice = Choice::kConfigured;
  int64_t searched_lo = 0, searched_hi = 0;  // the searched range, for kSearched, kShrunk, kMixed
  // Each chunk's capacity in elements; empty: every chunk is chunk_size.
  std::vector<int64_t> sizes;
  // Each chunk's part of a split module (Note [split modules]), or -1; empty: none is split.
  std::vector<int64_t> parts;

  int64_t size_of(int64_t k) const {
    return sizes.empty() ? chunk_size : sizes[static_cast<size_t>(k)];
  }
  int64_t part_of(int64_t k) const {
    return k < static_cast<int64_t>(parts.size()) ? parts[static_cast<size_t>(k)] : -1;
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
// leaves larger than `size` get chunks of their own, on a grid of `grid` elements; with `world` > 1
// they are split over groups of their own, Note [split modules]).
struct Packing {
  std::vector<int64_t> sizes;       // per chunk
  std::vector<int64_t> leaf_chunk;  // per leaf: its chunk, or its first part's
  std::vector<int64_t> parts;       // per chunk: its part of a split leaf, or -1
  int64_t tail_first = -1;          // the last group's first part, where it is split
  // Whether chunk k is a part of the split last group (Note [split modules]).
  bool in_tail(size_t k) const { return tail_first >= 0 && static_cast<int64_t>(k) >= tail_first; }
  int64_t capacity() const {
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    return total;
  }
};
Packing pack_leaves(const std::vector<LeafModule>& leaves, int64_t size, bool use_cpu_embedding,
                    bool own_oversized = false, int64_t grid = 1, int64_t world = 1);

// Note [split modules]: the piece of a tensor of a split module in part `part` of `part_size`
// elements, the tensor lying at `offset` elements into the module's span with `numel` elements:
// its elements [begin, end) (flattened), at `chunk_offset` in the part's chunk. Empty where the
// tensor has none in that part.
struct PieceRange {
  int64_t begin = 0, end = 0, chunk_offset = 0;
  int64_t numel() const { return end - begin; }
  bool empty() const { return end <= begin; }
};
PieceRange piece_in_part(int64_t offset, int64_t numel, int64_t part, int64_t part_size);

// Chunks needed for `leaves` (in construction order) at `size` elements per chunk, none oversized.
int64_t count_chunks(const std::vector<LeafModule>& leaves, int64_t size, bool use_cpu_embedding);

// The chunk of each leaf in `leaves` under `layout`: the chunk engine registers parameters this
// way (Note [chunk layout] in engine/chunked_engine.h).
std::vector<int64_t> leaf_chunks(const std::vector<LeafModule>& leaves, const ChunkLayout& layout,
                                 bool use_cpu_embedding);
// The same at one size, none oversized.
std::vector<int64_t> leaf_chunks(const std::vector<LeafModule>& leaves, int64_t size,
                                 bool use_cpu_embedding);

// The layout: the configured size; chunks (one rank) or groups (several) of their own for the
// leaves larger than it and a searched ordinary size (Notes [chunk sizes], [split modules]); or
// the least wasteful size on a 64Ki-element grid when searching (and when the configured size
// exceeds the whole model).
ChunkLayout plan_layout(const std::vector<LeafModule>& leaves, const LayoutOptions& options);

}  // namespace pstar::plan
