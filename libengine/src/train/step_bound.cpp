// Note [step bound] in pstar/train/step_bound.h: the three terms and the measurements behind them.
#include "pstar/train/step_bound.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>

#include <torch/torch.h>

#include "pstar/base/format.h"
#include "pstar/base/strings.h"
#include "pstar/optim/host_adam.h"
#include "pstar/tier/device_tier.h"

namespace pstar::train {

namespace {

double over(double amount, double rate) { return rate > 0 ? amount / rate : 0.0; }

// The shortest of `repeats` timed runs of `work` after one untimed one (first touch, lazy
// initialisation): noise only ever adds time.
double best_seconds(int repeats, const std::function<void()>& work) {
  work();
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return std::max(best, 1e-9);
}

}  // namespace

double StepBound::seconds() const { return std::max({compute_s, copy_s, host_s}); }

const char* StepBound::limit() const {
  const double s = seconds();
  if (s == compute_s) return "compute";
  if (s == copy_s) return "copies";
  return "host memory";
}

StepBound step_bound(const StepWork& work, const MachineRates& rates) {
  StepBound b;
  b.compute_s = over(work.model_flops, rates.compute_flops);
  const auto h2d = static_cast<double>(work.h2d_bytes);
  const auto d2h = static_cast<double>(work.d2h_bytes);
  b.copy_s = std::max({over(h2d, rates.h2d_bytes), over(d2h, rates.d2h_bytes),
                       over(h2d + d2h, rates.two_way_bytes)});
  b.host_s = over(static_cast<double>(work.host_memory_bytes()), rates.host_memory_bytes);
  return b;
}

MachineRates measure_rates(tier::DeviceTier& tier, bool half, const RateSizes& sizes) {
  MachineRates r;
  using tier::Side;
  const int64_t n = sizes.copy_bytes;
  tier::Block host_a = tier.allocate(Side::kHost, n), host_b = tier.allocate(Side::kHost, n);
  tier::Block device_a = tier.allocate(Side::kDevice, n),
              device_b = tier.allocate(Side::kDevice, n);
  std::memset(host_a.data(), 1, static_cast<size_t>(n));
  std::memset(host_b.data(), 2, static_cast<size_t>(n));
  const auto bytes = static_cast<double>(n);
  r.h2d_bytes = bytes / best_seconds(sizes.repeats, [&] {
                  tier.copy_ahead(device_a, host_a, n);
                  tier.synchronize();
                });
  r.d2h_bytes = bytes / best_seconds(sizes.repeats, [&] {
                  tier.copy(host_b, device_a, n);
                  tier.synchronize();
                });
  // The upload is queued first and does not hold the host, so the download runs beside it.
  r.two_way_bytes = 2 * bytes / best_seconds(sizes.repeats, [&] {
                      tier.copy_ahead(device_b, host_a, n);
                      tier.copy(host_b, device_a, n);
                      tier.synchronize();
                    });

  const int64_t side = sizes.matmul_side;
  const auto options = torch::TensorOptions()
                           .device(tier.compute_device())
                           .dtype(half ? torch::kBFloat16 : torch::kFloat32);
  {
    const torch::NoGradGuard no_grad;
    const torch::Tensor a = torch::randn({side, side}, options);
    const torch::Tensor b = torch::randn({side, side}, options);
    torch::Tensor c = torch::empty({side, side}, options);
    const double s = static_cast<double>(side);
    r.compute_flops = 2 * s * s * s / best_seconds(sizes.repeats, [&] {
                        torch::mm_out(c, a, b);
                        tier.synchronize();
                      });
  }

  // Note [host rate]: the faster of a copy (read and written bytes; its write-allocate is not
  // counted) and host Adam's own in-place pass over fp32 state (16 bytes read and 12 written a
  // parameter, every written line read first), each over `host_bytes` per array.
  const torch::Tensor from = torch::ones({sizes.host_bytes}, torch::kUInt8);
  torch::Tensor to = torch::zeros({sizes.host_bytes}, torch::kUInt8);
  const double copy_rate = 2 * static_cast<double>(sizes.host_bytes) /
                           best_seconds(sizes.repeats, [&] { to.copy_(from); });
  const int64_t numel = sizes.host_bytes / 4;
  torch::Tensor master = torch::randn({numel}), exp_avg = torch::zeros({numel}),
                exp_avg_sq = torch::zeros({numel});
  const torch::Tensor grad = torch::randn({numel}) * 1e-3;
  const optim::AdamSpan span{master.data_ptr<float>(),     exp_avg.data_ptr<float>(),
                             exp_avg_sq.data_ptr<float>(), grad.data_ptr(),
                             optim::GradType::kF32,        nullptr,
                             optim::ParamOutType::kNone,   numel};
  optim::AdamHyper hyper;
  const double adam_rate = 28 * static_cast<double>(numel) / best_seconds(sizes.repeats, [&] {
                             ++hyper.step;
                             optim::host_adam_step(hyper, 1.0F, span);
                           });
  r.host_memory_bytes = std::max(copy_rate, adam_rate);
  return r;
}

std::string describe_bound(double step_s, const StepBound& bound) {
  const double b = bound.seconds();
  return str_cat("step ", format_fixed(step_s, 3), " s = ", format_fixed(step_s / b, 2),
                 " x the bound ", format_fixed(b, 3), " s (compute ",
                 format_fixed(bound.compute_s, 3), ", copies ", format_fixed(bound.copy_s, 3),
                 ", host memory ", format_fixed(bound.host_s, 3), "; set by ", bound.limit(), ")");
}

}  // namespace pstar::train
