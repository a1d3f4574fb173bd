#include "pstar/data/eval_windows.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "pstar/base/error.h"

namespace pstar::data {

EvalWindows::EvalWindows(const TokenSource& source, int64_t seq_len, int64_t micro_batch,
                         int64_t batches, int64_t rank, int64_t world_size)
    : source_(source),
      seq_len_(seq_len),
      micro_batch_(micro_batch),
      rank_(rank),
      world_size_(world_size) {
  PSTAR_INTERNAL_ASSERT(rank >= 0 && rank < world_size && micro_batch >= 1 && batches >= 1);
  PSTAR_INTERNAL_ASSERT(source.size() >= seq_len + 1, "held-out source was not validated");
  whole_ = (source.size() - 1) / seq_len;
  count_ = std::min(whole_, batches * micro_batch);
  const int64_t most_per_rank = (count_ + world_size - 1) / world_size;
  batches_ = std::max<int64_t>(1, (most_per_rank + micro_batch - 1) / micro_batch);
}

std::vector<int64_t> EvalWindows::offsets(int64_t b) const {
  PSTAR_INTERNAL_ASSERT(b >= 0 && b < batches_);
  std::vector<int64_t> out;
  for (int64_t j = b * micro_batch_; j < (b + 1) * micro_batch_; ++j) {
    const int64_t i = rank_ + j * world_size_;  // Note [evaluation windows]
    if (i >= count_) break;
    const auto k = static_cast<int64_t>(static_cast<__int128>(i) * whole_ / count_);
    out.push_back(k * seq_len_);
  }
  return out;
}

Batch EvalWindows::batch(int64_t b) const { return read(offsets(b)); }

Batch EvalWindows::filler() const { return read({0}); }

Batch EvalWindows::read(const std::vector<int64_t>& starts) const {
  const auto rows = static_cast<int64_t>(starts.size());
  auto window = at::empty({rows, seq_len_ + 1}, at::kLong);
  int64_t* data = window.data_ptr<int64_t>();
  for (int64_t j = 0; j < rows; ++j)
    source_.read(starts[static_cast<size_t>(j)], seq_len_ + 1, data + j * (seq_len_ + 1));
  Batch b;
  b.inputs = window.slice(1, 0, seq_len_).contiguous();
  b.targets = window.slice(1, 1).contiguous();
  return b;
}

}  // namespace pstar::data
