// The decoder every family of family.h is (Llama 2/3, Mistral, Qwen2, Qwen3, Gemma 3, Phi-3/Phi-4),
// with Hugging Face's parameter names, shapes and maths, switched by DecoderConfig's fields alone:
// token embedding (scaled by sqrt(hidden) where the config says); per layer RMSNorm → attention
// (q/k RMSNorm over each head where the config says, rotary position embeddings of the layer's
// kind, grouped-query attention, causal or within a sliding window) → [RMSNorm] → residual →
// RMSNorm → gated MLP (SiLU or tanh-GELU) → [RMSNorm] → residual; a final RMSNorm; an LM head,
// untied or tied to the embedding. Linear weights use torch.nn.Linear's layout [out, in].
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pstar/model/causal_lm.h"
#include "pstar/model/decoder_config.h"
#include "pstar/model/gpt.h"  // UnitBuilt, BuildOptions, GptEmbedding (the token embedding)
#include "pstar/model/moe.h"

namespace pstar::model {

struct LayerKv;  // kv_cache.h
class KvCache;

// y = x @ weightᵀ + bias with weight [out, in]; the bias is optional.
class DecoderLinear : public torch::nn::Module {
 public:
  DecoderLinear(int64_t in_features, int64_t out_features, bool bias);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
};

// RMSNorm as Hugging Face computes it, normalised in fp32: kWeight casts back to the input's dtype
// and then scales by the weight (LlamaRMSNorm); kOnePlusWeight scales by (1 + weight) in fp32 and
// then casts (Gemma3RMSNorm).
class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(int64_t hidden, double eps, NormKind kind);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
  NormKind kind;
};

// cos and sin of the rotary embedding for positions [0, seq), [seq, head_dim], in fp32.
struct RotaryTables {
  torch::Tensor cos, sin;
};
// The inverse frequencies of `rope` over `head_dim` channels, [head_dim / 2] fp32, its scaling
// applied.
torch::Tensor rope_inverse_frequencies(const RopeConfig& rope, int64_t head_dim);
RotaryTables rotary_tables(const RopeConfig& rope, int64_t head_dim, int64_t seq);

class DecoderAttention : public torch::nn::Module {
 public:
  explicit DecoderAttention(const DecoderConfig& config);
  // `rope`: cos and sin for the sequence ([seq, head_dim], or [batch, 1, seq, head_dim] for
  // records' own positions), already on x's device and in x's dtype. `allowed`: the positions each
  // query may see ([batch or 1, 1, seq, seq] bool: a sliding window, Note [packed attention]'s
  // mask, or both), or undefined for plain causal attention.
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope,
                        const torch::Tensor& allowed = {});
  std::shared_ptr<DecoderLinear> q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<RmsNorm> q_norm, k_norm;  // null without config.norms.qk
  int64_t heads, kv_heads, head_dim;
  double scale;  // of q·kᵀ
  // Set only during Decoder::forward_cached: this layer's keys and values so far, which the
  // block's queries attend to after adding their own (Note [kv cache] in kv_cache.h).
  LayerKv* kv_cache = nullptr;
};

class DecoderMlp : public torch::nn::Module {
 public:
  explicit DecoderMlp(const DecoderConfig& config);
  torch::Tensor forward(const torch::Tensor& x);
  std::shared_ptr<DecoderLinear> gate_proj, up_proj, down_proj;
  MlpActivation activation;
};

class DecoderLayer : public torch::nn::Module {
 public:
  // A sparse layer (config.sparse_layer) holds a mixture of experts, which writes its routing into
  // `routing`, in place of the dense MLP.
  DecoderLayer(const DecoderConfig& config, LayerKind kind, bool sparse, RoutingRecord* routing);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope,
                        const torch::Tensor& allowed = {});
  // post_attention_layernorm is the pre-MLP norm of a two-norm block, and the post-attention norm
  // of a sandwich block (Hugging Face's names, which differ in meaning between the families).
  std::shared_ptr<RmsNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<RmsNorm> pre_feedforward_layernorm, post_feedforward_layernorm;  // sandwich only
  std::shared_ptr<DecoderAttention> self_attn;
  std::shared_ptr<DecoderMlp> mlp;  // null in a sparse layer
  std::shared_ptr<DecoderMoe> moe;  // null in a dense layer
  LayerKind kind;

 private:
  torch::Tensor feed_forward(const torch::Tensor& x);
};

// Hugging Face's `model` submodule.
class DecoderModel : public torch::nn::Module {
 public:
  DecoderModel(const DecoderConfig& config, const BuildOptions& options, RoutingRecord* routing);
  std::shared_ptr<GptEmbedding> embed_tokens;
  std::vector<std::shared_ptr<DecoderLayer>> layers;
  std::shared_ptr<RmsNorm> norm;
};

class Decoder : public CausalLM {
 public:
  // Parameters are initialised as Hugging Face does: normal(0, 0.02) for linear weights and the
  // embedding, biases 0, RMSNorm weights 1 (0 for (1 + w) norms), with the counter-based generator
  // from options.seed (Note [counter-based init]). Units (embed_tokens, each layer, norm, lm_head)
  // are handed to options.on_unit_built as they are built, so the chunk engine can take each
  // before the next exists.
  explicit Decoder(const DecoderConfig& config, const BuildOptions& options = {});

  torch::Tensor forward(const torch::Tensor& input_ids) override;
  // Packed records: rotary angles by records.positions, attention within segments (Note [packed
  // attention]), logits only for records.rows.
  torch::Tensor forward_records(const torch::Tensor& input_ids,
                                const RecordInputs& records) override;
  bool takes_packed_records() const override { return true; }
  // Generation (Note [kv cache] in kv_cache.h; defined in kv_cache.cpp): the next block of slots
  // of every row, [batch, block] ids, after those `cache` holds, which it then holds too. Returns
  // the logits of the block's last slot, [batch, vocab_size]. Without autograd.
  torch::Tensor forward_cached(const torch::Tensor& input_ids, KvCache& cache);
  // ConfigError for a mixture of experts whose load-balancing loss trains (Note [router aux loss]).
  bool set_activation_checkpointing(bool on) override;
  AuxiliaryLoss auxiliary_loss() override;
  torch::Tensor expert_tokens() override;
  std::vector<std::string> expert_parameters(int64_t sparse_layer, int64_t expert) override;
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_seq_len() const override { return config_.seq_len; }
  const DecoderConfig& config() const { return config_; }
  DecoderModel& model() { return *model_; }

 private:
  // The final hidden states [batch, seq, hidden] (after the last norm); positions [batch, seq] or
  // undefined (0..seq-1); segments [batch, seq] or undefined (one sequence a row).
  torch::Tensor hidden(const torch::Tensor& input_ids, const torch::Tensor& positions,
                       const torch::Tensor& segments);
  // The token embeddings [batch, seq, hidden], scaled where the config says.
  torch::Tensor embed(const torch::Tensor& input_ids);
  torch::Tensor head(const torch::Tensor& x);

  DecoderConfig config_;
  RoutingRecord routing_;  // the last forward's, for a mixture of experts
  std::shared_ptr<DecoderModel> model_;
  std::shared_ptr<DecoderLinear> lm_head_;  // null when tied
  // Per layer kind: the tables for config_.seq_len positions on the host, and those of the current
  // forward's sequence on its device and dtype, with the current forward's attention mask
  // (undefined: causal). The layers' checkpointed recomputation in backward reads them again.
  std::array<RotaryTables, kLayerKinds> rope_fp32_;
  std::array<RotaryTables, kLayerKinds> rope_;
  std::array<torch::Tensor, kLayerKinds> allowed_;
  bool checkpointing_ = false;
  // One callable per layer for checkpointing (autograd calls them again during backward): the
  // layer's output, and a sparse layer's router probability sums when the aux loss trains.
  std::vector<CheckpointBlock> layer_fns_;
};

}  // namespace pstar::model
