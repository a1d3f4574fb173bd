// Host Adam redirected into other buffers (Note [speculative adam]): the same bits as in place on
// every ISA, the originals kept, and the non-temporal stores of Note [streaming stores] used only
// where every output is aligned, without touching a byte outside the span.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "host_adam_test_util.h"
#include "pstar/base/error.h"
#include "pstar/optim/host_adam.h"

namespace {

using pstar::optim::AdamHyper;
using pstar::optim::AdamSpan;
using pstar::optim::GradType;
using pstar::optim::host_adam_step;
using pstar::optim::ParamOutType;
using pstar::optim::detail::Isa;
using pstar::optim::detail::streaming_begin;
using pstar::test::available_isas;
using pstar::test::expect_same_bits;
using pstar::test::ScopedIsa;
using pstar::test::ScopedOmpThreads;

// Note [speculative adam]: with the *_out pointers set the kernel reads the state where it is and
// writes elsewhere, the same bits as in place, on every ISA; the originals keep their values.
TEST(HostAdam, OutOfPlaceWritesTheInPlaceBitsAndKeepsTheOriginals) {
  const int64_t n = 100003;
  for (Isa isa : available_isas()) {
    ScopedIsa scoped(isa);
    torch::manual_seed(10);
    auto master = torch::randn({n}), m = torch::randn({n}), v = torch::rand({n});
    auto grad = torch::randn({n}).to(torch::kBFloat16);
    const auto master0 = master.clone(), m0 = m.clone(), v0 = v.clone(), grad0 = grad.clone();
    auto in_master = master.clone(), in_m = m.clone(), in_v = v.clone();
    auto in_out = torch::empty({n}, torch::kBFloat16), out = torch::empty({n}, torch::kBFloat16);
    auto master_out = torch::full({n}, 7.0f), m_out = torch::full({n}, 7.0f),
         v_out = torch::full({n}, 7.0f);
    AdamHyper hyper;
    hyper.lr = 0.01f;
    hyper.weight_decay = 0.1f;
    hyper.step = 3;
    host_adam_step(
        hyper, 0.5f,
        AdamSpan{in_master.data_ptr<float>(), in_m.data_ptr<float>(), in_v.data_ptr<float>(),
                 grad.data_ptr(), GradType::kBF16, in_out.data_ptr(), ParamOutType::kBF16, n});
    AdamSpan span{
        master.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), grad.data_ptr(),
        GradType::kBF16,          out.data_ptr(),      ParamOutType::kBF16, n};
    span.master_out = master_out.data_ptr<float>();
    span.exp_avg_out = m_out.data_ptr<float>();
    span.exp_avg_sq_out = v_out.data_ptr<float>();
    host_adam_step(hyper, 0.5f, span);
    const std::string isa_name = pstar::optim::detail::isa_name(isa);
    expect_same_bits(master_out, in_master, isa_name + " master");
    expect_same_bits(m_out, in_m, isa_name + " exp_avg");
    expect_same_bits(v_out, in_v, isa_name + " exp_avg_sq");
    expect_same_bits(out, in_out, isa_name + " param_out");
    expect_same_bits(master, master0, isa_name + " master kept");
    expect_same_bits(m, m0, isa_name + " exp_avg kept");
    expect_same_bits(v, v0, isa_name + " exp_avg_sq kept");
    EXPECT_TRUE(torch::equal(grad, grad0));
  }
  AdamSpan half;
  auto x = torch::zeros({4});
  half.master = half.exp_avg = half.exp_avg_sq = x.data_ptr<float>();
  half.grad = x.data_ptr();
  half.numel = 4;
  half.master_out = x.data_ptr<float>();
  EXPECT_THROW(host_adam_step(AdamHyper{}, 1.0f, half), pstar::ConfigError);
}

// Outputs `shift` elements past a 64-byte boundary (LibTorch's CPU allocations are 64-byte
// aligned, which the test checks), or the exp_avg output one more.
struct Outputs {
  torch::Tensor master, exp_avg, exp_avg_sq, param;
  AdamSpan redirect(AdamSpan span, int64_t shift, int64_t exp_avg_extra) const {
    span.master_out = master.data_ptr<float>() + shift;
    span.exp_avg_out = exp_avg.data_ptr<float>() + shift + exp_avg_extra;
    span.exp_avg_sq_out = exp_avg_sq.data_ptr<float>() + shift;
    if (span.param_out_type != ParamOutType::kNone)
      span.param_out = static_cast<uint16_t*>(param.data_ptr()) + shift;
    return span;
  }
};

Outputs make_outputs(int64_t n) {
  Outputs o;
  o.master = torch::zeros({n});
  o.exp_avg = torch::zeros({n});
  o.exp_avg_sq = torch::zeros({n});
  o.param = torch::zeros({n}, torch::kBFloat16);
  for (const torch::Tensor* t : {&o.master, &o.exp_avg, &o.exp_avg_sq, &o.param})
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data_ptr()) % 64, 0u);
  return o;
}

TEST(HostAdamStreaming, StreamingBeginIsTheFirstIndexWhereEveryOutputIsAligned) {
  if (!pstar::optim::detail::resolve_streaming(std::getenv("PSTAR_ADAM_STREAMING")))
    GTEST_SKIP() << "PSTAR_ADAM_STREAMING=0 turns the streaming stores off in this process";
  const Outputs out = make_outputs(256);
  auto master = torch::zeros({256}), m = torch::zeros({256}), v = torch::zeros({256});
  auto grad = torch::zeros({256}, torch::kBFloat16);
  const AdamSpan in_place{
      master.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), grad.data_ptr(),
      GradType::kBF16,          grad.data_ptr(),     ParamOutType::kBF16, 200};
  EXPECT_EQ(streaming_begin(in_place, 0, 200, 16), -1) << "in place: nothing to stream";
  EXPECT_EQ(streaming_begin(out.redirect(in_place, 0, 0), 0, 200, 16), 0);
  EXPECT_EQ(streaming_begin(out.redirect(in_place, 0, 0), 20, 200, 16), 32);
  EXPECT_EQ(streaming_begin(out.redirect(in_place, 0, 0), 20, 200, 8), 24);
  // Three elements past the boundary: the next vector boundary is 13 (16 lanes) or 5 (8 lanes)
  // elements on, where the bf16 parameters (2 bytes each) are aligned for half the bytes too.
  EXPECT_EQ(streaming_begin(out.redirect(in_place, 3, 0), 0, 200, 16), 13);
  EXPECT_EQ(streaming_begin(out.redirect(in_place, 3, 0), 0, 200, 8), 5);
  // A whole vector must be left after it.
  EXPECT_EQ(streaming_begin(out.redirect(in_place, 3, 0), 0, 28, 16), -1);
  EXPECT_EQ(streaming_begin(out.redirect(in_place, 3, 0), 0, 29, 16), 13);
  // Outputs aligned differently never stream.
  EXPECT_EQ(streaming_begin(out.redirect(in_place, 0, 1), 0, 200, 16), -1);
  AdamSpan param_off = out.redirect(in_place, 0, 0);
  param_off.param_out = static_cast<uint16_t*>(param_off.param_out) + 1;
  EXPECT_EQ(streaming_begin(param_off, 0, 200, 16), -1);
  // Without a parameter copy (fp32 training) only the fp32 outputs count.
  AdamSpan fp32 = out.redirect(in_place, 3, 0);
  fp32.param_out = nullptr;
  fp32.param_out_type = ParamOutType::kNone;
  EXPECT_EQ(streaming_begin(fp32, 0, 200, 16), 13);
}

TEST(HostAdamStreaming, PstarAdamStreamingIsOnUnlessZero) {
  using pstar::optim::detail::resolve_streaming;
  EXPECT_TRUE(resolve_streaming(nullptr));
  EXPECT_TRUE(resolve_streaming(""));
  EXPECT_TRUE(resolve_streaming("1"));
  EXPECT_FALSE(resolve_streaming("0"));
  try {
    resolve_streaming("yes");
    ADD_FAILURE() << "accepted 'yes'";
  } catch (const pstar::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("PSTAR_ADAM_STREAMING='yes' is not valid: use 1"),
              std::string::npos)
        << e.what();
  }
}

// Every ISA, outputs aligned or not (alike or not), spans with a head, whole vectors and a tail,
// on one thread and split across two: the in-place bits, and the guard values around the span's
// outputs untouched.
TEST(HostAdamStreaming, RedirectedStepsMatchInPlaceAtEveryAlignment) {
  constexpr float kGuard = -7.25f;
  struct Case {
    GradType grad;
    ParamOutType out;
  };
  const std::vector<Case> cases = {{GradType::kBF16, ParamOutType::kBF16},
                                   {GradType::kF16, ParamOutType::kF16},
                                   {GradType::kF32, ParamOutType::kNone}};
  for (Isa isa : available_isas()) {
    for (const Case& c : cases) {
      for (int64_t n : {int64_t{37}, int64_t{1000}, int64_t{70001}}) {
        for (int threads : {1, 2}) {
          const ScopedOmpThreads omp(threads);
          for (const auto& [shift, extra] :
               std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 0}, {5, 0}, {17, 0}, {3, 1}}) {
            torch::manual_seed(n + shift);
            const torch::ScalarType grad_type = c.grad == GradType::kF32    ? torch::kFloat
                                                : c.grad == GradType::kBF16 ? torch::kBFloat16
                                                                            : torch::kHalf;
            const torch::ScalarType out_type =
                c.out == ParamOutType::kF16 ? torch::kHalf : torch::kBFloat16;
            auto master = torch::randn({n}), m = torch::randn({n}) * 0.1, v = torch::rand({n});
            auto grad = (torch::randn({n}) * 0.01).to(grad_type);
            auto ref_master = master.clone(), ref_m = m.clone(), ref_v = v.clone();
            auto ref_out = torch::zeros({n}, out_type);
            AdamHyper hyper;
            hyper.lr = 0.01f;
            hyper.weight_decay = 0.1f;
            hyper.step = 4;
            const AdamSpan span{master.data_ptr<float>(),
                                m.data_ptr<float>(),
                                v.data_ptr<float>(),
                                grad.data_ptr(),
                                c.grad,
                                c.out == ParamOutType::kNone ? nullptr : ref_out.data_ptr(),
                                c.out,
                                n};
            {
              const ScopedIsa reference(Isa::kScalar);
              AdamSpan in_place = span;
              in_place.master = ref_master.data_ptr<float>();
              in_place.exp_avg = ref_m.data_ptr<float>();
              in_place.exp_avg_sq = ref_v.data_ptr<float>();
              host_adam_step(hyper, 0.5f, in_place);
            }
            const int64_t room = n + 64;
            Outputs outputs{torch::full({room}, kGuard), torch::full({room}, kGuard),
                            torch::full({room}, kGuard), torch::full({room}, kGuard, out_type)};
            {
              const ScopedIsa under_test(isa);
              host_adam_step(hyper, 0.5f, outputs.redirect(span, shift, extra));
            }
            const std::string what = std::string(pstar::optim::detail::isa_name(isa)) + " n " +
                                     std::to_string(n) + " threads " + std::to_string(threads) +
                                     " shift " + std::to_string(shift) + "+" +
                                     std::to_string(extra);
            expect_same_bits(outputs.master.narrow(0, shift, n), ref_master, what + " master");
            expect_same_bits(outputs.exp_avg.narrow(0, shift + extra, n), ref_m, what + " m");
            expect_same_bits(outputs.exp_avg_sq.narrow(0, shift, n), ref_v, what + " v");
            if (c.out != ParamOutType::kNone)
              expect_same_bits(outputs.param.narrow(0, shift, n), ref_out, what + " param");
            // Nothing outside the outputs was written.
            const auto guards_kept = [&](const torch::Tensor& t, int64_t at, bool written) {
              const int64_t after = at + (written ? n : 0);
              EXPECT_TRUE(t.narrow(0, 0, at).eq(kGuard).all().item<bool>()) << what;
              EXPECT_TRUE(t.narrow(0, after, room - after).eq(kGuard).all().item<bool>()) << what;
            };
            guards_kept(outputs.master, shift, true);
            guards_kept(outputs.exp_avg, shift + extra, true);
            guards_kept(outputs.exp_avg_sq, shift, true);
            guards_kept(outputs.param, shift, c.out != ParamOutType::kNone);
          }
        }
      }
    }
  }
}

}  // namespace
