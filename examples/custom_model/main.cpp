// Training your own torch::nn::Module with pstar.
//
// The changes from a plain LibTorch model are small:
// - derive the model from pstar::model::CausalLM instead of torch::nn::Module: forward() takes
//   [batch, seq] token ids and returns [batch, seq, vocab] logits, and the model says what
//   vocabulary and sequence length it handles;
// - for the chunk engine (the default), run each module that owns parameters through
//   pstar::model::run_module, and let autograd save the parameters themselves rather than views
//   of them (pstar::model::linear instead of torch::nn::Linear; docs/engine.md explains why).
// Everything else — data, optimizer, precision, accumulation, clipping, memory budgets, metrics,
// checkpoints — comes from the same config file that `pstar train` reads.
//
//   build/cpu-release/examples/pstar-example-custom-model examples/custom_model/config.json
#include <cstdio>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/model/causal_lm.h"
#include "pstar/model/hooks.h"
#include "pstar/model/ops.h"
#include "pstar/train/trainer.h"

namespace {

class Embedding : public torch::nn::Module {
 public:
  Embedding(int64_t vocab, int64_t dim) {
    weight = register_parameter("weight", torch::randn({vocab, dim}) * 0.02);
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    return pstar::model::run_module(*this, [&] { return torch::embedding(weight, ids); });
  }
  torch::Tensor weight;
};

// torch::nn::Linear's parameters and maths, safe for the chunk engine.
class Dense : public torch::nn::Module {
 public:
  Dense(int64_t in, int64_t out) {
    weight = register_parameter("weight", torch::randn({out, in}) / std::sqrt(double(in)));
    bias = register_parameter("bias", torch::zeros({out}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return pstar::model::run_module(*this, [&] { return pstar::model::linear(x, weight, bias); });
  }
  torch::Tensor weight, bias;
};

// A byte-level model that predicts the next byte from the last three: their embeddings,
// concatenated, go through a GELU layer and a head.
class TrigramMlp : public pstar::model::CausalLM {
 public:
  TrigramMlp(int64_t vocab, int64_t dim, int64_t hidden, int64_t seq_len)
      : vocab_(vocab), seq_len_(seq_len) {
    embed_ = register_module("embed", std::make_shared<Embedding>(vocab, dim));
    hidden_ = register_module("hidden", std::make_shared<Dense>(3 * dim, hidden));
    head_ = register_module("head", std::make_shared<Dense>(hidden, vocab));
  }

  torch::Tensor forward(const torch::Tensor& input_ids) override {
    auto e = embed_->forward(input_ids);  // [B, S, D]
    const int64_t seq = e.size(1);
    auto shifted = [&](int64_t by) {  // the embedding `by` positions back, zeros before the start
      return torch::constant_pad_nd(e, {0, 0, by, 0}).slice(1, 0, seq);
    };
    auto context = torch::cat({e, shifted(1), shifted(2)}, -1);
    return head_->forward(torch::gelu(hidden_->forward(context)));
  }
  int64_t vocab_size() const override { return vocab_; }
  int64_t max_seq_len() const override { return seq_len_; }

 private:
  int64_t vocab_, seq_len_;
  std::shared_ptr<Embedding> embed_;
  std::shared_ptr<Dense> hidden_, head_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CONFIG.json [KEY=VALUE ...]\n", argv[0]);
    return 2;
  }
  try {
    std::vector<std::string> overrides(argv + 2, argv + argc);
    auto config = pstar::config::load_train_config(argv[1], overrides);
    torch::manual_seed(config.training.seed);
    auto model = std::make_shared<TrigramMlp>(256, 64, 256, config.model.seq_len.value_or(64));

    pstar::train::TrainOptions options;
    // The config's 32 MiB budget is for the device tier emulated on the CPU; on a GPU build "auto"
    // would put a 32 MiB CUDA arena under it. For a GPU, raise engine.device_memory and use "auto".
    options.device = "cpu";
    pstar::train::Trainer trainer(config, model, options);
    auto summary = trainer.run();
    // A model that did not learn on this repetitive text points at a broken setup.
    return summary.last_loss < 0.8 * summary.first_loss ? 0 : 1;
  } catch (const pstar::Error& e) {
    std::fprintf(stderr, "custom-model: %s: %s\n", pstar::error_kind_name(e.kind()), e.what());
    return pstar::error_exit_code(e.kind());
  }
}
