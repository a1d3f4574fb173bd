#include "pstar/plan/activations.h"

#include <algorithm>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/model/decoder_config.h"
#include "pstar/model/model_shape.h"

namespace pstar::plan {

DecoderActivationInput decoder_activation_input(const model::DecoderConfig& shape,
                                                int64_t micro_batch, int64_t elem_bytes,
                                                bool checkpointing) {
  DecoderActivationInput in;
  in.hidden = shape.hidden;
  in.layers = shape.layers;
  in.heads = shape.heads;
  in.kv_heads = shape.kv_heads;
  in.head_dim = shape.head_dim;
  in.intermediate = shape.intermediate;
  in.vocab = shape.vocab_size;
  in.seq = shape.seq_len;  // the trainer samples full-length windows
  in.micro_batch = micro_batch;
  in.elem_bytes = elem_bytes;
  in.norms_per_block = shape.norms_per_block();
  in.qk_norm = shape.norms.qk;
  in.checkpointing = checkpointing;
  return in;
}

// Note [decoder activation model]
// What autograd keeps for one layer of model/decoder.cpp, with T = B·S tokens, q = heads·head_dim,
// I = intermediate, A = heads·B·S² scores and e bytes per compute element (docs/estimate.md):
// - two RMSNorms (four with sandwich norms), as LibTorch 1.13's autograd saves them (counted with
//   saved-tensor hooks for the Llama form): two fp32 tensors of width h (the input cast up and its
//   square's operand chain), the normalised output cast back (e) and the weighted output the next
//   projections read (e), and the fp32 inverse RMS: (8 + 2e)·T·h + 4·T each. In fp32 the casts are
//   no-ops, but the input, the product and the weighted output are still four distinct fp32
//   tensors. Gemma's (1 + w) form keeps the same count in a different order;
// - q/k norms, where the family has them: the same over the queries' and keys' widths, with one
//   inverse RMS per head: (8 + 2e)·T·(q + kv) + 4·T·(heads + kv_heads);
// - attention: the rotated queries, and keys and values at query width (grouped-query attention
//   repeats them before the products; without grouping they are that wide already): 3·e·T·q; the
//   heads' output before o_proj: e·T·q; the fp32 softmax output and its compute-dtype copy
//   (4 + e)·A (4·A in fp32), and the causal mask S². The rotary multiplications keep only the
//   cos/sin tables: their other operand needs no gradient;
// - SwiGLU: gate and up projections, SiLU's output and the product: 4·e·T·I.
// Checkpointing keeps each layer's input (e·T·h) and recomputes one layer in backward.
ActivationEstimate estimate_decoder_activations(const DecoderActivationInput& in) {
  const int64_t e = in.elem_bytes;
  const bool fp32 = e >= 4;
  const int64_t tokens = in.micro_batch * in.seq;
  const int64_t th = tokens * in.hidden;
  const int64_t tq = tokens * in.heads * in.head_dim;
  const int64_t ti = tokens * in.intermediate;
  const int64_t scores = in.heads * in.micro_batch * in.seq * in.seq;
  const int64_t tv = tokens * in.vocab;

  ActivationEstimate a;
  const int64_t norm = (8 + 2 * e) * th + 4 * tokens;
  const int64_t kv_width = in.kv_heads * in.head_dim;
  const int64_t qk_norms =
      in.qk_norm ? (8 + 2 * e) * (tq + tokens * kv_width) + 4 * tokens * (in.heads + in.kv_heads)
                 : 0;
  const int64_t norms = in.norms_per_block * norm + qk_norms;
  a.block_saved = norms + 4 * e * tq + 4 * e * ti + (4 + (fp32 ? 0 : e)) * scores + in.seq * in.seq;
  a.stored_without_checkpointing = in.layers * a.block_saved;
  a.stored_with_checkpointing = in.layers * e * th;
  a.stored = in.checkpointing ? a.stored_with_checkpointing : a.stored_without_checkpointing;
  // The final RMSNorm, the logits, their fp32 log-softmax and two fp32 gradients.
  a.head_peak = norm + (e + 12) * tv;
  const int64_t attention_grads = (fp32 ? 8 : e + 4) * scores;
  // The SwiGLU's four gradients of width I, three of width h, and one weight gradient I·h.
  const int64_t mlp_grads = 4 * e * ti + 3 * e * th + in.intermediate * in.hidden * e;
  a.block_backward =
      (in.checkpointing ? a.block_saved : 0) + std::max(attention_grads, mlp_grads) + e * tv;
  a.peak = a.stored + std::max(a.head_peak, a.block_backward);
  return a;
}

ActivationEstimate estimate_model_activations(const model::ModelShape& shape,
                                              const config::TrainConfig& config) {
  return estimate_model_activations(shape, config.train_micro_batch_size_per_gpu,
                                    compute_elem_bytes(config),
                                    config.engine.activation_checkpointing);
}

ActivationEstimate estimate_model_activations(const model::ModelShape& shape, int64_t micro_batch,
                                              int64_t elem_bytes, bool checkpointing) {
  switch (shape.family) {
    case model::ModelFamily::kGpt: {
      GptActivationInput in;
      in.hidden = shape.gpt.hidden;
      in.layers = shape.gpt.layers;
      in.heads = shape.gpt.heads;
      in.vocab = shape.gpt.vocab_size;
      in.seq = shape.gpt.seq_len;  // the trainer samples full-length windows
      in.micro_batch = micro_batch;
      in.elem_bytes = elem_bytes;
      in.checkpointing = checkpointing;
      return estimate_gpt_activations(in);
    }
    case model::ModelFamily::kDecoder:
      return estimate_decoder_activations(
          decoder_activation_input(shape.decoder, micro_batch, elem_bytes, checkpointing));
  }
  PSTAR_INTERNAL_ASSERT(false, "unknown model family");
  return {};
}

}  // namespace pstar::plan
