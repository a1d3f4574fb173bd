// Everything a run reads, whatever the source: the training micro-batches and the held-out ones,
// over token windows (data.path, data.text) or records (data.jsonl). What the trainer opens at
// start-up; docs/data.md describes the sources.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pstar/data/batches.h"
#include "pstar/data/record_source.h"
#include "pstar/data/token_source.h"

namespace pstar::config {
struct TrainConfig;
}

namespace pstar::data {

class RecordSampler;
class RecordEvalWindows;

struct TrainingData {
  // The sources; exactly one of tokens and records is set. The batches below read them, so they
  // are declared first and outlive them.
  std::unique_ptr<TokenSource> tokens, eval_tokens;
  std::unique_ptr<RecordSource> records, eval_records;
  std::unique_ptr<TrainBatches> train;
  std::unique_ptr<EvalBatches> eval;  // null without held-out data

  // Whether batches carry positions, segments and ignored targets (Note [packed batches]).
  bool has_records() const { return records != nullptr; }
  // One line for the log: the source, its size, the sampling and (records) the packing.
  std::string describe() const;
  std::string describe_eval() const;  // "" without held-out data
  // The targets that count in the global batch of `step` (every micro-batch of every rank): the
  // loss's denominator. Token windows: world × micro × accumulation × seq_len (every target
  // counts). Records: the plan's count (RecordSampler::global_counted_targets), the same on every
  // rank without a collective; 0 when no target of the step counts.
  int64_t global_counted_targets(int64_t step) const;
  // The targets that count over all held-out windows of an evaluation (all ranks); 0 without.
  int64_t eval_counted_targets() const;

  // Set by open_training_data.
  int64_t micro_batch = 0, seq_len = 0, accumulation_steps = 0, world_size = 1;
  std::string sampling;
  bool packing = false;
  const RecordSampler* record_sampler = nullptr;           // = train, with records
  const RecordEvalWindows* record_eval_windows = nullptr;  // = eval, with records
};

// Opens config.data's sources (open_data_sources, open_record_sources), validated, and the batches
// this rank reads: BatchSampler and EvalWindows over tokens, RecordSampler and RecordEvalWindows
// over records, with config's micro-batch size, accumulation steps, seed, data.sampling,
// data.packing and training.eval_batches. With several ranks (`comm`) the caches are made by rank
// 0 first.
TrainingData open_training_data(const config::TrainConfig& config, int64_t vocab_size,
                                int64_t seq_len, int64_t rank = 0, int64_t world_size = 1,
                                dist::Communicator* comm = nullptr);

}  // namespace pstar::data
