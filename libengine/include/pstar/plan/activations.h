// The non-model memory of one micro-batch of a decoder (Note [decoder activation model]):
// what autograd keeps per layer, and the transient peaks of the LM head's loss and of one layer's
// backward, in the same shape as the GPT's (memory_plan.h, Note [activation model]).
#pragma once

#include <cstdint>

#include "pstar/plan/memory_plan.h"

namespace pstar::config {
struct TrainConfig;
}
namespace pstar::model {
struct DecoderConfig;
struct ModelShape;
}  // namespace pstar::model

namespace pstar::plan {

struct DecoderActivationInput {
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  int64_t vocab = 0, seq = 0, micro_batch = 0;
  int64_t elem_bytes = 2;
  int64_t norms_per_block = 2;  // 4 with sandwich norms (Gemma 3)
  bool qk_norm = false;         // q_norm and k_norm over each head (Qwen3, Gemma 3)
  bool checkpointing = false;
};
DecoderActivationInput decoder_activation_input(const model::DecoderConfig& shape,
                                                int64_t micro_batch, int64_t elem_bytes,
                                                bool checkpointing);
ActivationEstimate estimate_decoder_activations(const DecoderActivationInput& in);

// The model's activation estimate under a config whose precision is decided: the GPT's or the
// decoder's, for the config's micro-batch, precision and checkpointing.
ActivationEstimate estimate_model_activations(const model::ModelShape& shape,
                                              const config::TrainConfig& config);
// The same for `micro_batch` sequences of the shape's seq_len, `elem_bytes` per compute element.
ActivationEstimate estimate_model_activations(const model::ModelShape& shape, int64_t micro_batch,
                                              int64_t elem_bytes, bool checkpointing);

}  // namespace pstar::plan
