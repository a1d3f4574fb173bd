// The emulated device tier (Note [device tier]): both sides are host memory, so everything the
// engine decides about placement runs, and is tested, on any machine.
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "pstar/core/parallel_fill.h"
#include "pstar/memory/cpu_counter.h"
#include "pstar/memory/host_pool.h"
#include "pstar/tier/device_tier.h"

namespace pstar::tier {
namespace {

struct PoolOwner final : Block::Owner {
  explicit PoolOwner(memory::HostBlock b) : block(std::move(b)) {}
  memory::HostBlock block;
};

class EmulatedTier final : public DeviceTier {
 public:
  std::string describe() const override { return "emulated on the CPU"; }
  c10::Device compute_device() const override { return c10::Device(c10::kCPU); }
  c10::Device device_of(Side) const override { return c10::Device(c10::kCPU); }
  int64_t device_capacity_bytes() const override { return std::numeric_limits<int64_t>::max(); }

  // Note [parallel first touch]: both sides are host memory, mapped (Note [untouched blocks]).
  Block allocate(Side side, int64_t bytes) override {
    bool untouched = false;
    Block block = from(side == Side::kDevice ? device_ : pinned_, side, bytes, &untouched);
    core::parallel_zero_new(block.data(), bytes, untouched);
    return block;
  }
  // Note [exact-size host pool]: a move's destination is a block freed before, as it is.
  Block allocate_uninitialized(Side side, int64_t bytes) override {
    return poisoned(from(side == Side::kDevice ? device_ : pinned_, side, bytes));
  }
  Block allocate_host_only(int64_t bytes) override {
    bool untouched = false;
    Block block = from(pageable_, Side::kHost, bytes, &untouched);
    core::parallel_zero_new(block.data(), bytes, untouched);
    return block;
  }
  // What the CUDA tier would pin: the same pool, reserved the same way.
  void reserve_host(int64_t bytes, int64_t count) override {
    pinned_.reserve(bytes, count, memory::reserve_threads());
  }
  Block allocate_unfilled(Side side, int64_t bytes, bool host_only) override {
    return host_only ? poisoned(from(pageable_, Side::kHost, bytes))
                     : allocate_uninitialized(side, bytes);
  }
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

  HostMemory host_memory() const override {
    return HostMemory{pinned_.stats().reserved, pageable_.stats().reserved};
  }
  int64_t trim() override {
    device_.release_free();
    return pinned_.release_free() + pageable_.release_free();
  }

 private:
  // A block of `pool` as a tier block; `untouched`, when given, says whether it is fresh from the
  // mapping (Note [untouched blocks]).
  static Block from(memory::HostPool& pool, Side side, int64_t bytes, bool* untouched = nullptr) {
    auto owner = std::make_unique<PoolOwner>(pool.acquire(bytes));
    if (untouched != nullptr) *untouched = owner->block.untouched();
    void* data = owner->block.data();
    return Block(data, bytes, side, std::move(owner));
  }

  // Note [poisoned blocks]
  // On the CUDA tier a block that is not zeroed holds whatever the memory held before (another
  // chunk's bytes, an earlier engine's in the same process); here it comes from a fresh mapping
  // more often than not and reads as zeros, so code that reads such a block before writing it
  // passes every CPU test and fails only on a GPU. PSTAR_POISON_UNFILLED=1 fills every block the
  // tier hands out unzeroed with 0xFF bytes (NaN in fp32, bf16 and fp16) so that such a read
  // shows in the losses; a debugging aid, off by default (it writes every byte once more).
  Block poisoned(Block block) const {
    if (poison_) std::memset(block.data(), 0xFF, static_cast<size_t>(block.bytes()));
    return block;
  }
  const bool poison_ = [] {
    const char* v = std::getenv("PSTAR_POISON_UNFILLED");
    return v != nullptr && std::string(v) == "1";
  }();

  // Both sides are host memory. The host side keeps apart what the CUDA tier would pin (blocks fit
  // for copies) and what it would not (Note [pinned what moves]), so that host_memory() reports
  // what a GPU run of the same plan would hold.
  memory::HostPool device_, pinned_, pageable_;
  memory::CpuAllocationCounter& counter_ = memory::CpuAllocationCounter::instance();
};

}  // namespace

std::unique_ptr<DeviceTier> make_emulated_tier() { return std::make_unique<EmulatedTier>(); }

}  // namespace pstar::tier
