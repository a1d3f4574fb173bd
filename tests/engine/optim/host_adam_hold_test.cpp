// Held spans (Note [held parameters] in engine/adam_steps.h): what host Adam writes for a
// parameter torch's Adam skips, and slices of a span, which the engine updates at their own step
// counts.
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "host_adam_test_util.h"
#include "pstar/base/error.h"
#include "pstar/optim/host_adam.h"

namespace {

using pstar::optim::AdamHyper;
using pstar::optim::AdamSpan;
using pstar::optim::GradType;
using pstar::optim::host_adam_hold;
using pstar::optim::host_adam_step;
using pstar::optim::ParamOutType;
using pstar::test::expect_same_bits;

// Masters that exercise the rounding: ties, subnormals, overflow to inf. (Not NaN: which NaN a
// conversion writes is the one difference Note [host adam bit identity] allows.)
torch::Tensor awkward_masters(int64_t n) {
  torch::manual_seed(3);
  auto master = torch::randn({n}) * 100;
  master[0] = 1.00390625f;     // halfway between two bf16 values
  master[1] = 1e-40f;          // subnormal in fp32
  master[2] = 70000.0f;        // above fp16's largest: inf
  master[3] = 1.00048828125f;  // halfway between two fp16 values
  master[4] = -0.0f;
  return master;
}

TEST(HostAdamHold, WritesTheParameterCopyAsLibTorchRoundsTheMasterAndNothingElse) {
  const int64_t n = 4099;
  for (const auto& [type, dtype] : {std::pair{ParamOutType::kBF16, torch::kBFloat16},
                                    std::pair{ParamOutType::kF16, torch::kFloat16}}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto master = awkward_masters(n), m = torch::randn({n}), v = torch::rand({n});
    const auto master0 = master.clone(), m0 = m.clone(), v0 = v.clone();
    auto out = torch::full({n}, 3.0, dtype);
    // No gradient: a held span reads none (under param/grad reuse `out` holds it).
    host_adam_hold(AdamSpan{master.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(),
                            nullptr, GradType::kF32, out.data_ptr(), type, n});
    expect_same_bits(out, master0.to(dtype), "the parameter copy");
    expect_same_bits(master, master0, "master");
    expect_same_bits(m, m0, "exp_avg");
    expect_same_bits(v, v0, "exp_avg_sq");
  }
}

TEST(HostAdamHold, ARedirectedSpanGetsTheStateUnchangedInItsSlot) {
  const int64_t n = 1000;
  auto master = awkward_masters(n), m = torch::randn({n}), v = torch::rand({n});
  auto master_out = torch::full({n}, 7.0f), m_out = torch::full({n}, 7.0f),
       v_out = torch::full({n}, 7.0f), out = torch::zeros({n}, torch::kBFloat16);
  AdamSpan span{master.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), nullptr,
                GradType::kBF16,          out.data_ptr(),      ParamOutType::kBF16, n};
  span.master_out = master_out.data_ptr<float>();
  span.exp_avg_out = m_out.data_ptr<float>();
  span.exp_avg_sq_out = v_out.data_ptr<float>();
  host_adam_hold(span);
  expect_same_bits(master_out, master, "master_out");
  expect_same_bits(m_out, m, "exp_avg_out");
  expect_same_bits(v_out, v, "exp_avg_sq_out");
  expect_same_bits(out, master.to(torch::kBFloat16), "the parameter copy");
  // fp32 training: the master is the parameter; only the redirected state is written.
  AdamSpan fp32 = span;
  fp32.param_out = nullptr;
  fp32.param_out_type = ParamOutType::kNone;
  master_out.fill_(7.0f);
  host_adam_hold(fp32);
  expect_same_bits(master_out, master, "fp32 master_out");
  span.exp_avg_out = nullptr;
  EXPECT_THROW(host_adam_hold(span), pstar::ConfigError);
}

// AdamSpan::slice advances every buffer by its own element size: a span updated as two slices at
// its step count gives the bits of one pass, with gradient and parameter copy of 2 bytes (aliased,
// as under param/grad reuse) and fp32 gradients, redirected or not.
TEST(HostAdamHold, SlicesOfASpanUpdateAsTheWholeSpanDoes) {
  const int64_t n = 3001, cut = 1237;
  AdamHyper hyper;
  hyper.lr = 0.01f;
  hyper.weight_decay = 0.1f;
  hyper.step = 4;
  for (bool reuse : {true, false}) {
    for (bool redirect : {false, true}) {
      SCOPED_TRACE(std::string(reuse ? "bf16 gradient in the parameter copy" : "fp32 gradient") +
                   (redirect ? ", redirected" : ""));
      torch::manual_seed(5);
      const auto master0 = torch::randn({n}), m0 = torch::randn({n}), v0 = torch::rand({n});
      const auto grad0 = torch::randn({n});
      struct Buffers {
        torch::Tensor master, m, v, grad, param, master_out, m_out, v_out;
      };
      auto make = [&] {
        Buffers b{master0.clone(),
                  m0.clone(),
                  v0.clone(),
                  reuse ? grad0.to(torch::kBFloat16) : grad0.clone(),
                  torch::zeros({n}, torch::kBFloat16),
                  torch::zeros({n}),
                  torch::zeros({n}),
                  torch::zeros({n})};
        if (reuse) b.param = b.grad;
        return b;
      };
      auto span_of = [&](Buffers& b) {
        AdamSpan s{b.master.data_ptr<float>(),
                   b.m.data_ptr<float>(),
                   b.v.data_ptr<float>(),
                   b.grad.data_ptr(),
                   reuse ? GradType::kBF16 : GradType::kF32,
                   b.param.data_ptr(),
                   ParamOutType::kBF16,
                   n};
        if (redirect) {
          s.master_out = b.master_out.data_ptr<float>();
          s.exp_avg_out = b.m_out.data_ptr<float>();
          s.exp_avg_sq_out = b.v_out.data_ptr<float>();
        }
        return s;
      };
      Buffers whole = make(), parts = make();
      host_adam_step(hyper, 0.5f, span_of(whole));
      const AdamSpan s = span_of(parts);
      host_adam_step(hyper, 0.5f, s.slice(cut, n - cut));
      host_adam_step(hyper, 0.5f, s.slice(0, cut));
      for (auto [a, b, what] : {std::tuple{whole.master, parts.master, "master"},
                                std::tuple{whole.m, parts.m, "exp_avg"},
                                std::tuple{whole.master_out, parts.master_out, "master_out"},
                                std::tuple{whole.v_out, parts.v_out, "exp_avg_sq_out"},
                                std::tuple{whole.param, parts.param, "parameter copy"}})
        expect_same_bits(b, a, what);
    }
  }
}

}  // namespace
