// The emulated device tier (Note [device tier]): both sides are host memory, so everything the
// engine decides about placement runs, and is tested, on any machine.
#include <cstring>
#include <limits>

#include "pstar/memory/buffer.h"
#include "pstar/memory/cpu_counter.h"
#include "pstar/tier/device_tier.h"

namespace pstar::tier {
namespace {

struct BufferOwner final : Block::Owner {
  explicit BufferOwner(int64_t bytes) : buffer(bytes) {}
  memory::Buffer buffer;
};

class EmulatedTier final : public DeviceTier {
 public:
  std::string describe() const override { return "emulated on the CPU"; }
  c10::Device compute_device() const override { return c10::Device(c10::kCPU); }
  c10::Device device_of(Side) const override { return c10::Device(c10::kCPU); }
  int64_t device_capacity_bytes() const override { return std::numeric_limits<int64_t>::max(); }

  Block allocate(Side side, int64_t bytes) override {
    auto owner = std::make_unique<BufferOwner>(bytes);  // zeroed
    void* data = owner->buffer.data();
    return Block(data, bytes, side, std::move(owner));
  }
  // memory::Buffer always zeroes; issue 23's pool will hand out reused memory as it is.
  Block allocate_uninitialized(Side side, int64_t bytes) override { return allocate(side, bytes); }
  void copy(Block& dst, const Block& src, int64_t bytes) override {
    std::memcpy(dst.data(), src.data(), static_cast<size_t>(bytes));
  }
  // memcpy is done when it returns: nothing is left to wait for.
  void copy_ahead(Block& dst, const Block& src, int64_t bytes) override { copy(dst, src, bytes); }
  void await_copies(const Block&) override {}
  void zero(Block& block, int64_t bytes) override {
    std::memset(block.data(), 0, static_cast<size_t>(bytes));
  }

  // Both sides are the host: the device side's Adam is host Adam, which the CUDA kernel matches
  // bit for bit.
  void adam_step(Side, const optim::AdamHyper& hyper, float grad_multiplier,
                 const optim::AdamSpan& span) override {
    optim::host_adam_step(hyper, grad_multiplier, span);
  }
  double grad_sq_sum(Side, const void* grad, optim::GradType grad_type, int64_t numel) override {
    return optim::grad_sq_sum(grad, grad_type, numel);
  }

  // Chunk payloads are allocated outside LibTorch, so its CPU allocations are the non-model data.
  int64_t non_model_bytes() override { return counter_.current_bytes(); }
  int64_t non_model_peak_bytes() override { return counter_.peak_bytes(); }
  int64_t reset_non_model_peak() override { return counter_.reset_peak(); }

  void synchronize() override {}

 private:
  memory::CpuAllocationCounter& counter_ = memory::CpuAllocationCounter::instance();
};

}  // namespace

std::unique_ptr<DeviceTier> make_emulated_tier() { return std::make_unique<EmulatedTier>(); }

}  // namespace pstar::tier
