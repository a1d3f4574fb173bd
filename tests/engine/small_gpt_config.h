// The small GPT the chunk-engine tests train: chunks of 20000 elements, so that a few MiB of device
// memory already forces moves, and a step takes milliseconds on a CPU.
#pragma once

#include <string>

#include "pstar/formats/config.h"
#include "test_util.h"

namespace pstar::testing {

inline config::TrainConfig small_gpt_config(const std::string& corpus,
                                            const std::string& mode = "chunked") {
  config::TrainConfig c;
  c.model.hidden = 64;
  c.model.layers = 3;
  c.model.heads = 4;
  c.model.vocab_size = 256;
  c.model.seq_len = 32;
  c.data.text = corpus;
  c.train_micro_batch_size_per_gpu = 4;
  c.optimizer.lr = 3e-3;
  c.training.steps = 20;
  c.training.lr_schedule.type = "constant";
  c.default_chunk_size = 20000;
  c.engine.mode = config::engine_mode_from_name(mode);
  return c;
}

// The same over the repetitive corpus, written into `dir` first.
inline config::TrainConfig small_gpt_config_in(const ScratchDir& dir,
                                               const std::string& mode = "chunked") {
  const std::string corpus = dir.file("corpus.txt");
  write_text(corpus, repetitive_corpus());
  return small_gpt_config(corpus, mode);
}

}  // namespace pstar::testing
