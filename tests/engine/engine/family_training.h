// What the family and mixture-of-experts training tests share: a quiet CPU run of a config through
// the trainer, step by step, and its chunk engine where it has one.
#pragma once

#include <memory>
#include <vector>

#include "engine/cpu_plan.h"
#include "engine/dist/thread_ranks.h"
#include "pstar/dist/communicator.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/train/trainer.h"

namespace pstar::testing {

constexpr double kFamilyTolerance = 1e-5;  // relative, fp32 against float64

inline train::TrainOptions quiet_cpu(dist::Communicator* comm = nullptr) {
  train::TrainOptions o;
  o.device = "cpu";
  o.progress = false;
  o.comm = comm;
  return o;
}

// Every step of `c`; the chunk engine (null for the torch engine) and the trainer, kept alive, when
// asked for.
inline std::vector<train::StepMetrics> run_steps(const config::TrainConfig& c,
                                                 engine::ChunkedEngine** engine = nullptr,
                                                 std::unique_ptr<train::Trainer>* keep = nullptr) {
  auto built = train::build_model_and_engine(cpu_plan(c));
  if (engine) *engine = dynamic_cast<engine::ChunkedEngine*>(built.engine.get());
  auto trainer = std::make_unique<train::Trainer>(c, std::move(built), quiet_cpu());
  std::vector<train::StepMetrics> out;
  while (trainer->steps_done() < c.training.steps) out.push_back(trainer->step());
  if (keep) *keep = std::move(trainer);
  return out;
}

// Every step of `c` on `ranks` thread ranks of 1/ranks of its micro-batch each (the same global
// batch, ZeRO over the chunks): each rank's metrics, by rank.
inline std::vector<std::vector<train::StepMetrics>> run_split_over_ranks(config::TrainConfig c,
                                                                         int ranks) {
  c.train_batch_size = c.train_micro_batch_size_per_gpu;
  c.train_micro_batch_size_per_gpu /= ranks;
  std::vector<std::vector<train::StepMetrics>> out(static_cast<size_t>(ranks));
  run_thread_ranks(ranks, [&](dist::Communicator& comm) {
    train::Trainer trainer(c, train::build_model_and_engine(cpu_plan(c, &comm), &comm),
                           quiet_cpu(&comm));
    auto& mine = out[static_cast<size_t>(comm.rank())];
    while (trainer.steps_done() < c.training.steps) mine.push_back(trainer.step());
    return true;
  });
  return out;
}

}  // namespace pstar::testing
