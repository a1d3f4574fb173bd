// Picks each micro-batch's windows of S + 1 tokens: input = the first S, targets = the next S
// shifted by one. The choice is a pure function of (step, micro-batch), so any step can be
// reproduced without replaying earlier ones (this is what makes resume exact).
//
// Note [sequential sampling]: with R ranks each taking B samples per micro-batch, sample j of
// micro-batch m of step s (1-based) on rank r (0-based) is global sample g = r·B + j, window
// k = ((s-1)·A + (m-1))·R·B + (g-1), starting at token k·S while that window fits. Past the end
// the windows wrap: with W = floor((N-1)/S) whole windows in an N-token source, window k starts at
// (k mod W)·S. Random sampling draws each start uniformly from [0, N-S-1] with a counter-based
// hash of (seed, step, micro-batch, g). Either way R ranks of B samples read exactly the windows
// one rank of R·B would, so the world size does not change what a step trains on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "pstar/data/batches.h"
#include "pstar/data/token_source.h"

namespace pstar::data {

enum class Sampling { kRandom, kSequential };

// "random" / "sequential"; ConfigError naming data.sampling otherwise.
Sampling parse_sampling(const std::string& name);

// Token windows: positions and segments undefined, every target counts (Note [packed batches]).
class BatchSampler : public TrainBatches {
 public:
  BatchSampler(const TokenSource& source, Sampling sampling, int64_t micro_batch, int64_t seq_len,
               int64_t accumulation_steps, uint64_t seed, int64_t rank = 0, int64_t world_size = 1);

  // Start offsets of the micro-batch's samples; step and micro are 1-based.
  std::vector<int64_t> offsets(int64_t step, int64_t micro) const;
  Batch batch(int64_t step, int64_t micro) const override;

 private:
  const TokenSource& source_;
  Sampling sampling_;
  int64_t micro_batch_, seq_len_, accumulation_steps_;
  uint64_t seed_;
  int64_t rank_, world_size_;
};

}  // namespace pstar::data
