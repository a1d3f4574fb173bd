// GPT with the GPT-2 architecture, parameter names, shapes and maths of Hugging Face's GPT2Model
// + tied LM head: learned token/position embeddings, pre-LayerNorm blocks (eps 1e-5), causal
// multi-head attention, a 4×hidden GELU(tanh) MLP, a final LayerNorm. Linear weights use HF's
// Conv1D layout [in, out].
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pstar/model/causal_lm.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/model/hooks.h"

namespace pstar::model {

// Called as each unit of the model (wte, wpe, each block, ln_f) is built, with the unit and its
// parameter-name prefix (e.g. "transformer.h.3."). The unit's parameters hold no values yet: the
// callee gives them theirs. The chunk engine takes the unit into chunks here and writes the
// counter-based initial values (Note [counter-based init] in pstar/model/init.h) straight into
// them, or leaves them to a weights load, so start-up never holds a second full copy of the model
// and writes each value once.
using UnitBuilt = std::function<void(torch::nn::Module& unit, const std::string& prefix)>;

// How a built-in model (Gpt, Llama) is built.
struct BuildOptions {
  uint64_t seed = 0;        // of the initial values (training.seed; Note [counter-based init])
  UnitBuilt on_unit_built;  // null: the constructor gives the parameters their values itself
  // Without on_unit_built: false leaves the parameters without values, for a caller that loads
  // weights into every one of them next.
  bool initialise = true;
};

// A Conv1D-layout linear layer: y = x @ weight + bias, weight [in, out].
class Conv1D : public torch::nn::Module {
 public:
  Conv1D(int64_t in_features, int64_t out_features);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
};

// LayerNorm computed in fp32 whatever the activation dtype, for bf16/fp16 stability.
class GptLayerNorm : public torch::nn::Module {
 public:
  GptLayerNorm(int64_t hidden, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
  double eps;
};

class GptEmbedding : public torch::nn::Module, public EmbeddingLeaf {
 public:
  // `padding_idx` >= 0: that row's lookups give no gradient (nn.Embedding's padding_idx).
  GptEmbedding(int64_t count, int64_t dim, int64_t padding_idx = -1);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;
  int64_t padding_idx;
};

class GptAttention : public torch::nn::Module {
 public:
  GptAttention(const GptConfig& config);
  // `allowed`: Note [packed attention]'s mask, or undefined for plain causal attention.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& allowed = {});
  std::shared_ptr<Conv1D> c_attn, c_proj;
  int64_t heads;
};

class GptMlp : public torch::nn::Module {
 public:
  explicit GptMlp(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);
  std::shared_ptr<Conv1D> c_fc, c_proj;
};

class GptBlock : public torch::nn::Module {
 public:
  explicit GptBlock(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& allowed = {});
  std::shared_ptr<GptLayerNorm> ln_1, ln_2;
  std::shared_ptr<GptAttention> attn;
  std::shared_ptr<GptMlp> mlp;
};

// HF's `transformer` submodule.
class GptTransformer : public torch::nn::Module {
 public:
  GptTransformer(const GptConfig& config, const BuildOptions& options);
  std::shared_ptr<GptEmbedding> wte, wpe;
  std::vector<std::shared_ptr<GptBlock>> h;
  std::shared_ptr<GptLayerNorm> ln_f;
};

class Gpt : public CausalLM {
 public:
  // Parameters are initialised as GPT-2 does: normal(0, 0.02), residual projections
  // (attn.c_proj, mlp.c_proj weights) normal(0, 0.02 / sqrt(2·layers)), biases 0, LayerNorm 1/0,
  // with the counter-based generator from options.seed (Note [counter-based init]).
  explicit Gpt(const GptConfig& config, const BuildOptions& options = {});

  torch::Tensor forward(const torch::Tensor& input_ids) override;
  // Packed records: wpe rows by records.positions, attention within segments (Note [packed
  // attention]), logits only for records.rows.
  torch::Tensor forward_records(const torch::Tensor& input_ids,
                                const RecordInputs& records) override;
  bool takes_packed_records() const override { return true; }
  // Recompute each block's activations in backward instead of keeping them.
  bool set_activation_checkpointing(bool on) override {
    checkpointing_ = on;
    return true;
  }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_seq_len() const override { return config_.seq_len; }
  const GptConfig& config() const { return config_; }
  GptTransformer& transformer() { return *transformer_; }

 private:
  // The final hidden states [batch, seq, hidden]; positions [batch, seq] or undefined (0..seq-1).
  torch::Tensor hidden(const torch::Tensor& input_ids, const torch::Tensor& positions);
  torch::Tensor head(const torch::Tensor& x);

  GptConfig config_;
  std::shared_ptr<GptTransformer> transformer_;
  bool checkpointing_ = false;
  // The current forward's attention mask (undefined: causal), which the blocks' recomputation in
  // backward reads again.
  torch::Tensor allowed_;
  // One callable per block for checkpointing: autograd calls them again during backward.
  std::vector<CheckpointBlock> block_fns_;
};

}  // namespace pstar::model
