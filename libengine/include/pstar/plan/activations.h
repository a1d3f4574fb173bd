// The non-model memory of one micro-batch of a Llama-family model (Note [llama activation model]):
// what autograd keeps per layer, and the transient peaks of the LM head's loss and of one layer's
// backward, in the same shape as the GPT's (memory_plan.h, Note [activation model]).
#pragma once

#include <cstdint>

#include "pstar/plan/memory_plan.h"

namespace pstar::config {
struct TrainConfig;
}
namespace pstar::model {
struct LlamaConfig;
struct ModelShape;
}  // namespace pstar::model

namespace pstar::plan {

struct LlamaActivationInput {
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  int64_t vocab = 0, seq = 0, micro_batch = 0;
  int64_t elem_bytes = 2;
  bool checkpointing = false;
};
LlamaActivationInput llama_activation_input(const model::LlamaConfig& shape, int64_t micro_batch,
                                            int64_t elem_bytes, bool checkpointing);
ActivationEstimate estimate_llama_activations(const LlamaActivationInput& in);

// The model's activation estimate under a config whose precision is decided: the GPT's or the
// Llama family's, for the config's micro-batch, precision and checkpointing.
ActivationEstimate estimate_model_activations(const model::ModelShape& shape,
                                              const config::TrainConfig& config);
// The same for `micro_batch` sequences of the shape's seq_len, `elem_bytes` per compute element.
ActivationEstimate estimate_model_activations(const model::ModelShape& shape, int64_t micro_batch,
                                              int64_t elem_bytes, bool checkpointing);

}  // namespace pstar::plan
