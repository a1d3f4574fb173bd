#include "pstar/train/precision.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "pstar/core/log.h"

namespace pstar::train {
namespace {

void synchronize(c10::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Best GFLOP/s of `reps` n×n×n matmuls after one untimed call (first calls pay for packing
// buffers and thread start-up).
double matmul_gflops(const at::Tensor& a, const at::Tensor& b, int reps) {
  const auto device = a.device();
  (void)torch::matmul(a, b);
  synchronize(device);
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto c = torch::matmul(a, b);
    synchronize(device);
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double n = static_cast<double>(a.size(0));
  return 2.0 * n * n * n / std::max(best, 1e-12) / 1e9;
}

std::string fixed(double v, const char* format) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

bool Bf16Probe::fast() const {
  return supported && speedup() >= kMinSpeedup && bf16_relative_error <= kMaxRelativeError;
}

std::string Bf16Probe::describe() const {
  if (!supported) return "no bf16 matmul (" + unsupported_reason + ")";
  return str_cat("bf16 matmul ", fixed(bf16_gflops, "%.1f"), " GFLOP/s vs fp32 ",
                 fixed(fp32_gflops, "%.1f"), " GFLOP/s (", fixed(speedup(), "%.2f"),
                 "x), accumulation error ", fixed(bf16_relative_error, "%.1e"));
}

Bf16Probe measure_bf16(c10::Device device) {
  torch::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(20261123);
  auto random = [&](int64_t rows, int64_t cols) {
    return torch::randn({rows, cols}, generator, torch::kFloat32).to(device);
  };
  Bf16Probe p;
  // Accuracy first: it also finds out whether bf16 matmul exists here at all.
  auto a = random(64, 1024).to(torch::kBFloat16), b = random(1024, 64).to(torch::kBFloat16);
  try {
    auto got = torch::matmul(a, b).to(torch::kFloat64);
    auto exact = torch::matmul(a.to(torch::kFloat64), b.to(torch::kFloat64));
    p.bf16_relative_error = ((got - exact).norm() / exact.norm()).item<double>();
  } catch (const c10::Error& e) {
    p.supported = false;
    p.unsupported_reason = e.what_without_backtrace();
    return p;
  }
  // A CPU's fallback GEMM does 512^3 in ~40 ms; a GPU needs a larger problem to be timed at all.
  const int64_t n = device.is_cuda() ? 4096 : 512;
  auto x = random(n, n), y = random(n, n);
  p.fp32_gflops = matmul_gflops(x, y, 5);
  p.bf16_gflops = matmul_gflops(x.to(torch::kBFloat16), y.to(torch::kBFloat16), 3);
  return p;
}

Bf16Probe bf16_probe(c10::Device device) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, bool>, Bf16Probe> cache;
  const std::tuple<int, int, bool> key{static_cast<int>(device.type()), device.index(),
                                       at::globalContext().userEnabledMkldnn()};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, measure_bf16(device)).first;
  return it->second;
}

std::string describe_bf16_verdict(const Bf16Probe& probe) {
  return str_cat(probe.describe(), "; bf16 needs >= ", fixed(Bf16Probe::kMinSpeedup, "%.1f"),
                 "x and error <= ", fixed(Bf16Probe::kMaxRelativeError, "%.0e"));
}

void warn_if_bf16_slow(c10::Device device) {
  const Bf16Probe probe = bf16_probe(device);
  static std::once_flag warned;
  if (probe.supported && !probe.fast()) {
    std::call_once(warned, [&] {
      log::warn("bf16.enabled is true, but bf16 is slow or inexact on ", device.str(), ": ",
                probe.describe(),
                " (LibTorch's fast bf16 CPU kernels need AVX-512; see docs/training.md, "
                "\"Choosing bf16\"). Training in bf16 as asked; set \"bf16\": {\"enabled\": "
                "\"auto\"} or false to train in fp32 here.");
    });
  }
}

}  // namespace pstar::train
