// The interface every trainable language model implements. pstar's GPT does; so can a user's own
// torch::nn::Module (examples/custom_model shows how): derive from CausalLM, register parameters
// with register_parameter/register_module as usual, and implement forward().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>

namespace pstar::model {

// What a forward over records needs beyond the ids (Note [packed batches] in
// pstar/data/batches.h), on the model's device.
struct RecordInputs {
  torch::Tensor positions;  // [batch, seq] int64: each token's place in its record
  torch::Tensor segments;   // [batch, seq] int64: which record of the row (padding one more)
  // [n] int64 indices into the batch·seq positions (row-major) whose logits the loss needs: the
  // targets that count. The other positions' logits are never computed.
  torch::Tensor rows;
};

class CausalLM : public torch::nn::Module {
 public:
  // input_ids: [batch, seq] int64 token ids. Returns logits [batch, seq, vocab_size] in any
  // floating dtype; the trainer computes the loss in fp32. The model must compute in the dtype of
  // its parameters (the trainer converts them for bf16/fp16 training).
  virtual torch::Tensor forward(const torch::Tensor& input_ids) = 0;
  // A forward over records (data.jsonl): logits [rows.size(0), vocab_size] for the positions
  // `records.rows` names. Position i attends to j only when j <= i and both are in the same
  // segment, and embeds records.positions rather than its index. Models that say
  // takes_packed_records() implement that; this default serves one record a row (data.packing
  // false: the record starts the row, so its positions are the indices and causal attention never
  // reaches the padding after it) through forward(), and the trainer refuses packing for them.
  virtual torch::Tensor forward_records(const torch::Tensor& input_ids,
                                        const RecordInputs& records);
  // Whether forward_records honours segments and positions for rows holding several records.
  virtual bool takes_packed_records() const { return false; }
  virtual int64_t vocab_size() const = 0;
  // The longest sequence forward() accepts.
  virtual int64_t max_seq_len() const = 0;
  // A loss the model adds to the language-modelling one, from its last forward (a mixture of
  // experts' load-balancing loss): `value` a scalar tensor, undefined for none; `weight` its weight
  // in the training loss, 0 where it is only logged (then `value` carries no graph).
  struct AuxiliaryLoss {
    torch::Tensor value;
    double weight = 0;
  };
  virtual AuxiliaryLoss auxiliary_loss() { return {}; }
  // What the last forward routed, for a mixture of experts: tokens each expert received in each
  // sparse layer, [sparse layers, experts] int64 on the host; undefined for a dense model.
  virtual torch::Tensor expert_tokens() { return {}; }
  // The names (as named_parameters() gives them) of expert `expert`'s parameters in sparse layer
  // `sparse_layer` (the row of expert_tokens()); a model without experts has none to name.
  virtual std::vector<std::string> expert_parameters(int64_t /*sparse_layer*/, int64_t /*expert*/) {
    return {};
  }
  // engine.activation_checkpointing: recompute each block's activations in backward instead of
  // keeping them. Returns whether the model honours it; a model without blocks to recompute
  // keeps the default and the trainer says it is ignored.
  virtual bool set_activation_checkpointing(bool /*on*/) { return false; }
};

inline torch::Tensor CausalLM::forward_records(const torch::Tensor& input_ids,
                                               const RecordInputs& records) {
  const torch::Tensor logits = forward(input_ids);
  return logits.reshape({-1, logits.size(-1)}).index_select(0, records.rows);
}

}  // namespace pstar::model
