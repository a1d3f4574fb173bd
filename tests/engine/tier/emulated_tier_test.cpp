// The emulated device tier against plain LibTorch and host Adam (Note [device tier]): blocks,
// copies, the kernels on both sides, the host pools and the factory. The chunk engine against a
// checking tier is in device_tier_test.cpp.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/small_gpt_config.h"
#include "engine/tier/checking_tier.h"
#include "pstar/base/error.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/memory/cpu_counter.h"
#include "pstar/model/gpt.h"
#include "pstar/model/init.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::tier {
namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& x : out) x = dist(gen);
  return out;
}

TEST(EmulatedTier, BlocksAreZeroedOnTheirSideAndViewsSeeThem) {
  auto tier = make_emulated_tier();
  EXPECT_EQ(tier->describe(), "emulated on the CPU");
  EXPECT_TRUE(tier->compute_device().is_cpu());
  EXPECT_EQ(tier->device_capacity_bytes(), std::numeric_limits<int64_t>::max());
  for (Side side : {Side::kDevice, Side::kHost}) {
    Block b = tier->allocate(side, 40);
    ASSERT_TRUE(b);
    EXPECT_EQ(b.side(), side);
    EXPECT_EQ(b.bytes(), 40);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    auto v = tier->view(b, torch::kFloat32, 2, {2, 4});
    EXPECT_TRUE(torch::equal(v, torch::zeros({2, 4})));
    v.fill_(3.0f);
    EXPECT_EQ(static_cast<float*>(b.data())[2], 3.0f);
    EXPECT_EQ(static_cast<float*>(b.data())[1], 0.0f);
    b.reset();
    EXPECT_FALSE(b);
    EXPECT_EQ(b.bytes(), 0);
  }
  EXPECT_STREQ(side_name(Side::kDevice), "device");
  EXPECT_STREQ(side_name(Side::kHost), "host");
}

// Note [untouched blocks]: a fresh block is only faulted in, so a reused one must still be zeroed.
TEST(EmulatedTier, ZeroedBlocksReadZeroWhetherFreshOrUsedBefore) {
  auto tier = make_emulated_tier();
  const int64_t bytes = (int64_t{5} << 20) + 12;  // several pieces, in huge pages where possible
  for (Side side : {Side::kDevice, Side::kHost}) {
    for (bool host_only : {false, true}) {
      if (host_only && side == Side::kDevice) continue;
      for (int round = 0; round < 2; ++round) {
        Block b = host_only ? tier->allocate_host_only(bytes) : tier->allocate(side, bytes);
        const auto* p = static_cast<const uint8_t*>(b.data());
        for (int64_t i = 0; i < bytes; ++i)
          ASSERT_EQ(p[i], 0) << side_name(side) << (host_only ? " host-only" : "") << " round "
                             << round << " byte " << i;
        // Dirty it: the second round gets this block back from the pool.
        std::memset(b.data(), 0xEE, static_cast<size_t>(bytes));
      }
    }
  }
}

TEST(EmulatedTier, ViewPastTheBlockIsAnInternalError) {
  auto tier = make_emulated_tier();
  Block b = tier->allocate(Side::kHost, 16);
  EXPECT_THROW(tier->view(b, torch::kFloat32, 1, {4}), InternalError);
  EXPECT_NO_THROW(tier->view(b, torch::kFloat32, 0, {4}));
}

// Note [communication stream]: the emulated tier runs everything in call order, so it has no
// marks and no communication stream, and a collective's thread just runs its work.
TEST(EmulatedTier, HasNoCommunicationStream) {
  auto tier = make_emulated_tier();
  EXPECT_EQ(tier->mark_compute(), nullptr);
  EXPECT_EQ(tier->enter_comm_stream(nullptr), nullptr);
}

TEST(EmulatedTier, CopyAndZeroMoveExactlyTheBytesAsked) {
  auto tier = make_emulated_tier();
  Block host = tier->allocate(Side::kHost, 64);
  Block device = tier->allocate(Side::kDevice, 64);
  for (int i = 0; i < 64; ++i) static_cast<uint8_t*>(host.data())[i] = static_cast<uint8_t>(i + 1);
  tier->copy(device, host, 48);
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(static_cast<uint8_t*>(device.data())[i], i < 48 ? i + 1 : 0) << i;
  tier->zero(device, 16);
  for (int i = 0; i < 48; ++i)
    EXPECT_EQ(static_cast<uint8_t*>(device.data())[i], i < 16 ? 0 : i + 1) << i;
}

TEST(EmulatedTier, AdamAndSumOfSquaresGiveHostBitsOnBothSides) {
  auto tier = make_emulated_tier();
  const int64_t n = 1000;
  const auto grad = random_floats(n, 1), master = random_floats(n, 2);
  optim::AdamHyper hyper;
  hyper.weight_decay = 0.01f;
  hyper.step = 3;
  // The reference: host Adam on plain vectors.
  std::vector<float> ref_master = master, ref_m(n, 0.1f), ref_v(n, 0.2f);
  optim::AdamSpan ref{ref_master.data(),
                      ref_m.data(),
                      ref_v.data(),
                      grad.data(),
                      optim::GradType::kF32,
                      nullptr,
                      optim::ParamOutType::kNone,
                      n};
  optim::host_adam_step(hyper, 0.5f, ref);
  for (Side side : {Side::kDevice, Side::kHost}) {
    std::vector<Block> b;
    for (int i = 0; i < 4; ++i) b.push_back(tier->allocate(side, n * 4));
    std::memcpy(b[0].data(), master.data(), n * 4);
    tier->view(b[1], torch::kFloat32, 0, {n}).fill_(0.1f);
    tier->view(b[2], torch::kFloat32, 0, {n}).fill_(0.2f);
    std::memcpy(b[3].data(), grad.data(), n * 4);
    optim::AdamSpan span{static_cast<float*>(b[0].data()),
                         static_cast<float*>(b[1].data()),
                         static_cast<float*>(b[2].data()),
                         b[3].data(),
                         optim::GradType::kF32,
                         nullptr,
                         optim::ParamOutType::kNone,
                         n};
    tier->adam_step(side, hyper, 0.5f, span);
    EXPECT_EQ(std::memcmp(b[0].data(), ref_master.data(), n * 4), 0) << side_name(side);
    EXPECT_EQ(std::memcmp(b[1].data(), ref_m.data(), n * 4), 0) << side_name(side);
    EXPECT_EQ(std::memcmp(b[2].data(), ref_v.data(), n * 4), 0) << side_name(side);
    // The sum of squares against float64 LibTorch (within rounding) and host bits (exactly).
    const double sum = tier->grad_sq_sum(side, b[3].data(), optim::GradType::kF32, n);
    EXPECT_EQ(sum, optim::grad_sq_sum(grad.data(), optim::GradType::kF32, n));
    const double ref_sum = torch::from_blob(const_cast<float*>(grad.data()), {n})
                               .to(torch::kFloat64)
                               .square()
                               .sum()
                               .item<double>();
    EXPECT_NEAR(sum, ref_sum, 1e-12 * ref_sum);
  }
}

// Note [exact-size host pool]: a move's destination is memory freed before, handed out as it is on
// either side; allocate() still zeroes what it hands out.
TEST(EmulatedTier, MovesReuseFreedBlocksWithoutZeroingThem) {
  if (const char* v = std::getenv("PSTAR_POISON_UNFILLED"); v != nullptr && std::string(v) == "1")
    GTEST_SKIP() << "PSTAR_POISON_UNFILLED=1 overwrites reused blocks (Note [poisoned blocks])";
  auto tier = make_emulated_tier();
  for (Side side : {Side::kDevice, Side::kHost}) {
    SCOPED_TRACE(side_name(side));
    Block first = tier->allocate_uninitialized(side, 4096);
    void* const memory = first.data();
    std::memset(memory, 0x7E, 4096);
    first.reset();
    Block moved = tier->allocate_uninitialized(side, 4096);
    EXPECT_EQ(moved.data(), memory);
    EXPECT_EQ(static_cast<const uint8_t*>(moved.data())[4095], 0x7E);
    moved.reset();
    Block zeroed = tier->allocate(side, 4096);
    EXPECT_EQ(zeroed.data(), memory);
    EXPECT_TRUE(torch::equal(tier->view(zeroed, torch::kUInt8, 0, {4096}),
                             torch::zeros({4096}, torch::kUInt8)));
  }
}

// Note [poisoned blocks]: with PSTAR_POISON_UNFILLED=1 every block handed out unzeroed reads as
// NaN (0xFF bytes), reused or fresh, on both sides and from the pageable pool; zeroed blocks stay
// zero.
TEST(EmulatedTier, PoisonFillsEveryUnzeroedBlock) {
  ::setenv("PSTAR_POISON_UNFILLED", "1", 1);
  auto tier = make_emulated_tier();
  ::unsetenv("PSTAR_POISON_UNFILLED");
  const auto all_ff = [&](const Block& b) {
    return torch::equal(tier->view(b, torch::kUInt8, 0, {b.bytes()}),
                        torch::full({b.bytes()}, 0xFF, torch::kUInt8));
  };
  for (Side side : {Side::kDevice, Side::kHost}) {
    SCOPED_TRACE(side_name(side));
    Block fresh = tier->allocate_uninitialized(side, 4096);
    EXPECT_TRUE(all_ff(fresh));
    std::memset(fresh.data(), 0, 4096);
    fresh.reset();
    EXPECT_TRUE(all_ff(tier->allocate_uninitialized(side, 4096)));  // reused, poisoned again
    EXPECT_TRUE(all_ff(tier->allocate_unfilled(side, 4096, /*host_only=*/false)));
    Block zeroed = tier->allocate(side, 4096);
    EXPECT_TRUE(torch::equal(tier->view(zeroed, torch::kUInt8, 0, {4096}),
                             torch::zeros({4096}, torch::kUInt8)));
  }
  EXPECT_TRUE(all_ff(tier->allocate_unfilled(Side::kHost, 4096, /*host_only=*/true)));
  EXPECT_FALSE(all_ff(tier->allocate_host_only(4096)));
  // Without the variable nothing is poisoned (a fresh mapping reads as zeros).
  auto plain = make_emulated_tier();
  Block b = plain->allocate_unfilled(Side::kHost, int64_t{1} << 20, /*host_only=*/true);
  EXPECT_EQ(static_cast<const uint8_t*>(b.data())[0], 0);
}

// Note [pinned what moves]: the emulated tier counts the host memory the CUDA tier would pin
// (blocks fit for copies) apart from the pageable rest, each with what its pool keeps for reuse,
// and the device side in neither.
TEST(EmulatedTier, HostMemoryCountsWhatWouldBePinnedApartFromThePageableRest) {
  auto tier = make_emulated_tier();
  Block device = tier->allocate(Side::kDevice, 1 << 16);
  Block moving = tier->allocate(Side::kHost, 3000);
  Block moved = tier->allocate_uninitialized(Side::kHost, 5000);
  Block staying = tier->allocate_host_only(7000);
  EXPECT_EQ(staying.side(), Side::kHost);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(staying.data()) % 64, 0u);
  EXPECT_TRUE(torch::equal(tier->view(staying, torch::kUInt8, 0, {7000}),
                           torch::zeros({7000}, torch::kUInt8)));
  DeviceTier::HostMemory held = tier->host_memory();
  EXPECT_EQ(held.pinned.current, 8000);
  EXPECT_EQ(held.pageable.current, 7000);
  EXPECT_EQ(held.current(), 15000);
  // Freed blocks stay held, for reuse, until trim() gives them back.
  moved.reset();
  staying.reset();
  device.reset();
  held = tier->host_memory();
  EXPECT_EQ(held.current(), 15000);
  EXPECT_EQ(tier->trim(), 12000);
  held = tier->host_memory();
  EXPECT_EQ(held.pinned.current, 3000);
  EXPECT_EQ(held.pageable.current, 0);
  EXPECT_EQ(held.pinned.peak, 8000);
  EXPECT_EQ(held.pageable.peak, 7000);
  // The pools are apart: a pageable block of a pinned block's size is pageable memory.
  Block again = tier->allocate_host_only(3000);
  held = tier->host_memory();
  EXPECT_EQ(held.pinned.current, 3000);
  EXPECT_EQ(held.pageable.current, 3000);
}

// Note [reserved blocks]: blocks set aside ahead are what the copyable host allocations of their
// size take next (nothing more is allocated until they are used up), and they are held meanwhile.
TEST(EmulatedTier, ReservedHostBlocksServeTheAllocationsOfTheirSize) {
  auto tier = make_emulated_tier();
  tier->reserve_host(4096, 3);
  EXPECT_EQ(tier->host_memory().pinned.current, 3 * 4096);
  std::vector<Block> taken;
  taken.push_back(tier->allocate(Side::kHost, 4096));
  taken.push_back(tier->allocate_unfilled(Side::kHost, 4096, /*host_only=*/false));
  taken.push_back(tier->allocate_uninitialized(Side::kHost, 4096));
  EXPECT_EQ(tier->host_memory().pinned.allocated, 3 * 4096) << "a reserved block went unused";
  EXPECT_TRUE(torch::equal(tier->view(taken[0], torch::kUInt8, 0, {4096}),
                           torch::zeros({4096}, torch::kUInt8)));
  taken.push_back(tier->allocate(Side::kHost, 4096));  // past the reserve: fresh memory
  EXPECT_EQ(tier->host_memory().pinned.current, 4 * 4096);
  // Other sizes and host-only memory are not drawn from it.
  Block other = tier->allocate_unfilled(Side::kHost, 4096, /*host_only=*/true);
  EXPECT_EQ(tier->host_memory().pageable.current, 4096);
}

TEST(EmulatedTier, NonModelMemoryIsLibTorchsAndNotTheTiers) {
  auto tier = make_emulated_tier();
  tier->reset_non_model_peak();
  const int64_t before = tier->non_model_bytes();
  Block chunk = tier->allocate(Side::kDevice, 1 << 20);
  EXPECT_EQ(tier->non_model_bytes(), before);
  {
    auto activation = torch::empty({1 << 18});  // 1 MiB through LibTorch
    EXPECT_GE(tier->non_model_bytes(), before + (1 << 20));
  }
  EXPECT_EQ(tier->non_model_bytes(), before);
  EXPECT_GE(tier->reset_non_model_peak(), before + (1 << 20));
  EXPECT_EQ(tier->non_model_peak_bytes(), before);
}

TEST(DeviceTierFactory, PicksTheTierForTheDevice) {
  EXPECT_EQ(make_device_tier(c10::Device(c10::kCPU), 0)->describe(), "emulated on the CPU");
  if (cuda_tier_built()) GTEST_SKIP() << "this build has the CUDA tier; its tests are gpu-labelled";
  try {
    make_device_tier(c10::Device(c10::kCUDA, 0), 1 << 30);
    FAIL() << "a build without the CUDA tier made one";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device tier"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pstar::tier
