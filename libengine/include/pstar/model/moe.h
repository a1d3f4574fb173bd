// A decoder layer's mixture-of-experts block (Mixtral, Qwen3-MoE): Note [moe block] in moe.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/nn/module.h>

#include "pstar/model/decoder_config.h"

namespace pstar::model {

class DecoderLinear;  // decoder.h

// What one forward's blocks routed: the load-balancing loss's figures and the metrics'.
struct RoutingRecord {
  // Per sparse layer, in order: tokens each expert received ([experts] int64, on the host: the
  // block copies them there to split its tokens, so the metrics read them without another copy),
  // and the sum over tokens of the router's probabilities ([experts] fp32; with grad
  // when the loss trains, Note [router aux loss]).
  std::vector<torch::Tensor> tokens, probability_sums;
  int64_t tokens_per_layer = 0;  // T: the tokens every sparse layer routes
  bool with_grad = false;        // probability_sums keep their graph
  void clear() { *this = RoutingRecord{with_grad}; }
  explicit RoutingRecord(bool grad = false) : with_grad(grad) {}
};

// One expert: a gated MLP of width expert_intermediate, its projections named as its family names
// them (w1/w3/w2 or gate_proj/up_proj/down_proj).
class DecoderExpert : public torch::nn::Module {
 public:
  explicit DecoderExpert(const DecoderConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // [n, hidden], n possibly 0
  std::shared_ptr<DecoderLinear> gate, up, down;
  MlpActivation activation;
};

class DecoderMoe : public torch::nn::Module {
 public:
  // `record` (the decoder's, outliving the block) receives each forward's routing.
  DecoderMoe(const DecoderConfig& config, RoutingRecord* record);
  torch::Tensor forward(const torch::Tensor& x);  // [batch, seq, hidden]
  std::shared_ptr<DecoderLinear> gate;            // the router: hidden -> experts logits
  std::vector<std::shared_ptr<DecoderExpert>> experts;

 private:
  MoeConfig moe_;
  RoutingRecord* record_;
};

}  // namespace pstar::model
