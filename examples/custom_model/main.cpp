// Training your own torch::nn::Module with pstar.
//
// The change from a plain LibTorch model is small: derive from pstar::model::CausalLM instead of
// torch::nn::Module, make forward() take [batch, seq] token ids and return [batch, seq, vocab]
// logits, and say what vocabulary and sequence length the model handles. Everything else — data,
// optimizer, precision, accumulation, clipping, metrics — comes from the same config file that
// `pstar train` reads.
//
//   build/cpu-release/examples/pstar-example-custom-model examples/custom_model/config.json
#include <cstdio>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/model/causal_lm.h"
#include "pstar/train/trainer.h"

namespace {

// A byte-level GRU language model: embedding -> GRU -> linear head.
class CharGru : public pstar::model::CausalLM {
 public:
  CharGru(int64_t vocab, int64_t hidden, int64_t seq_len) : vocab_(vocab), seq_len_(seq_len) {
    embed_ = register_module("embed", torch::nn::Embedding(vocab, hidden));
    gru_ = register_module("gru",
                           torch::nn::GRU(torch::nn::GRUOptions(hidden, hidden).batch_first(true)));
    head_ = register_module("head", torch::nn::Linear(hidden, vocab));
  }

  torch::Tensor forward(const torch::Tensor& input_ids) override {
    auto states = std::get<0>(gru_->forward(embed_->forward(input_ids)));
    return head_->forward(states);
  }
  int64_t vocab_size() const override { return vocab_; }
  int64_t max_seq_len() const override { return seq_len_; }

 private:
  int64_t vocab_, seq_len_;
  torch::nn::Embedding embed_{nullptr};
  torch::nn::GRU gru_{nullptr};
  torch::nn::Linear head_{nullptr};
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
    auto model = std::make_shared<CharGru>(256, 128, config.model.seq_len.value_or(64));

    pstar::train::TrainOptions options;
    options.device = "auto";
    pstar::train::Trainer trainer(config, model, options);
    auto summary = trainer.run();
    // A model that did not learn on this repetitive text points at a broken setup.
    return summary.last_loss < 0.8 * summary.first_loss ? 0 : 1;
  } catch (const pstar::Error& e) {
    std::fprintf(stderr, "custom-model: %s: %s\n", pstar::error_kind_name(e.kind()), e.what());
    return pstar::error_exit_code(e.kind());
  }
}
