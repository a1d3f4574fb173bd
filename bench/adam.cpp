// Host Adam throughput against torch::optim::AdamW and against the memory-bandwidth bound, both
// measured in the same run. The last line is one JSON object with the figures.
//
//   build/cpu-release/bench/pstar-bench-adam [--numel 67108864] [--iters 7] [--warmup 2]
//
// The kernel streams its arrays once, so its bound is the bandwidth of a STREAM-like triad divided
// by the bytes it moves per parameter. The triad and all threading use LibTorch's intra-op pool,
// which is OpenMP (libgomp) here, as the kernel's own loops are.
#include <emmintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "pstar/core/device.h"
#include "pstar/optim/host_adam.h"

namespace {

using Clock = std::chrono::steady_clock;
using pstar::optim::AdamHyper;
using pstar::optim::AdamSpan;
using pstar::optim::GradType;
using pstar::optim::ParamOutType;

struct Timing {
  double median_s;
  double best_s;
};

template <typename F>
Timing time_it(F&& run, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> seconds;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    run();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return {seconds[seconds.size() / 2], seconds.front()};
}

// a[i] = b[i] + s * c[i] over three double arrays far larger than the caches, best of `iters`,
// counted as STREAM does (24 bytes an element). With `nontemporal`, streaming stores skip the
// read-for-ownership of a's lines, so 24 bytes is then also the real traffic (with ordinary
// stores it is 32).
double triad_gbps(int64_t n, bool nontemporal, int iters) {
  constexpr int64_t kBlock = 4096;  // elements; keeps every thread's range 16-byte aligned
  n = (n + kBlock - 1) / kBlock * kBlock;
  const int64_t blocks = n / kBlock;
  torch::Tensor ta = torch::empty({n}, torch::kDouble);
  torch::Tensor tb = torch::empty({n}, torch::kDouble);
  torch::Tensor tc = torch::empty({n}, torch::kDouble);
  double* a = ta.data_ptr<double>();
  double* b = tb.data_ptr<double>();
  double* c = tc.data_ptr<double>();
  // First touch by the threads that will stream them.
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0 * kBlock; i < b1 * kBlock; ++i) {
      a[i] = 0.0;
      b[i] = 1.0;
      c[i] = 2.0;
    }
  });
  const double s = 3.0;
  const auto run = [&] {
    at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      const int64_t begin = b0 * kBlock;
      const int64_t end = b1 * kBlock;
      if (nontemporal) {
        const __m128d sv = _mm_set1_pd(s);
        for (int64_t i = begin; i < end; i += 2) {
          _mm_stream_pd(a + i, _mm_add_pd(_mm_load_pd(b + i), _mm_mul_pd(sv, _mm_load_pd(c + i))));
        }
        _mm_sfence();
      } else {
        for (int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
      }
    });
  };
  const Timing t = time_it(run, 1, iters);
  return 3.0 * 8.0 * static_cast<double>(n) / t.best_s / 1e9;
}

struct HostBuffers {
  torch::Tensor master, exp_avg, exp_avg_sq, grad, out;
  AdamSpan span;
};

HostBuffers make_host_buffers(int64_t numel, GradType grad_type, ParamOutType out_type) {
  HostBuffers b;
  b.master = torch::randn({numel});
  b.exp_avg = torch::zeros({numel});
  b.exp_avg_sq = torch::zeros({numel});
  const torch::ScalarType grad_dtype = grad_type == GradType::kF32    ? torch::kFloat
                                       : grad_type == GradType::kBF16 ? torch::kBFloat16
                                                                      : torch::kHalf;
  b.grad = (torch::randn({numel}) * 1e-2).to(grad_dtype);
  b.span.master = b.master.data_ptr<float>();
  b.span.exp_avg = b.exp_avg.data_ptr<float>();
  b.span.exp_avg_sq = b.exp_avg_sq.data_ptr<float>();
  b.span.grad = b.grad.data_ptr();
  b.span.grad_type = grad_type;
  b.span.param_out_type = out_type;
  if (out_type != ParamOutType::kNone) {
    b.out = torch::empty({numel}, out_type == ParamOutType::kBF16 ? torch::kBFloat16 : torch::kHalf);
    b.span.param_out = b.out.data_ptr();
  }
  b.span.numel = numel;
  return b;
}

AdamHyper bench_hyper() {
  AdamHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;  // AdamW's default, so both sides do the decay
  h.decoupled = true;
  return h;
}

Timing time_host_adam(const HostBuffers& b, int warmup, int iters) {
  AdamHyper h = bench_hyper();
  return time_it(
      [&] {
        ++h.step;
        pstar::optim::host_adam_step(h, 1.0f / 1024, b.span);
      },
      warmup, iters);
}

// The fp32 kernel's memory traffic with next to no arithmetic: the same four arrays, read 4 and
// write 3 streams, in place. What this reaches is the bandwidth an Adam-shaped loop can get, which
// need not equal the triad's (2 read + 1 write streams).
double same_shape_gbps(const HostBuffers& b, int iters) {
  const int64_t n = b.span.numel;
  float* p = b.span.master;
  float* m = b.span.exp_avg;
  float* v = b.span.exp_avg_sq;
  const float* g = static_cast<const float*>(b.span.grad);
  const auto run = [&] {
    at::parallel_for(0, n, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        m[i] = m[i] * 0.5f + g[i];
        v[i] = v[i] * 0.5f + g[i];
        p[i] = p[i] - g[i];
      }
    });
  };
  const Timing t = time_it(run, 1, iters);
  return 28.0 * static_cast<double>(n) / t.best_s / 1e9;
}

Timing time_torch_adamw(int64_t numel, int warmup, int iters) {
  torch::Tensor p = torch::randn({numel}).set_requires_grad(true);
  p.mutable_grad() = torch::randn({numel}) * 1e-2;
  const AdamHyper h = bench_hyper();
  torch::optim::AdamW optimizer(std::vector<torch::Tensor>{p},
                                torch::optim::AdamWOptions(h.lr).weight_decay(h.weight_decay));
  return time_it([&] { optimizer.step(); }, warmup, iters);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t numel = int64_t{64} << 20;
  int iters = 7, warmup = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--numel") {
      numel = std::stoll(argv[i + 1]);
    } else if (key == "--iters") {
      iters = std::stoi(argv[i + 1]);
    } else if (key == "--warmup") {
      warmup = std::stoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (numel < 1 || iters < 1 || warmup < 0) {
    std::fprintf(stderr, "--numel and --iters must be positive\n");
    return 2;
  }
  pstar::core::configure_threads();
  const int threads = omp_get_max_threads();
  const std::string isa = pstar::optim::host_adam_isa();

  // Bytes each parameter moves through memory in one step.
  // fp32 grads: read grad 4 + master 4 + exp_avg 4 + exp_avg_sq 4; write master, exp_avg,
  // exp_avg_sq 4 each.
  const int fp32_read = 4 + 4 + 4 + 4, fp32_write = 4 + 4 + 4;
  // bf16 grads + bf16 param copy: read grad 2 + 12; write 12 + param copy 2. Ordinary stores also
  // read the param copy's lines first (write-allocate): 2 more bytes of real traffic.
  const int bf16_read = 2 + 12, bf16_write = 12 + 2;
  const int fp32_bytes = fp32_read + fp32_write;
  const int bf16_bytes = bf16_read + bf16_write;

  // Triad arrays: 3 x 32Mi doubles (768 MiB), far beyond any cache. Measured before and after the
  // kernels, best of all, so that a busy moment on the machine does not lower the bound.
  const int64_t triad_n = int64_t{32} << 20;
  double triad_plain = triad_gbps(triad_n, false, 7);
  double triad_nt = triad_gbps(triad_n, true, 7);

  Timing ours{}, ours_bf16{};
  double shape = 0;
  {
    const HostBuffers b = make_host_buffers(numel, GradType::kF32, ParamOutType::kNone);
    ours = time_host_adam(b, warmup, iters);
    shape = same_shape_gbps(b, iters);
  }
  {
    const HostBuffers b = make_host_buffers(numel, GradType::kBF16, ParamOutType::kBF16);
    ours_bf16 = time_host_adam(b, warmup, iters);
  }
  const Timing torch_adamw = time_torch_adamw(numel, warmup, iters);
  triad_plain = std::max(triad_plain, triad_gbps(triad_n, false, 7));
  triad_nt = std::max(triad_nt, triad_gbps(triad_n, true, 7));
  const double triad = std::max(triad_plain, triad_nt);

  const double n = static_cast<double>(numel);
  const double ours_pps = n / ours.median_s;
  const double bf16_pps = n / ours_bf16.median_s;
  const double torch_pps = n / torch_adamw.median_s;
  const double fp32_bound = triad * 1e9 / fp32_bytes;
  const double bf16_bound = triad * 1e9 / bf16_bytes;

  std::printf("host Adam: %lld parameters, isa %s, %d threads, median (best) of %d after %d warm-up\n",
              static_cast<long long>(numel), isa.c_str(), threads, iters, warmup);
  std::printf("  triad bandwidth: %.2f GB/s ordinary stores, %.2f GB/s streaming stores; bound uses "
              "%.2f GB/s\n",
              triad_plain, triad_nt, triad);
  std::printf("  same-shape stream (fp32 kernel's arrays, 4 read + 3 write streams, no math): %.2f "
              "GB/s\n",
              shape);
  std::printf("  bytes per parameter: fp32 grads %d (read %d, write %d); bf16 grads + bf16 copy %d "
              "(read %d, write %d; +2 write-allocate)\n",
              fp32_bytes, fp32_read, fp32_write, bf16_bytes, bf16_read, bf16_write);
  std::printf("  %-38s %9s %9s %12s %9s %9s %9s\n", "case", "median s", "best s", "params/s",
              "vs torch", "of triad", "of shape");
  const auto row = [&](const char* name, const Timing& t, double bytes) {
    const double pps = n / t.median_s;
    std::printf("  %-38s %9.4f %9.4f %12.4g %8.2fx %8.1f%% %8.1f%%\n", name, t.median_s, t.best_s,
                pps, pps / torch_pps, 100.0 * pps * bytes / (triad * 1e9),
                100.0 * pps * bytes / (shape * 1e9));
  };
  row("torch::optim::AdamW (fp32)", torch_adamw, fp32_bytes);
  row("host_adam_step fp32 grads", ours, fp32_bytes);
  row("host_adam_step bf16 grads + bf16 copy", ours_bf16, bf16_bytes);

  const nlohmann::json result = {{"bench", "adam"},
                                 {"numel", numel},
                                 {"isa", isa},
                                 {"threads", threads},
                                 {"params_per_s", ours_pps},
                                 {"torch_adamw_params_per_s", torch_pps},
                                 {"speedup_vs_torch", ours_pps / torch_pps},
                                 {"triad_gbps", triad},
                                 {"bytes_per_param", fp32_bytes},
                                 {"fraction_of_bound", ours_pps / fp32_bound},
                                 {"bf16_params_per_s", bf16_pps},
                                 {"bf16_bytes_per_param", bf16_bytes},
                                 {"bf16_fraction_of_bound", bf16_pps / bf16_bound},
                                 {"same_shape_gbps", shape},
                                 {"fraction_of_same_shape", ours_pps * fp32_bytes / (shape * 1e9)}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
