// The NCCL communicator (Note [device collectives]) on one GPU with one rank: its collectives on
// device memory against values computed here in double precision, and the chunk engine trained
// through it against the same run with no communicator. Two ranks need two GPUs (NCCL refuses two
// ranks on one): tests/cmd/train_devices_test.cpp trains them, with the backend "auto" picks.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/dist/forked_ranks.h"
#include "engine/small_gpt_config.h"
#include "pstar/dist/communicator.h"
#include "pstar/engine/param_engine.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::dist {
namespace {

class NcclOneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string missing = nccl_missing_reason();
    if (!missing.empty()) GTEST_SKIP() << "this build has no NCCL communicator: " << missing;
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device is usable here";
    WorldInfo w;
    w.rank = 0;
    w.world_size = 1;
    w.local_rank = 0;
    w.local_world_size = 1;
    w.port = pstar::testing::free_port();
    w.launcher = "test";
    comm_ = connect_nccl(connect_gloo(w, std::chrono::seconds(60)), 0, std::chrono::seconds(60));
  }

  std::unique_ptr<Communicator> comm_;
};

TEST_F(NcclOneRank, CollectivesMoveDeviceMemory) {
  ASSERT_TRUE(comm_->on_device());
  const auto gpu = torch::TensorOptions().device(torch::kCUDA, 0);
  // All-gather of one part: the part is read and left intact.
  const at::Tensor pattern =
      torch::arange(1001, gpu.dtype(torch::kInt64)).remainder(251).to(torch::kUInt8);
  at::Tensor part = pattern.clone();
  comm_->all_gather({part.data_ptr()}, part.numel());
  EXPECT_TRUE(torch::equal(part, pattern));

  // Reduce-scatter: add_local's accumulator is device memory; the sum lands in `out`.
  constexpr int64_t kNumel = 1000;
  at::Tensor out = torch::full({kNumel}, -1.0F, gpu.dtype(torch::kFloat32));
  int64_t calls = 0;
  comm_->reduce_scatter(
      kNumel,
      [&](int64_t j, float* acc) {
        ++calls;
        EXPECT_EQ(j, 0);
        at::Tensor a = torch::from_blob(acc, {kNumel}, gpu.dtype(torch::kFloat32));
        a.add_(torch::arange(kNumel, gpu.dtype(torch::kFloat32)).mul(1e-3).add(0.5));
      },
      out.data_ptr<float>());
  EXPECT_EQ(calls, 1);
  const at::Tensor host = out.cpu();
  for (int64_t i = 0; i < kNumel; i += 111) {
    EXPECT_NEAR(host[i].item<float>(), 0.5 + static_cast<double>(i) * 1e-3, 1e-6) << i;
  }

  // The flat reduce-scatter the engine uses (Note [flat collectives]): in place, in its own slot.
  at::Tensor flat = torch::arange(kNumel, gpu.dtype(torch::kFloat32)).mul(2e-3).add(0.25);
  const at::Tensor before = flat.cpu();
  comm_->reduce_scatter_flat(flat.data_ptr<float>(), kNumel);
  EXPECT_TRUE(torch::equal(flat.cpu(), before)) << "one rank's sum is its own contribution";

  // Scalars: fp64 on the device, back on the host.
  std::vector<double> values{2.5, -1e300};
  comm_->all_reduce_sum(values);
  EXPECT_EQ(values[0], 2.5);
  EXPECT_EQ(values[1], -1e300);
  EXPECT_GT(comm_->take_stats().seconds, 0);
}

TEST_F(NcclOneRank, TrainingThroughItTracksNoCommunicator) {
  pstar::testing::ScratchDir dir;
  config::TrainConfig c = pstar::testing::small_gpt_config_in(dir);
  c.engine.device_memory = int64_t{2} << 30;
  c.training.steps = 4;
  auto run = [&](Communicator* comm) {
    train::TrainOptions o;
    o.device = "cuda";
    o.progress = false;
    o.comm = comm;
    auto built = train::build_model_and_engine(train::plan_run(c, "cuda", comm), comm);
    train::Trainer trainer(c, std::move(built), o);
    std::vector<train::StepMetrics> out;
    while (trainer.steps_done() < c.training.steps) out.push_back(trainer.step());
    return out;
  };
  const auto alone = run(nullptr);
  const auto nccl = run(comm_.get());
  ASSERT_EQ(nccl.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_NEAR(nccl[i].loss, alone[i].loss, 2e-6 * std::abs(alone[i].loss)) << "step " << i + 1;
    EXPECT_GT(nccl[i].engine.reductions, 0) << "step " << i + 1 << ": the communicator was used";
  }
}

}  // namespace
}  // namespace pstar::dist
