// open_training_data: token windows or records, whichever the config names (training_data.h).
#include "pstar/data/training_data.h"

#include "pstar/base/error.h"
#include "pstar/base/format.h"
#include "pstar/data/batch_sampler.h"
#include "pstar/data/eval_windows.h"
#include "pstar/data/record_sampler.h"
#include "pstar/formats/config.h"

namespace pstar::data {

std::string TrainingData::describe() const {
  if (has_records()) {
    return str_cat(records->describe(), " (", format_count(static_cast<double>(records->records())),
                   " records, ", format_count(static_cast<double>(records->tokens())), " tokens, ",
                   sampling, " sampling, ",
                   packing ? "packed into windows" : "one record a window, padded", ")");
  }
  return str_cat(tokens->describe(), " (", format_count(static_cast<double>(tokens->size())),
                 " tokens, ", sampling, " sampling)");
}

std::string TrainingData::describe_eval() const {
  if (eval == nullptr) return "";
  if (has_records()) {
    return str_cat(eval_records->describe(), " (",
                   format_count(static_cast<double>(eval_records->records())), " records), ",
                   eval->windows(), " windows of ", seq_len, " positions, ", eval_counted_targets(),
                   " targets counted");
  }
  return str_cat(eval_tokens->describe(), " (",
                 format_count(static_cast<double>(eval_tokens->size())), " tokens), ",
                 eval->windows(), " windows of ", seq_len, " tokens");
}

int64_t TrainingData::global_counted_targets(int64_t step) const {
  if (record_sampler != nullptr) return record_sampler->global_counted_targets(step);
  return world_size * micro_batch * accumulation_steps * seq_len;
}

int64_t TrainingData::eval_counted_targets() const {
  if (eval == nullptr) return 0;
  if (record_eval_windows != nullptr) return record_eval_windows->counted_targets();
  return eval->windows() * seq_len;
}

TrainingData open_training_data(const config::TrainConfig& config, int64_t vocab_size,
                                int64_t seq_len, int64_t rank, int64_t world_size,
                                dist::Communicator* comm) {
  TrainingData d;
  d.micro_batch = config.train_micro_batch_size_per_gpu;
  d.accumulation_steps = config.gradient_accumulation_steps;
  d.seq_len = seq_len;
  d.world_size = world_size;
  d.sampling = config.data.sampling;
  const Sampling sampling = parse_sampling(config.data.sampling);
  const int64_t eval_batches = config.training.eval_batches;
  if (!config.data.jsonl.empty()) {
    d.packing = config.data.packing;
    RecordSources sources = open_record_sources(config.data, vocab_size, seq_len, comm);
    d.records = std::move(sources.train);
    d.eval_records = std::move(sources.eval);
    auto sampler = std::make_unique<RecordSampler>(*d.records, sampling, d.packing, d.micro_batch,
                                                   seq_len, d.accumulation_steps,
                                                   config.training.seed, rank, world_size);
    d.record_sampler = sampler.get();
    d.train = std::move(sampler);
    if (d.eval_records != nullptr) {
      auto eval = std::make_unique<RecordEvalWindows>(
          *d.eval_records, d.packing, seq_len, d.micro_batch, eval_batches, rank, world_size);
      d.record_eval_windows = eval.get();
      d.eval = std::move(eval);
    }
    return d;
  }
  DataSources sources = open_data_sources(config.data, vocab_size, seq_len, comm);
  d.tokens = std::move(sources.train);
  d.eval_tokens = std::move(sources.eval);
  d.train =
      std::make_unique<BatchSampler>(*d.tokens, sampling, d.micro_batch, seq_len,
                                     d.accumulation_steps, config.training.seed, rank, world_size);
  if (d.eval_tokens != nullptr) {
    d.eval = std::make_unique<EvalWindows>(*d.eval_tokens, seq_len, d.micro_batch, eval_batches,
                                           rank, world_size);
  }
  return d;
}

}  // namespace pstar::data
