// pstar-bench-adam-kernel: the CUDA Adam kernel (pstar::cuda::adam_step) and the gradient sum of
// squares (pstar::cuda::grad_sq_sum) over --numel parameters, in GB/s against two bounds: a
// device-to-device copy measured in the same run, and the device's peak memory bandwidth (2 x
// memory clock x bus width). Without a CUDA device it says so and exits
// 0. See bench/README.md. It needs only pstar_cuda (no LibTorch, no JSON library), so that
// cmake/cuda-standalone/ can build it on a GPU machine without the Debian packages.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/cuda/adam.h"
#include "pstar/cuda/device.h"
#include "pstar/cuda/memory.h"
#include "pstar/cuda/sq_sum.h"
#include "pstar/cuda/stream.h"

namespace {

using pstar::optim::GradType;
using pstar::optim::ParamOutType;

// A JSON string literal, escaped.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x",
                    static_cast<unsigned>(static_cast<unsigned char>(ch)));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  return buf;
}

struct Times {
  std::vector<double> seconds;
  double best() const { return *std::min_element(seconds.begin(), seconds.end()); }
  double median() const {
    std::vector<double> s = seconds;
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  }
};

template <typename Fn>
Times time_on(pstar::cuda::Stream& stream, int warmup, int iters, Fn&& fn) {
  pstar::cuda::Event start, end;
  for (int i = 0; i < warmup; ++i) fn();
  Times t;
  for (int i = 0; i < iters; ++i) {
    start.record(stream);
    fn();
    end.record(stream);
    end.synchronize();
    t.seconds.push_back(pstar::cuda::Event::elapsed_ms(start, end) / 1e3);
  }
  return t;
}

int run(int64_t numel, int iters, int warmup) {
  namespace cuda = pstar::cuda;
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device: %s\n", cuda::no_device_reason().c_str());
    std::printf("{\"skipped\":\"no CUDA device\"}\n");
    return 0;
  }
  const cuda::DeviceInfo info = cuda::device_info(0);
  std::printf("device: %s\n", cuda::describe_device(0).c_str());

  // master, exp_avg, exp_avg_sq and an fp32 gradient (4 bytes each), a bf16 gradient and a bf16
  // parameter copy (2 each), each padded by 256 bytes so that a span can start one element in.
  const int64_t pad = 256;
  const int64_t f32_bytes = numel * 4 + pad;
  const int64_t bf16_bytes = numel * 2 + pad;
  cuda::DeviceArena arena(4 * f32_bytes + 2 * bf16_bytes);
  std::printf("arena: %s for %lld parameters\n",
              pstar::format_bytes(arena.capacity_bytes()).c_str(), static_cast<long long>(numel));
  cuda::DeviceBlock master = arena.allocate(f32_bytes);
  cuda::DeviceBlock exp_avg = arena.allocate(f32_bytes);
  cuda::DeviceBlock exp_avg_sq = arena.allocate(f32_bytes);
  cuda::DeviceBlock grad_f32 = arena.allocate(f32_bytes);
  cuda::DeviceBlock grad_bf16 = arena.allocate(bf16_bytes);
  cuda::DeviceBlock param_bf16 = arena.allocate(bf16_bytes);
  cuda::Stream stream;
  // 0x3C in every byte: small positive finite values in fp32 (0.0115), bf16 and fp16.
  for (const cuda::DeviceBlock* b :
       {&master, &exp_avg, &exp_avg_sq, &grad_f32, &grad_bf16, &param_bf16}) {
    cuda::memset_async(b->data(), 0x3C, b->bytes(), stream);
  }
  stream.synchronize();

  // Baseline: a device-to-device copy of the fp32 gradient over the master (read + write).
  const int64_t copy_bytes = numel * 4;
  const Times copy = time_on(stream, warmup, iters, [&] {
    cuda::copy_d2d_async(master.data(), grad_f32.data(), copy_bytes, stream);
  });
  const double copy_gbps = 2.0 * static_cast<double>(copy_bytes) / copy.best() / 1e9;
  const double peak_gbps = info.peak_memory_bandwidth_bytes_per_s / 1e9;
  std::printf("bounds: device-to-device copy %.1f GB/s (median %.1f), peak %.1f GB/s\n", copy_gbps,
              2.0 * static_cast<double>(copy_bytes) / copy.median() / 1e9, peak_gbps);
  cuda::memset_async(master.data(), 0x3C, master.bytes(), stream);

  struct Case {
    const char* name;
    GradType grad;
    ParamOutType out;
    bool reuse;      // the gradient is in the parameter copy's buffer
    int64_t offset;  // elements: 1 misaligns every buffer, forcing the one-element path
  };
  const Case cases[] = {
      {"fp32 grad, no copy (fp32 training)", GradType::kF32, ParamOutType::kNone, false, 0},
      {"bf16 grad in the bf16 param (reuse)", GradType::kBF16, ParamOutType::kBF16, true, 0},
      {"bf16 reuse, misaligned by 1 element", GradType::kBF16, ParamOutType::kBF16, true, 1},
  };
  pstar::optim::AdamHyper hyper;
  hyper.weight_decay = 0.01f;
  std::string results;
  std::printf("  %-38s %6s %9s %9s %9s %8s %8s\n", "case", "path", "best ms", "median ms", "GB/s",
              "vs copy", "vs peak");
  for (const Case& c : cases) {
    auto at = [&](const cuda::DeviceBlock& b, int64_t elem) {
      return static_cast<char*>(b.data()) + c.offset * elem;
    };
    cuda::AdamSpanDevice span;
    span.master = reinterpret_cast<float*>(at(master, 4));
    span.exp_avg = reinterpret_cast<float*>(at(exp_avg, 4));
    span.exp_avg_sq = reinterpret_cast<float*>(at(exp_avg_sq, 4));
    span.grad_type = c.grad;
    span.grad = c.grad == GradType::kF32 ? at(grad_f32, 4)
                : c.reuse                ? at(param_bf16, 2)
                                         : at(grad_bf16, 2);
    span.param_out_type = c.out;
    span.param_out = c.out == ParamOutType::kNone ? nullptr : at(param_bf16, 2);
    span.numel = numel;
    int64_t step = 0;
    const Times t = time_on(stream, warmup, iters, [&] {
      hyper.step = ++step;
      cuda::adam_step(span, hyper, 1.0f, stream);
    });
    // 24 bytes of optimizer state read and written, the gradient read, the copy written.
    const int64_t bytes_per_param =
        24 + (c.grad == GradType::kF32 ? 4 : 2) + (c.out == ParamOutType::kNone ? 0 : 2);
    const double gbps = static_cast<double>(bytes_per_param * numel) / t.best() / 1e9;
    const bool vectorized = cuda::detail::adam_vectorized(span);
    std::printf("  %-38s %6s %9.3f %9.3f %9.1f %7.1f%% %7.1f%%\n", c.name,
                vectorized ? "vec4" : "scalar", t.best() * 1e3, t.median() * 1e3, gbps,
                100.0 * gbps / copy_gbps, peak_gbps > 0 ? 100.0 * gbps / peak_gbps : 0.0);
    results += std::string(results.empty() ? "" : ",") + "{\"case\":" + json_string(c.name) +
               ",\"vectorized\":" + (vectorized ? "true" : "false") +
               ",\"bytes_per_param\":" + std::to_string(bytes_per_param) +
               ",\"best_s\":" + json_number(t.best()) + ",\"median_s\":" + json_number(t.median()) +
               ",\"gb_per_s\":" + json_number(gbps) +
               ",\"fraction_of_copy\":" + json_number(gbps / copy_gbps) +
               ",\"fraction_of_peak\":" + json_number(peak_gbps > 0 ? gbps / peak_gbps : 0.0) + "}";
  }

  // The gradient sum of squares: reads the gradient once. Each call blocks until its result is on
  // the host, so the events time the whole call: kernel, copy of the block sums, host sum.
  struct SqSumCase {
    const char* name;
    GradType grad;
    const cuda::DeviceBlock* buffer;
  };
  const SqSumCase sq_cases[] = {{"fp32 grad", GradType::kF32, &grad_f32},
                                {"bf16 grad", GradType::kBF16, &grad_bf16}};
  std::string sq_results;
  std::printf("  %-38s %6s %9s %9s %9s %8s %8s\n", "sum of squares", "", "best ms", "median ms",
              "GB/s", "vs copy", "vs peak");
  for (const SqSumCase& c : sq_cases) {
    double sum = 0;
    const Times t = time_on(stream, warmup, iters, [&] {
      sum = cuda::grad_sq_sum(c.buffer->data(), c.grad, numel, stream);
    });
    const int64_t bytes_per_elem = c.grad == GradType::kF32 ? 4 : 2;
    const double gbps = static_cast<double>(bytes_per_elem * numel) / t.best() / 1e9;
    std::printf("  %-38s %6s %9.3f %9.3f %9.1f %7.1f%% %7.1f%%\n", c.name, "", t.best() * 1e3,
                t.median() * 1e3, gbps, 100.0 * gbps / copy_gbps,
                peak_gbps > 0 ? 100.0 * gbps / peak_gbps : 0.0);
    sq_results += std::string(sq_results.empty() ? "" : ",") + "{\"case\":" + json_string(c.name) +
                  ",\"bytes_per_elem\":" + std::to_string(bytes_per_elem) +
                  ",\"best_s\":" + json_number(t.best()) +
                  ",\"median_s\":" + json_number(t.median()) +
                  ",\"gb_per_s\":" + json_number(gbps) +
                  ",\"fraction_of_copy\":" + json_number(gbps / copy_gbps) +
                  ",\"fraction_of_peak\":" + json_number(peak_gbps > 0 ? gbps / peak_gbps : 0.0) +
                  ",\"sum\":" + json_number(sum) + "}";
  }
  const std::string result = "{\"device\":" + json_string(info.name) +
                             ",\"numel\":" + std::to_string(numel) +
                             ",\"copy_gb_per_s\":" + json_number(copy_gbps) +
                             ",\"peak_gb_per_s\":" + json_number(peak_gbps) + ",\"cases\":[" +
                             results + "],\"sq_sum\":[" + sq_results + "]}";
  std::printf("%s\n", result.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t numel = int64_t{1} << 28;  // 256M parameters: 5 GiB of buffers
  int iters = 10;
  int warmup = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--numel" && i + 1 < argc) {
      numel = std::atoll(argv[++i]);
    } else if (arg == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (arg == "--warmup" && i + 1 < argc) {
      warmup = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--numel N] [--iters N] [--warmup N]\n", argv[0]);
      return 2;
    }
  }
  if (numel <= 0 || iters <= 0 || warmup < 0) {
    std::fprintf(stderr, "--numel and --iters must be positive, --warmup not negative\n");
    return 2;
  }
  try {
    return run(numel, iters, warmup);
  } catch (const pstar::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
