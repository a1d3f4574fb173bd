#include "pstar/plan/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <limits>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/formats/config.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/plan/run_plan.h"

namespace pstar::plan {
namespace {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }
int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

}  // namespace

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{16} << 30;
}

Budgets budgets_for(const config::TrainConfig& config, int64_t physical_memory_bytes) {
  const auto fallback =
      static_cast<int64_t>(kDefaultMemoryRatio * static_cast<double>(physical_memory_bytes));
  return Budgets{config.engine.device_memory.value_or(fallback),
                 config.engine.host_memory.value_or(fallback)};
}

Budgets config_budgets(const config::TrainConfig& config) {
  return budgets_for(config, physical_memory_bytes());
}

namespace {

// First fit in order: a new chunk whenever a leaf does not fit in the current one or changes
// between host-pinned and not. `on_leaf(chunk)` is told each leaf's chunk; returns the count.
template <typename OnLeaf>
int64_t first_fit(const std::vector<LeafModule>& leaves, int64_t size, bool use_cpu_embedding,
                  OnLeaf&& on_leaf) {
  int64_t count = 0, used = size;
  bool pinned = false;
  for (const auto& leaf : leaves) {
    const bool leaf_pinned = leaf.embedding && use_cpu_embedding;
    if (used + leaf.numel > size || (count > 0 && leaf_pinned != pinned)) {
      ++count;
      used = 0;
    }
    pinned = leaf_pinned;
    used += leaf.numel;
    on_leaf(count - 1);
  }
  return count;
}

}  // namespace

int64_t count_chunks(const std::vector<LeafModule>& leaves, int64_t size, bool use_cpu_embedding) {
  return first_fit(leaves, size, use_cpu_embedding, [](int64_t) {});
}

std::vector<int64_t> leaf_chunks(const std::vector<LeafModule>& leaves, int64_t size,
                                 bool use_cpu_embedding) {
  std::vector<int64_t> chunks;
  chunks.reserve(leaves.size());
  first_fit(leaves, size, use_cpu_embedding, [&](int64_t k) { chunks.push_back(k); });
  return chunks;
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
  // The least wasteful size in [lo, hi] on a 64Ki-element grid (PatrickStar's and Gemini's
  // search); ties go to the smaller size. At most ~512 candidates are tried.
  auto search = [&](int64_t lo_elems, int64_t hi_elems) {
    const int64_t step = 1 << 16;
    const int64_t lo = round_up(lo_elems, step);
    const int64_t hi = std::max(lo, round_up(hi_elems, step));
    const int64_t stride = std::max<int64_t>(step, (hi - lo) / 512 / step * step);
    int64_t best = lo;
    int64_t best_waste = std::numeric_limits<int64_t>::max();
    for (int64_t candidate = lo; candidate <= hi; candidate += stride) {
      const int64_t waste =
          count_chunks(leaves, candidate, options.use_cpu_embedding) * candidate - total;
      if (waste < best_waste) {
        best_waste = waste;
        best = candidate;
      }
    }
    layout.searched_lo = lo;
    layout.searched_hi = hi;
    return best;
  };
  int64_t size = options.configured_size;
  if (options.search) {
    size = search(largest, std::max(largest, size) * 2);
    layout.choice = ChunkLayout::Choice::kSearched;
  } else if (size > total && size > largest) {
    // One chunk larger than the whole model would be mostly padding.
    size = search(std::max(largest, total / 16), total);
    layout.choice = ChunkLayout::Choice::kShrunk;
  } else if (largest > size) {
    size = round_up(largest, 1 << 16);
    layout.choice = ChunkLayout::Choice::kRaised;
  }
  layout.chunk_size = size;
  layout.num_chunks = count_chunks(leaves, size, options.use_cpu_embedding);
  if (options.use_cpu_embedding) {
    // Embeddings come first in construction order; count the chunks they open.
    std::vector<LeafModule> embeddings;
    for (const auto& leaf : leaves) {
      if (!leaf.embedding) break;
      embeddings.push_back(leaf);
    }
    layout.host_pinned_chunks =
        embeddings.empty() ? 0 : count_chunks(embeddings, size, /*use_cpu_embedding=*/true);
  }
  return layout;
}

PayloadBytes payload_bytes(int64_t elem_bytes, bool gradient_accumulation) {
  PSTAR_INTERNAL_ASSERT(elem_bytes == 2 || elem_bytes == 4, "element size ", elem_bytes);
  const bool fp32 = elem_bytes == 4;
  PayloadBytes p;
  p.param = elem_bytes;
  p.grad = (fp32 || gradient_accumulation) ? 4 : 0;
  p.master = fp32 ? 0 : 4;
  p.adam = 8;
  return p;
}

// Note [activation model]
// Derived from model/gpt.cpp as LibTorch's autograd runs it, with B·S tokens of width h, a heads,
// A = a·B·S² attention scores, e bytes per compute element (docs/estimate.md has the derivation):
//  - a block saves two fp32 LayerNorm inputs (8·B·S·h; in fp32 training they are the block's own
//    tensors), 14 compute-dtype tensors of width h (LayerNorm outputs 2, qkv 3, attention output
//    1, MLP 4+4), LayerNorm statistics (16·B·S), the fp32 softmax output and its compute-dtype
//    copy (4+e per score; the copy is the same tensor in fp32) and the causal mask (S²);
//  - with checkpointing a block keeps only its input (e·B·S·h), and backward recomputes one block;
//  - the loss phase holds the logits (e per vocabulary entry), their fp32 log-softmax and two
//    fp32 gradients (12), plus the final LayerNorm's saved tensors;
//  - a block's backward adds the larger of the attention gradients ((e+4)·A; 8·A in fp32) and
//    the MLP gradients (9·e·B·S·h, plus a 4h² weight gradient), while the logits are still held.
// Checked against the engine's measured non-model peak in tests/engine/plan.
ActivationEstimate estimate_gpt_activations(const GptActivationInput& in) {
  const int64_t e = in.elem_bytes;
  const bool fp32 = e >= 4;
  const int64_t bs = in.micro_batch * in.seq;
  const int64_t bsh = bs * in.hidden;
  const int64_t scores = in.heads * in.micro_batch * in.seq * in.seq;
  const int64_t bsv = bs * in.vocab;

  ActivationEstimate a;
  a.block_saved = (8 + 14 * e) * bsh + 16 * bs + (4 + (fp32 ? 0 : e)) * scores + in.seq * in.seq;
  a.stored_without_checkpointing = in.layers * a.block_saved;
  a.stored_with_checkpointing = in.layers * e * bsh;
  a.stored = in.checkpointing ? a.stored_with_checkpointing : a.stored_without_checkpointing;
  a.head_peak = (4 + e) * bsh + 8 * bs + (e + 12) * bsv;
  const int64_t attention_grads = (fp32 ? 8 : e + 4) * scores;
  const int64_t mlp_grads = 9 * e * bsh + 4 * in.hidden * in.hidden * e;
  a.block_backward =
      (in.checkpointing ? a.block_saved : 0) + std::max(attention_grads, mlp_grads) + e * bsv;
  a.peak = a.stored + std::max(a.head_peak, a.block_backward);
  return a;
}

int64_t compute_elem_bytes(const config::TrainConfig& config) {
  return elem_bytes(decided_precision(config));
}

GptActivationInput gpt_activation_input(const config::TrainConfig& config,
                                        const model::GptConfig& shape) {
  GptActivationInput in;
  in.hidden = shape.hidden;
  in.layers = shape.layers;
  in.heads = shape.heads;
  in.vocab = shape.vocab_size;
  in.seq = shape.seq_len;  // the trainer samples full-length windows
  in.micro_batch = config.train_micro_batch_size_per_gpu;
  in.elem_bytes = compute_elem_bytes(config);
  in.checkpointing = config.engine.activation_checkpointing;
  return in;
}

std::vector<LeafModule> gpt_leaf_modules(const model::GptConfig& shape) {
  std::vector<LeafModule> leaves;
  for (int64_t n : model::gpt_leaf_module_numels(shape)) leaves.push_back(LeafModule{n, false});
  leaves[0].embedding = leaves[1].embedding = true;  // wte, wpe
  return leaves;
}

std::vector<LeafModule> model_leaf_modules(const model::ModelShape& shape) {
  std::vector<LeafModule> leaves;
  const std::vector<bool> embedding = shape.embedding_leaves();
  const std::vector<int64_t> numels = shape.leaf_numels();
  for (size_t i = 0; i < numels.size(); ++i) leaves.push_back(LeafModule{numels[i], embedding[i]});
  return leaves;
}

ModelChunkMap model_chunk_map(const config::TrainConfig& config) {
  const model::ModelShape shape = model::resolve_model_shape(config.model);
  const std::vector<LeafModule> leaves = model_leaf_modules(shape);
  ModelChunkMap map;
  const bool cpu_embedding = decided_cpu_embedding(config);
  map.layout = plan_layout(leaves, LayoutOptions{config.default_chunk_size,
                                                 config.engine.chunk_size_search, cpu_embedding});
  const std::vector<int64_t> by_leaf = leaf_chunks(leaves, map.layout.chunk_size, cpu_embedding);
  map.params = shape.parameter_shapes();
  map.chunks.reserve(map.params.size());
  for (const auto& p : map.params) map.chunks.push_back(by_leaf[static_cast<size_t>(p.leaf)]);
  return map;
}

int64_t device_arena_bytes(int64_t device_budget, int64_t predicted_non_model) {
  const auto fill = static_cast<int64_t>(device_fill_bytes(device_budget));
  PSTAR_CHECK(predicted_non_model < fill, OutOfMemoryError, "engine.device_memory ",
              format_bytes(device_budget), " leaves nothing for chunks after ",
              format_bytes(predicted_non_model),
              " of predicted activations, temporaries and library workspaces and the ",
              format_bytes(device_budget - fill),
              " left to LibTorch's cache; raise engine.device_memory, lower "
              "train_micro_batch_size_per_gpu, or turn on engine.activation_checkpointing");
  return fill - predicted_non_model;
}

int64_t nvme_staging_per_rank(int64_t nvme_chunks, int64_t chunk_size, const PayloadBytes& payload,
                              int64_t block) {
  PSTAR_INTERNAL_ASSERT(block >= 1);
  const int64_t buffer = (chunk_size * payload.optimizer() + block - 1) / block * block;
  return std::min(nvme_chunks, kNvmeStagingChunks) * buffer;
}

namespace {

// One rank's chunks with `nvme` of them keeping their optimizer payloads on NVMe (Note [nvme fit]).
struct NvmePlacement {
  bool feasible = false;  // the compute payloads of the NVMe chunks find room
  int64_t nvme = 0, nvme_host = 0, nvme_device = 0;
  int64_t host_capacity = 0, device_capacity = 0;  // whole chunks that fit beside them
  int64_t staging = 0;                             // the NVMe staging pool, per rank
  int64_t capacity() const { return feasible ? nvme + host_capacity + device_capacity : -1; }
};

}  // namespace

Fit check_fit(const FitInput& in) {
  PSTAR_INTERNAL_ASSERT(in.world_size >= 1 && in.ranks_per_host >= 1 && in.nvme_capacity >= 0);
  const int64_t whole = in.layout.chunk_size * in.payload.whole();
  const int64_t compute = in.layout.chunk_size * in.payload.compute();
  const int64_t optimizer = in.layout.chunk_size * in.payload.optimizer();
  const int64_t r = in.ranks_per_host;
  Fit f;
  f.owned_chunks = ceil_div(in.layout.num_chunks, in.world_size);
  f.padding_bytes = ceil_div(in.layout.padding_elements(), in.world_size) * in.payload.whole();
  f.host_staging = in.staging_per_rank * r;
  f.device_working = 2 * in.world_size * compute;
  f.device_non_model = in.non_model;
  f.device_limit = static_cast<int64_t>(device_fill_bytes(in.device_budget));
  f.nvme_limit = static_cast<int64_t>(kNvmeFillRatio * static_cast<double>(in.nvme_capacity));

  // Host first (every chunk starts there), then the device takes the rest for good.
  const int64_t host_room = std::max<int64_t>(0, in.host_budget - f.host_staging);
  const int64_t host_capacity = host_room / r / whole;
  f.host_chunks = std::min(f.owned_chunks, host_capacity);
  f.device_chunks = f.owned_chunks - f.host_chunks;
  f.device_static = f.device_chunks * whole;
  f.device_used = f.device_static + f.device_working + f.device_non_model;
  f.host_model = r * f.host_chunks * whole;
  f.host_used = f.host_model + f.host_staging;

  const int64_t pinned_owned = ceil_div(in.layout.host_pinned_chunks, in.world_size);
  const int64_t model_data = f.owned_chunks * whole;
  const int64_t device_room = f.device_limit - f.device_working - f.device_non_model;
  if (pinned_owned > host_capacity) {
    f.reason =
        str_cat("host tier: the embedding chunks kept on the host (use_cpu_embedding) need ",
                format_bytes(pinned_owned * whole * r), " but only ", format_bytes(host_room),
                " is available; raise the host memory or turn "
                "use_cpu_embedding off");
  } else if (f.device_working + f.device_non_model > in.device_budget) {
    f.reason = str_cat("device tier: the working set (", format_bytes(f.device_working),
                       ") plus the predicted non-model peak (", format_bytes(f.device_non_model),
                       ") exceed the device budget (", format_bytes(in.device_budget),
                       "); lower the micro-batch, turn activation checkpointing on, or lower the "
                       "chunk size");
  } else if (f.device_chunks > 0 && f.device_used > f.device_limit) {
    f.reason = str_cat("model data needs ", format_bytes(model_data), " per rank (", f.owned_chunks,
                       " chunks of ", format_bytes(whole), "); the host holds ", f.host_chunks,
                       " and the other ", f.device_chunks, " (", format_bytes(f.device_static),
                       ") do not fit on the device next to the "
                       "working set and non-model memory (room for ",
                       format_bytes(std::max<int64_t>(0, device_room)),
                       "); raise the host or device memory, or train a smaller model");
    if (in.nvme_capacity > 0) {
      // Note [nvme fit]: the fewest chunks whose optimizer payloads move to NVMe.
      const int64_t device_free = std::max<int64_t>(0, device_room);
      auto place = [&](int64_t n) {
        NvmePlacement p;
        p.nvme = n;
        p.staging = nvme_staging_per_rank(n, in.layout.chunk_size, in.payload, in.nvme_block);
        const int64_t host_free =
            std::max<int64_t>(0, in.host_budget - r * (in.staging_per_rank + p.staging)) / r -
            pinned_owned * whole;  // host-pinned chunks stay whole on the host
        if (host_free < 0) return p;
        p.nvme_host = std::min(n, host_free / compute);
        int64_t room = host_free;
        if (p.nvme_host < n) {
          // Compute payloads kept on the device are updated on the host through one more buffer
          // of a compute payload per rank (Note [nvme tier] in engine/chunked_engine.h).
          room -= compute;
          if (room < 0) return p;
          p.staging += compute;
          p.nvme_host = std::min(n, room / compute);
        }
        p.nvme_device = n - p.nvme_host;
        if (p.nvme_device * compute > device_free) return p;
        p.feasible = true;
        p.host_capacity = pinned_owned + (room - p.nvme_host * compute) / whole;
        p.device_capacity = (device_free - p.nvme_device * compute) / whole;
        return p;
      };
      // Feasibility falls with n (the pool grows, then the compute payloads fill both tiers);
      // beyond the pool's size the capacity never falls with n (a chunk's compute payload is at
      // most the whole chunk it replaces), so both searches bisect.
      const int64_t movable = f.owned_chunks - pinned_owned;
      int64_t lo = 0, hi = movable + 1;  // place(lo) feasible, place(hi) not (or past the end)
      while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (place(mid).feasible ? lo : hi) = mid;
      }
      const int64_t most = lo;
      int64_t chosen = -1;
      for (int64_t n = 1; n <= std::min(most, kNvmeStagingChunks - 1) && chosen < 0; ++n)
        if (place(n).capacity() >= f.owned_chunks) chosen = n;
      if (chosen < 0 && most >= kNvmeStagingChunks && place(most).capacity() >= f.owned_chunks) {
        int64_t bad = kNvmeStagingChunks - 1, good = most;
        while (good - bad > 1) {
          const int64_t mid = bad + (good - bad) / 2;
          (place(mid).capacity() >= f.owned_chunks ? good : bad) = mid;
        }
        chosen = good;
      }
      const NvmePlacement p = place(chosen >= 0 ? chosen : std::max<int64_t>(1, most));
      f.nvme_chunks = p.nvme;
      f.nvme_host_chunks = p.nvme_host;
      f.nvme_device_chunks = p.nvme_device;
      f.host_chunks = std::min(f.owned_chunks - p.nvme, p.host_capacity);
      f.device_chunks = f.owned_chunks - p.nvme - f.host_chunks;
      f.device_static = f.device_chunks * whole + p.nvme_device * compute;
      f.device_used = f.device_static + f.device_working + f.device_non_model;
      f.host_model = r * (f.host_chunks * whole + p.nvme_host * compute);
      f.host_nvme_staging = r * p.staging;
      f.host_used = f.host_model + f.host_staging + f.host_nvme_staging;
      f.nvme_used = r * p.nvme * optimizer;
      if (chosen < 0) {
        f.reason = str_cat(
            "model data needs ", format_bytes(model_data), " per rank (", f.owned_chunks,
            " chunks of ", format_bytes(whole), "); even with the optimizer payloads of ", most,
            " chunks on NVMe, the compute payloads (", format_bytes(compute),
            " per chunk) and the NVMe staging pool (", format_bytes(f.host_nvme_staging),
            " per host) leave the host and the device (room for ", format_bytes(device_free),
            ") short; raise the host or device memory, or train a smaller model");
      } else if (f.nvme_used > f.nvme_limit) {
        f.reason = str_cat("NVMe tier: the optimizer payloads of ", p.nvme, " chunks per rank (",
                           format_bytes(f.nvme_used), " per host, ", format_bytes(optimizer),
                           " per chunk) exceed what the plan may fill of the NVMe's ",
                           format_bytes(in.nvme_capacity), " (", kNvmeFillRatio * 100,
                           "%: ", format_bytes(f.nvme_limit),
                           "); use a larger NVMe disk, raise the host or device memory, or train "
                           "a smaller model");
      } else {
        f.reason.clear();
      }
    }
  }
  f.fits = f.reason.empty();
  return f;
}

}  // namespace pstar::plan
