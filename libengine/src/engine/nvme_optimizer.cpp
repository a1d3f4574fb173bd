#include "nvme_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "pstar/base/error.h"
#include "pstar/core/clock.h"
#include "pstar/core/log.h"

namespace pstar::engine {

NvmeOptimizer::NvmeOptimizer(std::unique_ptr<nvme::NvmeStore> store, int64_t chunk_size,
                             bool has_master, int64_t buffers)
    : chunk_size_(chunk_size),
      has_master_(has_master),
      payload_bytes_(chunk_size * 4 * (has_master ? 3 : 2)),
      store_(std::move(store)) {
  PSTAR_INTERNAL_ASSERT(buffers >= 1 && payload_bytes_ <= store_->slot_bytes(),
                        "an NVMe staging pool of ", buffers, " buffers of ", payload_bytes_,
                        " bytes over slots of ", store_->slot_bytes());
  buffers_.resize(static_cast<size_t>(buffers));
  for (Buffer& b : buffers_) b.memory = nvme::AlignedBuffer(payload_bytes_, store_->alignment());
}

NvmeOptimizer::~NvmeOptimizer() {
  // A write still in flight is waited for by the store's own destructor; here only errors are
  // reported, as a failed write-back at exit loses nothing a checkpoint holds.
  for (Buffer& b : buffers_) {
    if (b.state != State::kReading && b.state != State::kWriting) continue;
    try {
      settle(b);
    } catch (const std::exception& e) {
      log::warn("nvme: ", e.what());
    }
  }
}

void NvmeOptimizer::add_chunk(int64_t k) {
  PSTAR_INTERNAL_ASSERT(!holds(k), "chunk ", k, " is on NVMe already");
  const int64_t slot = num_chunks();
  PSTAR_INTERNAL_ASSERT(slot < store_->num_slots(), "chunk ", k, " needs NVMe slot ", slot, " of ",
                        store_->num_slots());
  slot_of_[k] = slot;
}

int64_t NvmeOptimizer::pool_bytes() const {
  int64_t bytes = 0;
  for (const Buffer& b : buffers_) bytes += b.memory.capacity();
  return bytes;
}

void NvmeOptimizer::announce(int64_t k) {
  const std::lock_guard<std::mutex> lock(order_mutex_);
  announced_.push_back(k);
}

int64_t NvmeOptimizer::find(int64_t k) const {
  for (size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i].chunk == k) return static_cast<int64_t>(i);
  return -1;
}

void NvmeOptimizer::settle(Buffer& b) {
  if (b.state != State::kReading && b.state != State::kWriting) return;
  const nvme::Ticket ticket = b.ticket;
  const int64_t chunk = b.chunk;
  b.ticket = nvme::Ticket();
  b.state = State::kFree;
  b.chunk = -1;
  store_->wait(ticket);
  b.state = State::kClean;
  b.chunk = chunk;
}

void NvmeOptimizer::read_into(Buffer& b, int64_t k) {
  b.chunk = k;
  b.state = State::kReading;
  b.age = next_age_++;
  b.ticket = store_->read(slot_of_.at(k), b.memory.data(), payload_bytes_);
}

int64_t NvmeOptimizer::take_buffer(const std::vector<int64_t>& wanted, bool may_wait) {
  const auto is_wanted = [&](int64_t k) {
    return std::find(wanted.begin(), wanted.end(), k) != wanted.end();
  };
  int64_t best = -1;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].state == State::kFree) return static_cast<int64_t>(i);
    if (buffers_[i].state == State::kClean && !is_wanted(buffers_[i].chunk) &&
        (best < 0 || buffers_[i].age < buffers_[static_cast<size_t>(best)].age))
      best = static_cast<int64_t>(i);
  }
  if (best < 0 && may_wait) {
    for (size_t i = 0; i < buffers_.size(); ++i)
      if (buffers_[i].state == State::kWriting && !is_wanted(buffers_[i].chunk) &&
          (best < 0 || buffers_[i].age < buffers_[static_cast<size_t>(best)].age))
        best = static_cast<int64_t>(i);
    if (best >= 0) settle(buffers_[static_cast<size_t>(best)]);
  }
  if (best >= 0) {
    Buffer& b = buffers_[static_cast<size_t>(best)];
    b.chunk = -1;
    b.state = State::kFree;
  }
  return best;
}

std::vector<int64_t> NvmeOptimizer::wanted() const {
  const size_t limit = buffers_.size() - 1;
  std::vector<int64_t> out;
  const std::lock_guard<std::mutex> lock(order_mutex_);
  for (int64_t k : announced_) {
    if (out.size() >= limit) return out;
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  for (int64_t k : last_round_) {
    if (out.size() >= limit) return out;
    if (in_round_.count(k) == 0 && std::find(out.begin(), out.end(), k) == out.end())
      out.push_back(k);
  }
  return out;
}

void NvmeOptimizer::read_ahead(bool may_wait) {
  const std::vector<int64_t> next = wanted();
  for (int64_t k : next) {
    if (find(k) >= 0) continue;
    const int64_t b = take_buffer(next, may_wait);
    if (b < 0) return;
    read_into(buffers_[static_cast<size_t>(b)], k);
  }
}

void NvmeOptimizer::note_update(int64_t k) {
  const std::lock_guard<std::mutex> lock(order_mutex_);
  const auto it = std::find(announced_.begin(), announced_.end(), k);
  if (it != announced_.end()) announced_.erase(it);
  if (in_round_.count(k) != 0) return;  // a chunk updated twice in a round: not a round's order
  in_round_.insert(k);
  round_.push_back(k);
  if (static_cast<int64_t>(round_.size()) == num_chunks()) {
    last_round_.swap(round_);
    round_.clear();
    in_round_.clear();
  }
}

StagedOptimizer NvmeOptimizer::pointers(const Buffer& b) const {
  float* base = b.memory.as<float>();
  StagedOptimizer s;
  int64_t at = 0;
  if (has_master_) {
    s.master = base;
    at += chunk_size_;
  }
  s.exp_avg = base + at;
  s.exp_avg_sq = base + at + chunk_size_;
  return s;
}

StagedOptimizer NvmeOptimizer::acquire(int64_t k, Use use) {
  const std::lock_guard<std::mutex> lock(io_mutex_);
  PSTAR_INTERNAL_ASSERT(holds(k), "chunk ", k, "'s optimizer payloads are not on NVMe");
  if (use == Use::kAdam) note_update(k);
  int64_t i = find(k);
  if (i < 0) {
    i = take_buffer(wanted(), /*may_wait=*/true);
    PSTAR_INTERNAL_ASSERT(i >= 0, "every NVMe staging buffer is in use");
    Buffer& b = buffers_[static_cast<size_t>(i)];
    if (use == Use::kFresh) {
      std::memset(b.memory.data(), 0, static_cast<size_t>(payload_bytes_));
      b.chunk = k;
    } else {
      read_into(b, k);
    }
  } else {
    PSTAR_INTERNAL_ASSERT(use != Use::kFresh, "chunk ", k, " is new but already staged");
  }
  Buffer& b = buffers_[static_cast<size_t>(i)];
  PSTAR_INTERNAL_ASSERT(b.state != State::kInUse, "chunk ", k, " is staged twice at once");
  const auto begin = std::chrono::steady_clock::now();
  settle(b);
  const double waited = core::seconds_since(begin);
  b.chunk = k;
  b.state = State::kInUse;
  if (use == Use::kAdam) read_ahead(/*may_wait=*/false);
  StagedOptimizer s = pointers(b);
  s.wait_s = waited;
  return s;
}

void NvmeOptimizer::release(int64_t k, bool dirty) {
  const std::lock_guard<std::mutex> lock(io_mutex_);
  const int64_t i = find(k);
  PSTAR_INTERNAL_ASSERT(i >= 0 && buffers_[static_cast<size_t>(i)].state == State::kInUse, "chunk ",
                        k, " is given back but was not taken");
  Buffer& b = buffers_[static_cast<size_t>(i)];
  b.age = next_age_++;
  if (dirty) {
    b.ticket = store_->write(slot_of_.at(k), b.memory.data(), payload_bytes_);
    b.state = State::kWriting;
  } else {
    b.state = State::kClean;
  }
  read_ahead(/*may_wait=*/true);
}

void NvmeOptimizer::flush() {
  const std::lock_guard<std::mutex> lock(io_mutex_);
  for (Buffer& b : buffers_) settle(b);
}

NvmeFigures NvmeOptimizer::take_figures() {
  const nvme::IoStats stats = store_->stats();
  const NvmeFigures since{stats.read_bytes - taken_.read_bytes,
                          stats.write_bytes - taken_.write_bytes, stats.wait_s - taken_.wait_s};
  taken_ = NvmeFigures{stats.read_bytes, stats.write_bytes, stats.wait_s};
  return since;
}

}  // namespace pstar::engine
