#include "pstar/data/batch_sampler.h"

#include "counter_random.h"
#include "pstar/base/error.h"

namespace pstar::data {

Sampling parse_sampling(const std::string& name) {
  if (name == "random") return Sampling::kRandom;
  if (name == "sequential") return Sampling::kSequential;
  PSTAR_THROW(ConfigError, "data.sampling: unknown value '", name,
              "'; expected \"random\" or \"sequential\"");
}

BatchSampler::BatchSampler(const TokenSource& source, Sampling sampling, int64_t micro_batch,
                           int64_t seq_len, int64_t accumulation_steps, uint64_t seed, int64_t rank,
                           int64_t world_size)
    : source_(source),
      sampling_(sampling),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      accumulation_steps_(accumulation_steps),
      seed_(seed),
      rank_(rank),
      world_size_(world_size) {
  PSTAR_INTERNAL_ASSERT(rank >= 0 && rank < world_size);
  PSTAR_INTERNAL_ASSERT(source.size() >= seq_len + 1, "token source was not validated");
}

std::vector<int64_t> BatchSampler::offsets(int64_t step, int64_t micro) const {
  PSTAR_INTERNAL_ASSERT(step >= 1 && micro >= 1 && micro <= accumulation_steps_);
  std::vector<int64_t> result(micro_batch_);
  const int64_t n = source_.size();
  for (int64_t i = 1; i <= micro_batch_; ++i) {
    const int64_t j = rank_ * micro_batch_ + i;  // the sample's place in the global batch
    switch (sampling_) {
      case Sampling::kSequential: {
        // Note [sequential sampling]
        const int64_t k =
            ((step - 1) * accumulation_steps_ + (micro - 1)) * world_size_ * micro_batch_ + (j - 1);
        const int64_t windows = (n - 1) / seq_len_;
        result[i - 1] = (k % windows) * seq_len_;
        break;
      }
      case Sampling::kRandom: {
        uint64_t h = splitmix64(seed_);
        h = splitmix64(h ^ static_cast<uint64_t>(step));
        h = splitmix64(h ^ static_cast<uint64_t>(micro));
        h = splitmix64(h ^ static_cast<uint64_t>(j));
        result[i - 1] = static_cast<int64_t>(below(h, static_cast<uint64_t>(n - seq_len_)));
        break;
      }
    }
  }
  return result;
}

Batch BatchSampler::batch(int64_t step, int64_t micro) const {
  auto starts = offsets(step, micro);
  auto window = at::empty({micro_batch_, seq_len_ + 1}, at::kLong);
  int64_t* data = window.data_ptr<int64_t>();
  for (int64_t j = 0; j < micro_batch_; ++j)
    source_.read(starts[j], seq_len_ + 1, data + j * (seq_len_ + 1));
  Batch b;
  b.inputs = window.slice(1, 0, seq_len_).contiguous();
  b.targets = window.slice(1, 1).contiguous();
  return b;
}

}  // namespace pstar::data
