// Host Adam throughput against torch::optim::AdamW and against the memory-bandwidth bound, all
// measured in the same run. The last line is one JSON object with the figures.
//
//   build/cpu-release/bench/pstar-bench-adam [--numel 67108864] [--iters 7] [--warmup 2]
//
// The kernel streams its arrays once, so its bound is the bandwidth of a STREAM-like triad divided
// by the bytes it moves per parameter. Every measurement runs once per round and the rounds repeat,
// so that all cases see the same moments of a shared machine; figures are the best round (as
// STREAM reports), medians are printed beside them. The triad and the same-shape loop run on
// LibTorch's intra-op pool, which is OpenMP (libgomp) here, as the kernel's own loops are.
#include <emmintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "pstar/core/device.h"
#include "pstar/optim/host_adam.h"

namespace {

using Clock = std::chrono::steady_clock;
using pstar::optim::AdamHyper;
using pstar::optim::AdamSpan;
using pstar::optim::GradType;
using pstar::optim::ParamOutType;

struct Samples {
  std::vector<double> seconds;

  template <typename F>
  void time(F&& run) {
    const auto start = Clock::now();
    run();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  double best() const { return *std::min_element(seconds.begin(), seconds.end()); }
  double median() const {
    std::vector<double> sorted = seconds;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }
};

// a[i] = b[i] + s * c[i] over three double arrays far larger than the caches, counted as STREAM
// does (24 bytes an element). With streaming stores nothing reads a's lines first, so 24 bytes is
// also the real traffic; with ordinary stores it is 32 (write-allocate).
class Triad {
 public:
  explicit Triad(int64_t n) {
    n_ = (n + kBlock - 1) / kBlock * kBlock;
    a_ = torch::empty({n_}, torch::kDouble);
    b_ = torch::empty({n_}, torch::kDouble);
    c_ = torch::empty({n_}, torch::kDouble);
    double* a = a_.data_ptr<double>();
    double* b = b_.data_ptr<double>();
    double* c = c_.data_ptr<double>();
    // First touch by the threads that will stream them.
    at::parallel_for(0, n_ / kBlock, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0 * kBlock; i < b1 * kBlock; ++i) {
        a[i] = 0.0;
        b[i] = 1.0;
        c[i] = 2.0;
      }
    });
  }

  void run(bool nontemporal) {
    double* a = a_.data_ptr<double>();
    const double* b = b_.data_ptr<double>();
    const double* c = c_.data_ptr<double>();
    const double s = 3.0;
    at::parallel_for(0, n_ / kBlock, 1, [&](int64_t b0, int64_t b1) {
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
  }

  double bytes() const { return 24.0 * static_cast<double>(n_); }

 private:
  static constexpr int64_t kBlock = 4096;  // elements; keeps every thread's range 16-byte aligned
  int64_t n_ = 0;
  torch::Tensor a_, b_, c_;
};

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
    b.out =
        torch::empty({numel}, out_type == ParamOutType::kBF16 ? torch::kBFloat16 : torch::kHalf);
    b.span.param_out = b.out.data_ptr();
  }
  b.span.numel = numel;
  return b;
}

// The fp32 kernel's memory traffic with next to no arithmetic: the same four arrays, 4 read and
// 3 write streams, in place. What it reaches is the bandwidth an Adam-shaped loop can get, which
// need not equal the triad's (2 read + 1 write streams).
void same_shape_pass(const HostBuffers& b) {
  float* p = b.span.master;
  float* m = b.span.exp_avg;
  float* v = b.span.exp_avg_sq;
  const float* g = static_cast<const float*>(b.span.grad);
  at::parallel_for(0, b.span.numel, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      m[i] = m[i] * 0.5f + g[i];
      v[i] = v[i] * 0.5f + g[i];
      p[i] = p[i] - g[i];
    }
  });
}

AdamHyper bench_hyper() {
  AdamHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;  // AdamW's default, so both sides do the decay
  h.decoupled = true;
  return h;
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
    std::fprintf(stderr, "--numel and --iters must be positive, --warmup not negative\n");
    return 2;
  }
  pstar::core::configure_runtime();
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

  // Triad arrays: 3 x 32Mi doubles (768 MiB), far beyond any cache.
  Triad triad(int64_t{32} << 20);
  const HostBuffers fp32 = make_host_buffers(numel, GradType::kF32, ParamOutType::kNone);
  const HostBuffers bf16 = make_host_buffers(numel, GradType::kBF16, ParamOutType::kBF16);
  torch::Tensor torch_param = torch::randn({numel}).set_requires_grad(true);
  torch_param.mutable_grad() = torch::randn({numel}) * 1e-2;
  AdamHyper hyper = bench_hyper();
  torch::optim::AdamW torch_adamw(
      std::vector<torch::Tensor>{torch_param},
      torch::optim::AdamWOptions(hyper.lr).weight_decay(hyper.weight_decay));

  // Each round runs every fast case kRepeats times (they take tens of milliseconds) and the torch
  // step once (hundreds).
  constexpr int kRepeats = 3;
  Samples triad_plain, triad_nt, shape, ours, ours_bf16, torch_step;
  for (int round = 0; round < warmup + iters; ++round) {
    const bool keep = round >= warmup;
    Samples scratch;
    for (int r = 0; r < kRepeats; ++r) {
      (keep ? triad_plain : scratch).time([&] { triad.run(false); });
      (keep ? triad_nt : scratch).time([&] { triad.run(true); });
      ++hyper.step;
      (keep ? ours : scratch).time([&] {
        pstar::optim::host_adam_step(hyper, 1.0f / 1024, fp32.span);
      });
      (keep ? ours_bf16 : scratch).time([&] {
        pstar::optim::host_adam_step(hyper, 1.0f / 1024, bf16.span);
      });
      (keep ? shape : scratch).time([&] { same_shape_pass(fp32); });
    }
    (keep ? torch_step : scratch).time([&] { torch_adamw.step(); });
  }

  const double n = static_cast<double>(numel);
  const double triad_gbps = triad.bytes() / std::min(triad_plain.best(), triad_nt.best()) / 1e9;
  const double shape_gbps = fp32_bytes * n / shape.best() / 1e9;
  const double ours_pps = n / ours.best();
  const double bf16_pps = n / ours_bf16.best();
  const double torch_pps = n / torch_step.best();
  const double fp32_bound = triad_gbps * 1e9 / fp32_bytes;
  const double bf16_bound = triad_gbps * 1e9 / bf16_bytes;

  std::printf(
      "host Adam: %lld parameters, isa %s, %d threads; best (median) of %d rounds (%d runs "
      "of each fast case, 1 torch step per round) after %d warm-up rounds\n",
      static_cast<long long>(numel), isa.c_str(), threads, iters, kRepeats, warmup);
  std::printf("  triad: %.2f (%.2f) GB/s ordinary stores, %.2f (%.2f) GB/s streaming stores\n",
              triad.bytes() / triad_plain.best() / 1e9, triad.bytes() / triad_plain.median() / 1e9,
              triad.bytes() / triad_nt.best() / 1e9, triad.bytes() / triad_nt.median() / 1e9);
  std::printf(
      "  same-shape stream (the fp32 arrays, 4 read + 3 write streams, no math): %.2f (%.2f) "
      "GB/s\n",
      shape_gbps, fp32_bytes * n / shape.median() / 1e9);
  std::printf(
      "  bytes per parameter: fp32 grads %d (read %d, write %d); bf16 grads + bf16 copy %d "
      "(read %d, write %d; +2 write-allocate)\n",
      fp32_bytes, fp32_read, fp32_write, bf16_bytes, bf16_read, bf16_write);
  std::printf("  bound = %.2f GB/s triad / bytes per parameter\n", triad_gbps);
  std::printf("  %-38s %9s %9s %12s %9s %9s %9s\n", "case", "best s", "median s", "params/s",
              "vs torch", "of bound", "of shape");
  const auto row = [&](const char* name, const Samples& t, double bytes) {
    const double pps = n / t.best();
    std::printf("  %-38s %9.4f %9.4f %12.4g %8.2fx %8.1f%% %8.1f%%\n", name, t.best(), t.median(),
                pps, pps / torch_pps, 100.0 * pps * bytes / (triad_gbps * 1e9),
                100.0 * pps * bytes / (shape_gbps * 1e9));
  };
  row("torch::optim::AdamW (fp32)", torch_step, fp32_bytes);
  row("host_adam_step fp32 grads", ours, fp32_bytes);
  row("host_adam_step bf16 grads + bf16 copy", ours_bf16, bf16_bytes);

  const nlohmann::json result = {
      {"bench", "adam"},
      {"numel", numel},
      {"isa", isa},
      {"threads", threads},
      {"params_per_s", ours_pps},
      {"torch_adamw_params_per_s", torch_pps},
      {"speedup_vs_torch", ours_pps / torch_pps},
      {"triad_gbps", triad_gbps},
      {"bytes_per_param", fp32_bytes},
      {"fraction_of_bound", ours_pps / fp32_bound},
      {"bf16_params_per_s", bf16_pps},
      {"bf16_bytes_per_param", bf16_bytes},
      {"bf16_fraction_of_bound", bf16_pps / bf16_bound},
      {"same_shape_gbps", shape_gbps},
      {"fraction_of_same_shape", ours_pps * fp32_bytes / (shape_gbps * 1e9)},
      {"median_params_per_s", n / ours.median()},
      {"median_torch_adamw_params_per_s", n / torch_step.median()}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
