// The interface every trainable language model implements. pstar's GPT does; so can a user's own
// torch::nn::Module (examples/custom_model shows how): derive from CausalLM, register parameters
// with register_parameter/register_module as usual, and implement forward().
#pragma once

#include <cstdint>

#include <torch/nn/module.h>

namespace pstar::model {

class CausalLM : public torch::nn::Module {
 public:
  // input_ids: [batch, seq] int64 token ids. Returns logits [batch, seq, vocab_size] in any
  // floating dtype; the trainer computes the loss in fp32. The model must compute in the dtype of
  // its parameters (the trainer converts them for bf16/fp16 training).
  virtual torch::Tensor forward(const torch::Tensor& input_ids) = 0;
  virtual int64_t vocab_size() const = 0;
  // The longest sequence forward() accepts.
  virtual int64_t max_seq_len() const = 0;
  // engine.activation_checkpointing: recompute each block's activations in backward instead of
  // keeping them. Returns whether the model honours it; a model without blocks to recompute
  // keeps the default and the trainer says it is ignored.
  virtual bool set_activation_checkpointing(bool /*on*/) { return false; }
};

}  // namespace pstar::model
