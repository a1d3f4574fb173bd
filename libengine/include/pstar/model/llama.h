// A decoder of the Llama family (Llama 2/3, Mistral, Qwen2) with Hugging Face's parameter names,
// shapes and maths (LlamaForCausalLM): token embedding; per layer RMSNorm → attention with rotary
// position embeddings (rotate-half, optional llama3 scaling) and grouped-query attention → residual
// → RMSNorm → SwiGLU MLP → residual; a final RMSNorm; an LM head, untied or tied to the embedding.
// Linear weights use torch.nn.Linear's layout [out, in].
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pstar/model/causal_lm.h"
#include "pstar/model/gpt.h"  // UnitBuilt, GptEmbedding (the token embedding both families use)
#include "pstar/model/llama_shape.h"

namespace pstar::model {

// y = x @ weightᵀ + bias with weight [out, in]; the bias is optional.
class LlamaLinear : public torch::nn::Module {
 public:
  LlamaLinear(int64_t in_features, int64_t out_features, bool bias);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
};

// RMSNorm as Hugging Face computes it: normalised in fp32, cast back to the input's dtype, then
// scaled by the weight.
class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(int64_t hidden, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};

// cos and sin of the rotary embedding for positions [0, seq), [seq, head_dim], in fp32.
struct RotaryTables {
  torch::Tensor cos, sin;
};
// The inverse frequencies of the rotary embedding, [head_dim / 2] fp32, llama3 scaling applied.
torch::Tensor rope_inverse_frequencies(const LlamaConfig& config);
RotaryTables rotary_tables(const LlamaConfig& config, int64_t seq);

class LlamaAttention : public torch::nn::Module {
 public:
  explicit LlamaAttention(const LlamaConfig& config);
  // `rope`: cos and sin for the sequence ([seq, head_dim], or [batch, 1, seq, head_dim] for
  // records' own positions), already on x's device and in x's dtype. `allowed`: Note [packed
  // attention]'s mask, or undefined for plain causal attention.
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope,
                        const torch::Tensor& allowed = {});
  std::shared_ptr<LlamaLinear> q_proj, k_proj, v_proj, o_proj;
  int64_t heads, kv_heads, head_dim;
};

class LlamaMlp : public torch::nn::Module {
 public:
  explicit LlamaMlp(const LlamaConfig& config);
  torch::Tensor forward(const torch::Tensor& x);
  std::shared_ptr<LlamaLinear> gate_proj, up_proj, down_proj;
};

class LlamaDecoderLayer : public torch::nn::Module {
 public:
  explicit LlamaDecoderLayer(const LlamaConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope,
                        const torch::Tensor& allowed = {});
  std::shared_ptr<RmsNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMlp> mlp;
};

// Hugging Face's `model` submodule.
class LlamaModel : public torch::nn::Module {
 public:
  LlamaModel(const LlamaConfig& config, const BuildOptions& options);
  std::shared_ptr<GptEmbedding> embed_tokens;
  std::vector<std::shared_ptr<LlamaDecoderLayer>> layers;
  std::shared_ptr<RmsNorm> norm;
};

class Llama : public CausalLM {
 public:
  // Parameters are initialised as Hugging Face does: normal(0, 0.02) for linear weights and the
  // embedding, biases 0, RMSNorm weights 1, with the counter-based generator from options.seed
  // (Note [counter-based init]). Units (embed_tokens, each layer, norm, lm_head) are handed to
  // options.on_unit_built as they are built, so the chunk engine can take each before the next
  // exists.
  explicit Llama(const LlamaConfig& config, const BuildOptions& options = {});

  torch::Tensor forward(const torch::Tensor& input_ids) override;
  // Packed records: rotary angles by records.positions, attention within segments (Note [packed
  // attention]), logits only for records.rows.
  torch::Tensor forward_records(const torch::Tensor& input_ids,
                                const RecordInputs& records) override;
  bool takes_packed_records() const override { return true; }
  bool set_activation_checkpointing(bool on) override {
    checkpointing_ = on;
    return true;
  }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_seq_len() const override { return config_.seq_len; }
  const LlamaConfig& config() const { return config_; }
  LlamaModel& model() { return *model_; }

 private:
  // The final hidden states [batch, seq, hidden] (after the last norm); positions [batch, seq] or
  // undefined (0..seq-1).
  torch::Tensor hidden(const torch::Tensor& input_ids, const torch::Tensor& positions);
  torch::Tensor head(const torch::Tensor& x);

  LlamaConfig config_;
  std::shared_ptr<LlamaModel> model_;
  std::shared_ptr<LlamaLinear> lm_head_;  // null when tied
  RotaryTables rope_fp32_;                // for config_.seq_len positions, on the host
  // The tables for the current forward's sequence, device and dtype: the layers' checkpointed
  // recomputation in backward reads them again.
  RotaryTables rope_;
  torch::Tensor allowed_;  // the current forward's attention mask (undefined: causal), likewise
  bool checkpointing_ = false;
  std::vector<std::function<torch::Tensor(const torch::Tensor&)>> layer_fns_;
};

}  // namespace pstar::model
