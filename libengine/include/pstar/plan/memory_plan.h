// The memory accounting of the chunk engine, shared by the engine's start-up fit check and by
// `pstar estimate`: there is no second formula (docs/estimate.md).
//
// Note [fit]
// Model data lives in chunks (Note [chunk layout] in chunked_engine.h). A rank owns
// ceil(chunks / world) of them. Owned chunks live on the host while the host budget has room;
// the rest start on the device and stay there for good (the "static" part of the device margin,
// updated by device Adam). The device must hold, at once: the static chunks with their optimizer
// state, the working set (two communication groups of gathered compute payloads: the group in use
// and the next), and the non-model peak (activations and temporaries). The working set and the
// non-model peak must fit the device budget. With static chunks, everything must fit in
// kDeviceFillRatio of it: those chunks cannot be evicted, so the rest absorbs misprediction of
// non-model memory. Without them, the warm-up's measurement and eviction absorb it.
//
// Note [nvme fit]
// With an NVMe tier (FitInput::nvme_capacity > 0), a chunk may keep its optimizer payloads
// (fp32 master where there is one, momentum, variance) in a file while its compute payload
// (param/grad) stays in host or device memory; host Adam updates it through a staging pool of
// kNvmeStagingChunks chunks' optimizer payloads per rank, a fixed, exact-size host allocation
// counted against the host budget (only when some chunk is on NVMe, and never more slots than
// chunks on NVMe). The fit first places chunks as without NVMe (host, then static on the device);
// only if that fails does it move the fewest chunks' optimizer payloads to NVMe that make the model
// fit, since every such chunk costs disk I/O each step. The compute payloads of those chunks live
// on the host while it has room, then on the device (where they stay, like static chunks: the
// device fill ratio applies); those on the device are updated on the host through one more buffer
// of a compute payload per rank, counted in the pool. The NVMe tier may fill kNvmeFillRatio of its
// capacity.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "pstar/model/gpt_shape.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/chunk_layout.h"

namespace pstar::config {
struct TrainConfig;
}

namespace pstar::plan {

// Share of a tier pstar uses when no budget is given (PatrickStar's tracer uses 0.8 too).
inline constexpr double kDefaultMemoryRatio = 0.8;
// Share of the device budget the start-up plan may fill; the warm-up plan uses the same share
// for the margin.
inline constexpr double kDeviceFillRatio = 0.9;
// Chunks' optimizer payloads per rank in the host staging pool of the NVMe tier (Note [nvme fit]):
// a read-ahead depth of 2, the chunk being updated, and 1 written behind. The engine's NVMe tier
// sizes its pool with the same constant.
inline constexpr int64_t kNvmeStagingChunks = 4;
// Share of the NVMe capacity the plans may fill: headroom for the filesystem (ext4 reserves 5%
// for root by default; metadata, other files) and for SSDs, whose writes slow as they fill.
inline constexpr double kNvmeFillRatio = 0.9;
// Note [flat gathers] in engine/group_sync.h: a device communicator reduces a group through an
// fp32 buffer of world_size parts, in pieces of at most reduce_piece_elements per part, so that
// the buffer stays within kReduceBufferBytes whatever the chunk size (a whole chunk per part would
// take 2 GiB on 8 GPUs at 64 Mi elements). Every rank derives the same pieces.
inline constexpr int64_t kReduceBufferBytes = int64_t{256} << 20;
inline int64_t reduce_piece_elements(int64_t world_size, int64_t largest_chunk,
                                     int64_t cap_bytes = kReduceBufferBytes) {
  return std::max<int64_t>(1, std::min(largest_chunk, cap_bytes / (4 * world_size)));
}
inline int64_t reduce_buffer_bytes(int64_t world_size, int64_t largest_chunk,
                                   int64_t cap_bytes = kReduceBufferBytes) {
  return world_size * reduce_piece_elements(world_size, largest_chunk, cap_bytes) * 4;
}

// The bytes of a device budget the plans may fill with chunks and non-model memory
// (kDeviceFillRatio of it): every use of the ratio goes through this.
inline double device_fill_bytes(int64_t device_budget) {
  return kDeviceFillRatio * static_cast<double>(device_budget);
}
// The bytes of a CUDA tier's arena for `device_budget`: the share the plans fill
// (device_fill_bytes) less `predicted_non_model` (activations, temporaries and the libraries'
// workspaces, Note [library workspaces]). The plans never place chunks beyond that, and the share
// they never fill is left to LibTorch, whose caching allocator holds more than its live
// allocations (Note [device footprint]): an arena reaching into it put a GPU run over its budget.
// Throws OutOfMemoryError when nothing is left for chunks.
int64_t device_arena_bytes(int64_t device_budget, int64_t predicted_non_model);

// This machine's physical memory (the default budgets are kDefaultMemoryRatio of it).
int64_t physical_memory_bytes();

// A config's engine.device_memory and engine.host_memory, defaulted as the chunk engine does.
struct Budgets {
  int64_t device = 0, host = 0;
};
Budgets config_budgets(const config::TrainConfig& config);
// The same on a machine of `physical_memory_bytes` (the run plan's facts, or a hypothetical one).
Budgets budgets_for(const config::TrainConfig& config, int64_t physical_memory_bytes);

// ---- bytes per element of a chunk --------------------------------------------------------------

struct PayloadBytes {
  int64_t param = 0;   // compute dtype (2 for fp16/bf16, 4 for fp32)
  int64_t grad = 0;    // separate fp32 gradient: 4 without param/grad reuse, else 0
  int64_t master = 0;  // fp32 master: 4, or 0 in fp32 training (the param is the master)
  int64_t adam = 8;    // momentum + variance
  int64_t compute() const { return param + grad; }  // moves between tiers with use
  int64_t optimizer() const { return master + adam; }
  int64_t whole() const { return compute() + optimizer(); }
};

// Note [param/grad reuse] in chunked_engine.h: fp16/bf16 without gradient accumulation reuse the
// parameter slot for the gradient.
PayloadBytes payload_bytes(int64_t elem_bytes, bool gradient_accumulation);

// ---- non-model memory --------------------------------------------------------------------------

// One GPT micro-batch as pstar's model computes it (model/gpt.cpp): LayerNorm and softmax in fp32,
// loss in fp32 over the full vocabulary.
struct GptActivationInput {
  int64_t hidden = 0, layers = 0, heads = 0, vocab = 0;
  int64_t seq = 0, micro_batch = 0;
  int64_t elem_bytes = 2;
  bool checkpointing = false;
};

// Note [activation model]: the bytes autograd keeps per block, and the transient peaks of the
// loss/LM head and of one block's backward. docs/estimate.md derives each term.
struct ActivationEstimate {
  int64_t block_saved = 0;     // one block's saved tensors (kept per block without checkpointing)
  int64_t stored = 0;          // all blocks' saved tensors during backward
  int64_t head_peak = 0;       // final LayerNorm + logits + fp32 loss and their gradients
  int64_t block_backward = 0;  // one block's backward transients (+ recompute with checkpointing)
  int64_t peak = 0;            // the non-model peak: the larger of the two phases
  int64_t stored_without_checkpointing = 0, stored_with_checkpointing = 0;  // for reports
};
ActivationEstimate estimate_gpt_activations(const GptActivationInput& in);

// What a training config asks of one rank: the model's shape, the micro-batch of full-length
// sequences, the compute dtype and checkpointing.
GptActivationInput gpt_activation_input(const config::TrainConfig& config,
                                        const model::GptConfig& shape);
// Bytes per compute element under a config whose bf16.enabled is decided (plan::decided_precision):
// 2 for bf16/fp16, 4 for fp32.
int64_t compute_elem_bytes(const config::TrainConfig& config);
// The GPT's leaf modules in construction order, embeddings (wte, wpe) marked.
std::vector<LeafModule> gpt_leaf_modules(const model::GptConfig& shape);
// The leaf modules of the model a config describes (either family), embeddings marked.
std::vector<LeafModule> model_leaf_modules(const model::ModelShape& shape);

// Where the chunk engine puts each parameter of the model a config describes, as
// build_model_and_engine builds it on `world_size` ranks: the layout plan_layout chooses
// (default_chunk_size, engine.chunk_size_search, use_cpu_embedding, and the world size: Note [chunk
// sizes]) and every parameter's chunk. Rank chunk % N of N owns it (chunk::Sharding); a parameter
// of a split module (Note [split modules]) lies across the parts from its chunk on, each rank
// owning the piece in its part (piece_in_part). This is what resharding a checkpoint to another
// number of ranks needs.
struct ModelChunkMap {
  ChunkLayout layout;
  std::vector<model::ParameterShape> params;  // construction order
  std::vector<int64_t> chunks;   // params[i]'s chunk (a split module's: its first part)
  std::vector<int64_t> offsets;  // params[i]'s elements into its chunk (or its module's span)
  bool split(size_t i) const { return layout.part_of(chunks[i]) >= 0; }
};
ModelChunkMap model_chunk_map(const config::TrainConfig& config, int64_t world_size);

// ---- the fit ----------------------------------------------------------------------------------

struct FitInput {
  ChunkLayout layout;
  PayloadBytes payload;
  int64_t world_size = 1;        // ranks sharing the chunks (ZeRO ownership)
  int64_t ranks_per_host = 1;    // ranks sharing one host budget
  int64_t device_budget = 0;     // per rank
  int64_t host_budget = 0;       // per host
  int64_t non_model = 0;         // predicted non-model peak per rank (0: unknown, measured later)
  int64_t staging_per_rank = 0;  // pinned host staging buffers (0 on the emulated device tier)
  // Note [flat gathers] in engine/group_sync.h: the reduction's fp32 buffer a device communicator
  // (NCCL) needs on the device through the backward (reduce_buffer_bytes); 0 for the host rings.
  int64_t device_reduce_buffer = 0;
  int64_t nvme_capacity = 0;  // per host, bytes; 0: no NVMe tier (Note [nvme fit])
  // The staging pool's buffers are whole blocks of this: the engine's are O_DIRECT's 4096 bytes
  // (a chunk's optimizer payloads are a multiple of it unless the chunk size is odd).
  int64_t nvme_block = 1;
};

struct Fit {
  // Where the i-th chunk a rank owns (chunk i * N + rank) lives: its whole payloads on the host
  // (or, host-pinned, always there), or on the device for good; or its optimizer payloads on NVMe
  // with its compute payloads on the host or on the device for good (Note [nvme fit]).
  enum class Home : uint8_t { kHost, kHostNvme, kDevice, kDeviceNvme };
  bool fits = false;
  int64_t owned_chunks = 0;  // per rank
  // Per rank: each owned chunk's home, in order (chunk i * N + rank is the i-th), the elements in
  // each home (chunks differ in size: Note [chunk sizes]), and the owned share of chunk padding.
  struct Owned {
    std::vector<Home> homes;
    int64_t host_elements = 0, device_elements = 0;
    int64_t nvme_host_elements = 0, nvme_device_elements = 0;
    int64_t padding_bytes = 0;  // all payloads
  } owned;
  int64_t host_chunks = 0;    // per rank, on the host
  int64_t device_chunks = 0;  // per rank, static on the device
  // Per rank, optimizer payloads on NVMe (Note [nvme fit]); of those, the ones whose compute
  // payload is on the host and the ones whose compute payload stays on the device.
  int64_t nvme_chunks = 0, nvme_host_chunks = 0, nvme_device_chunks = 0;
  // Per rank, on the device.
  int64_t device_static = 0;  // device_chunks * whole + nvme_device_chunks * compute payload
  // Two groups of gathered compute payloads (the two largest), and a device communicator's
  // reduction buffer (FitInput::device_reduce_buffer).
  int64_t device_working = 0;
  int64_t device_non_model = 0;
  int64_t device_used = 0;
  int64_t device_limit = 0;  // kDeviceFillRatio * device_budget
  // Per host.
  int64_t host_model = 0;    // ranks_per_host * (host_chunks * whole + nvme_host_chunks * compute)
  int64_t host_staging = 0;  // pinned compute staging (staging_per_rank)
  int64_t host_nvme_staging = 0;  // the NVMe staging pool, all ranks
  int64_t host_used = 0;
  // Per host, on NVMe.
  int64_t nvme_used = 0;   // ranks_per_host * nvme_chunks * optimizer payload
  int64_t nvme_limit = 0;  // kNvmeFillRatio * nvme_capacity
  std::string reason;      // why not, naming the tier and what to change; empty when it fits

  int64_t device_margin() const { return device_limit - device_used; }
};

// Bytes of the NVMe staging pool per rank for `nvme_chunks` chunks on NVMe (Note [nvme fit]), each
// buffer a whole number of `block` bytes. NVMe chunks are ordinary ones (`chunk_size`): a module's
// own larger chunk keeps its optimizer payloads in memory.
int64_t nvme_staging_per_rank(int64_t nvme_chunks, int64_t chunk_size, const PayloadBytes& payload,
                              int64_t block = 1);

Fit check_fit(const FitInput& in);

}  // namespace pstar::plan
