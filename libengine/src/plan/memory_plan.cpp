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

ModelChunkMap model_chunk_map(const config::TrainConfig& config, int64_t world_size) {
  const model::ModelShape shape = model::resolve_model_shape(config.model);
  const std::vector<LeafModule> leaves = model_leaf_modules(shape);
  ModelChunkMap map;
  const bool cpu_embedding = decided_cpu_embedding(config);
  map.layout =
      plan_layout(leaves, LayoutOptions{config.default_chunk_size, config.engine.chunk_size_search,
                                        cpu_embedding, world_size});
  const std::vector<int64_t> by_leaf = leaf_chunks(leaves, map.layout, cpu_embedding);
  map.params = shape.parameter_shapes();
  map.chunks.reserve(map.params.size());
  // A leaf's parameters follow one another from the start of its place in the chunk.
  std::vector<int64_t> chunk_used(static_cast<size_t>(map.layout.num_chunks), 0);
  int64_t leaf = -1, at = 0;
  for (const auto& p : map.params) {
    const int64_t k = by_leaf[static_cast<size_t>(p.leaf)];
    if (p.leaf != leaf) {
      leaf = p.leaf;
      at = chunk_used[static_cast<size_t>(k)];
    }
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    map.chunks.push_back(k);
    map.offsets.push_back(at);
    at += numel;
    chunk_used[static_cast<size_t>(k)] = at;
  }
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

}  // namespace pstar::plan
