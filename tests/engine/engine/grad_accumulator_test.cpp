// Note [one accumulator per tensor]: Tensor::set_data to another device or type drops a leaf's
// gradient accumulator. The emulated tier never changes a tensor's device, so a change of type
// stands in for a move to the GPU and back here.
#include <memory>

#include <gtest/gtest.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "grad_accumulator.h"

namespace pstar::engine {
namespace {

using torch::autograd::impl::try_get_grad_accumulator;

// LibTorch alone: a round trip gives the tensor a new accumulator (why the helper exists).
TEST(GradAccumulator, SetDataToAnotherTypeAndBackDropsTheAccumulator) {
  auto w = torch::ones({4}).requires_grad_(true);
  auto y = (w * 2).sum();
  const auto before = try_get_grad_accumulator(w);
  ASSERT_NE(before, nullptr);
  const auto values = w.detach().clone();
  {
    torch::NoGradGuard no_grad;
    w.set_data(values.to(torch::kFloat64));
    w.set_data(values);
  }
  EXPECT_NE(try_get_grad_accumulator(w), before);
}

// With the helper: two uses around the round trip feed one accumulation of both gradients, and
// the tensor's hook runs once with their sum.
TEST(GradAccumulator, ARoundTripKeepsOneAccumulationOfEveryUse) {
  auto w = torch::ones({4}).requires_grad_(true);
  int calls = 0;
  torch::Tensor seen;
  w.register_hook([&](const torch::Tensor& g) {
    ++calls;
    seen = g.clone();
  });
  std::weak_ptr<torch::autograd::Node> kept;
  const auto values = w.detach().clone();
  auto y1 = (w * 2).sum();
  const auto first = try_get_grad_accumulator(w);
  {
    torch::NoGradGuard no_grad;
    set_data_keeping_accumulator(w, values.to(torch::kFloat64), kept);
    // Of another type the old accumulator cannot serve it: none is given back there.
    EXPECT_EQ(try_get_grad_accumulator(w), nullptr);
    set_data_keeping_accumulator(w, values, kept);
  }
  EXPECT_EQ(try_get_grad_accumulator(w), first);
  auto y2 = (w * 3).sum();
  (y1 + y2).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(seen.equal(torch::full({4}, 5.0f)));
  EXPECT_TRUE(w.grad().equal(torch::full({4}, 5.0f)));
}

// After the backward the graph lets go of the node: the next use makes a new one as usual, and
// the helper does not hold the old one alive.
TEST(GradAccumulator, ANodeTheGraphReleasedIsNotKept) {
  auto w = torch::ones({4}).requires_grad_(true);
  std::weak_ptr<torch::autograd::Node> kept;
  {
    auto y = (w * 2).sum();
    torch::NoGradGuard no_grad;
    set_data_keeping_accumulator(w, w.detach().clone(), kept);
  }
  EXPECT_TRUE(kept.expired());
}

}  // namespace
}  // namespace pstar::engine
