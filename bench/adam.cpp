// Host Adam throughput against torch::optim::AdamW and against a sound memory-bandwidth bound, all
// measured in the same run. The last line is one JSON object with the figures.
//
//   build/cpu-release/bench/pstar-bench-adam [--numel 67108864] [--iters 7] [--warmup 2]
//
// Note [a sound adam bound]
// Host Adam streams its arrays once per step, so memory bandwidth bounds it. A bound is sound only
// if the kernel cannot beat it, so every figure here counts the bytes that really cross the memory
// bus ("real traffic"): an ordinary store to a line that was not read first makes the core read the
// line before writing it (write-allocate), a non-temporal store does not. The kernels that measure
// what the memory system gives these threads (stream_kernels.h): a STREAM triad a = b + s c and a
// copy a = b, each with non-temporal stores (24 and 16 bytes an element) and with ordinary ones (32
// and 24: write-allocate included), a read-only sum (8), and two same-shape loops, host Adam's own
// accesses without its arithmetic: fp32 gradients (16 bytes read and 12 written a parameter, in
// place: no write-allocate) and bf16 gradients with a separate bf16 copy (14 read, 14 written, and
// 2 of write-allocate for the copy). They run in the vector ISA host Adam uses, with its threads
// and its split of the arrays, from a file compiled with -O3 (stream_kernels.cpp; its non-temporal
// loops use vmovntpd, its ordinary loops are vectorised stores and no memcpy call: `objdump -d`
// shows it). Whether a CPU really reads a line before an ordinary store overwrites all of it cannot
// be seen without hardware counters (some CPUs skip the read for whole-line writes), so
// write-allocate bytes are counted where they favour the bound: in the bandwidth kernels' traffic
// (the bound is the most real traffic per second any of them reached, ordinary stores counted with
// their write-allocate), not in host Adam's. Host Adam moves 28 bytes a parameter with fp32
// gradients (everything it writes it has read: no write-allocate either way) and 28 with bf16
// gradients and a separate bf16 copy, plus 2 if the copy's lines are read before its ordinary
// stores overwrite them. Its fraction of the bound is reported both ways for bf16; the check that
// the bound holds (bound_exceeded) uses the bytes host Adam surely moves. Host Adam and the
// same-shape loop move the same bytes, so the median over the rounds of their adjacent runs' time
// ratio is reported too.
//
// Speculative host Adam (Note [speculative adam] in engine/hybrid_adam.h) writes a chunk's new
// state into a rollback slot instead of over its own, so its stores go to lines it has not read.
// Two more cases show what that costs: bf16 with param/grad reuse in place (the engine's ordinary
// host chunk: the gradient is read from the parameter array and the new parameters are written over
// it, 28 bytes a parameter, no write-allocate) and the same step redirected into a slot (the same
// 28 bytes, plus 14 of write-allocate where ordinary stores read the slot's lines first; host
// Adam's vector kernels store a redirected step non-temporally, Note [streaming stores]). Their
// time ratio, median over adjacent pairs, is the redirection's cost. A bandwidth kernel of the
// redirected step's shape with the same kind of stores (stream::redirected) joins the bound, so
// that the bound holds for the redirected step too.
//
// Every measurement runs once per round and the rounds repeat, so that all cases see the same
// moments of a shared machine; figures are the best run (as STREAM reports), medians are printed
// beside them. On the 2-core development machines, shared with other builds, a kernel's best run
// can be twice its median, so the ratio of host Adam to the same-shape run right before it is
// reported too: those two runs saw the same moment.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "pstar/core/device.h"
#include "pstar/optim/host_adam.h"
#include "stream_kernels.h"

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

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// 64-byte aligned, untouched: stream::init or the caller's fill touches it first.
template <typename T>
std::unique_ptr<T[], FreeDeleter> aligned_array(int64_t n) {
  const auto bytes = (static_cast<size_t>(n) * sizeof(T) + 63) / 64 * 64;
  return std::unique_ptr<T[], FreeDeleter>(static_cast<T*>(std::aligned_alloc(64, bytes)));
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
    b.out =
        torch::zeros({numel}, out_type == ParamOutType::kBF16 ? torch::kBFloat16 : torch::kHalf);
    b.span.param_out = b.out.data_ptr();
  }
  b.span.numel = numel;
  return b;
}

// The engine's bf16 host chunk under param/grad reuse: the gradient is read from the parameter
// array, and the new parameters are written over it (in place) or, redirected, into a slot's own
// arrays as speculation does. The slot's arrays are touched once here, so no case pays page faults.
struct ReuseBuffers {
  HostBuffers state;  // master, moments and the bf16 gradient that is also the parameter array
  torch::Tensor slot_master, slot_exp_avg, slot_exp_avg_sq, slot_param;
  AdamSpan in_place, redirected;
};

ReuseBuffers make_reuse_buffers(int64_t numel) {
  ReuseBuffers b;
  b.state = make_host_buffers(numel, GradType::kBF16, ParamOutType::kBF16);
  b.in_place = b.state.span;
  b.in_place.param_out = const_cast<void*>(b.in_place.grad);  // the new parameters over it
  b.slot_master = torch::zeros({numel});
  b.slot_exp_avg = torch::zeros({numel});
  b.slot_exp_avg_sq = torch::zeros({numel});
  b.slot_param = torch::zeros({numel}, torch::kBFloat16);
  b.redirected = b.in_place;
  b.redirected.master_out = b.slot_master.data_ptr<float>();
  b.redirected.exp_avg_out = b.slot_exp_avg.data_ptr<float>();
  b.redirected.exp_avg_sq_out = b.slot_exp_avg_sq.data_ptr<float>();
  b.redirected.param_out = b.slot_param.data_ptr();
  return b;
}

AdamHyper bench_hyper() {
  AdamHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;  // AdamW's default, so both sides do the decay
  h.decoupled = true;
  return h;
}

// A bandwidth kernel and the real bytes it moves per element (Note [a sound adam bound]).
struct Stream {
  const char* name;
  double real_bytes;    // per element, write-allocate included
  double stream_bytes;  // per element as STREAM counts (no write-allocate)
  Samples samples;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t numel = int64_t{64} << 20;
  int iters = 7, warmup = 2;
  pstar::bench::parse_options(argc, argv,
                              "pstar-bench-adam [--numel 67108864] [--iters 7] [--warmup 2]",
                              {{"--numel", [&](const std::string& v) { numel = std::stoll(v); }},
                               {"--iters", [&](const std::string& v) { iters = std::stoi(v); }},
                               {"--warmup", [&](const std::string& v) { warmup = std::stoi(v); }}});
  if (numel < 1 || iters < 1 || warmup < 0) {
    std::fprintf(stderr, "--numel and --iters must be positive, --warmup not negative\n");
    return 2;
  }
  pstar::core::configure_runtime();
  const int threads = omp_get_max_threads();
  const std::string isa = pstar::optim::host_adam_isa();
  namespace stream = pstar::bench::stream;
  stream::select_isa(isa);

  // Real traffic per parameter (Note [a sound adam bound]). fp32 gradients: read grad, master,
  // exp_avg, exp_avg_sq (4 each), write master, exp_avg, exp_avg_sq.
  const int fp32_read = 4 + 4 + 4 + 4, fp32_write = 4 + 4 + 4;
  // bf16 gradients and a bf16 parameter copy in its own array: read grad 2 + 12, write 12 + 2, and
  // the copy's lines are read before they are written (write-allocate): 2 more.
  const int bf16_read = 2 + 12, bf16_write = 12 + 2, bf16_write_allocate = 2;
  const int fp32_bytes = fp32_read + fp32_write;
  const int bf16_bytes = bf16_read + bf16_write;
  const int bf16_real_bytes = bf16_bytes + bf16_write_allocate;

  // Stream arrays: 3 x 32Mi doubles (768 MiB), far beyond any cache; the same-shape loop runs on
  // the fp32 case's own arrays.
  const int64_t n = int64_t{32} << 20;
  auto a = aligned_array<double>(n), b = aligned_array<double>(n), c = aligned_array<double>(n);
  stream::init(a.get(), b.get(), c.get(), n);
  const HostBuffers fp32 = make_host_buffers(numel, GradType::kF32, ParamOutType::kNone);
  const HostBuffers bf16 = make_host_buffers(numel, GradType::kBF16, ParamOutType::kBF16);
  const ReuseBuffers reuse = make_reuse_buffers(numel);
  torch::Tensor torch_param = torch::randn({numel}).set_requires_grad(true);
  torch_param.mutable_grad() = torch::randn({numel}) * 1e-2;
  AdamHyper hyper = bench_hyper();
  torch::optim::AdamW torch_adamw(
      std::vector<torch::Tensor>{torch_param},
      torch::optim::AdamWOptions(hyper.lr).weight_decay(hyper.weight_decay));

  std::vector<Stream> streams = {{"triad, non-temporal stores", 24, 24, {}},
                                 {"triad, ordinary stores", 32, 24, {}},
                                 {"copy, non-temporal stores", 16, 16, {}},
                                 {"copy, ordinary stores", 24, 16, {}},
                                 {"read only", 8, 8, {}}};
  const std::vector<std::function<void()>> stream_runs = {
      [&] { stream::triad(a.get(), b.get(), c.get(), 3.0, n, true); },
      [&] { stream::triad(a.get(), b.get(), c.get(), 3.0, n, false); },
      [&] { stream::copy(a.get(), b.get(), n, true); },
      [&] { stream::copy(a.get(), b.get(), n, false); },
      [&] {
        volatile double sink = stream::read(b.get(), n);
        (void)sink;
      }};

  // Each round runs every fast case kRepeats times (they take tens of milliseconds) and the torch
  // step once (hundreds).
  constexpr int kRepeats = 3;
  Samples shape, shape_bf16, ours, ours_bf16, torch_step, in_place, redirected, redirect_loop;
  int redirect_loop_bytes = 0;  // real bytes a parameter of the redirected loop
  const stream::Redirected redirect_arrays{
      reuse.redirected.master,         reuse.redirected.exp_avg,
      reuse.redirected.exp_avg_sq,     static_cast<const uint16_t*>(reuse.redirected.grad),
      reuse.redirected.master_out,     reuse.redirected.exp_avg_out,
      reuse.redirected.exp_avg_sq_out, static_cast<uint16_t*>(reuse.redirected.param_out)};
  std::vector<double> paired;           // same-shape time / the fp32 Adam time right after it
  std::vector<double> redirect_paired;  // redirected time / the in-place time right before it
  for (int round = 0; round < warmup + iters; ++round) {
    const bool keep = round >= warmup;
    Samples scratch;
    for (int r = 0; r < kRepeats; ++r) {
      for (size_t s = 0; s < streams.size(); ++s)
        (keep ? streams[s].samples : scratch).time(stream_runs[s]);
      // Each same-shape loop runs right before its Adam pass, so that the two see the same moments
      // of a shared machine.
      const auto same_shape = [&] {
        (keep ? shape : scratch).time([&] {
          stream::same_shape(fp32.span.master, fp32.span.exp_avg, fp32.span.exp_avg_sq,
                             static_cast<const float*>(fp32.span.grad), numel);
        });
      };
      ++hyper.step;
      same_shape();
      (keep ? ours : scratch).time([&] {
        pstar::optim::host_adam_step(hyper, 1.0f / 1024, fp32.span);
      });
      if (keep) paired.push_back(shape.seconds.back() / ours.seconds.back());
      (keep ? shape_bf16 : scratch).time([&] {
        stream::same_shape_bf16(bf16.span.master, bf16.span.exp_avg, bf16.span.exp_avg_sq,
                                static_cast<const uint16_t*>(bf16.span.grad),
                                static_cast<uint16_t*>(bf16.span.param_out), numel);
      });
      (keep ? ours_bf16 : scratch).time([&] {
        pstar::optim::host_adam_step(hyper, 1.0f / 1024, bf16.span);
      });
      // The redirected step reads what the in-place one wrote (the same arrays): both see the same
      // values' magnitudes, and the pair the same moment.
      (keep ? in_place : scratch).time([&] {
        pstar::optim::host_adam_step(hyper, 1.0f / 1024, reuse.in_place);
      });
      (keep ? redirect_loop : scratch).time([&] {
        redirect_loop_bytes = stream::redirected(redirect_arrays, numel);
      });
      (keep ? redirected : scratch).time([&] {
        pstar::optim::host_adam_step(hyper, 1.0f / 1024, reuse.redirected);
      });
      if (keep) redirect_paired.push_back(redirected.seconds.back() / in_place.seconds.back());
    }
    (keep ? torch_step : scratch).time([&] { torch_adamw.step(); });
  }

  const double np = static_cast<double>(numel), ns = static_cast<double>(n);
  const auto gbps = [](double bytes, double seconds) { return bytes / seconds / 1e9; };
  // Every bandwidth kernel with its real bytes per element (Note [a sound adam bound]).
  struct Bandwidth {
    std::string name;
    double real_bytes, counted_bytes;  // in all; counted: as STREAM counts, no write-allocate
    const Samples* samples;
    double best() const { return real_bytes / samples->best() / 1e9; }
    double median() const { return real_bytes / samples->median() / 1e9; }
  };
  std::vector<Bandwidth> kernels;
  for (const Stream& s : streams)
    kernels.push_back({s.name, s.real_bytes * ns, s.stream_bytes * ns, &s.samples});
  kernels.push_back({"same-shape loop", fp32_bytes * np, fp32_bytes * np, &shape});
  kernels.push_back({"bf16 same-shape loop", bf16_real_bytes * np, bf16_bytes * np, &shape_bf16});
  kernels.push_back({"redirected loop", redirect_loop_bytes * np, bf16_bytes * np, &redirect_loop});
  // The bound: the most real traffic per second any of them reached in its best run (STREAM's
  // convention: noise only slows a run down). Their median runs are printed beside.
  const Bandwidth* bound = &kernels.front();
  for (const Bandwidth& k : kernels)
    if (k.best() > bound->best()) bound = &k;
  const double bound_gbps = bound->best();
  const double ours_gbps = gbps(fp32_bytes * np, ours.best());
  const double bf16_gbps = gbps(bf16_bytes * np, ours_bf16.best());
  const double bf16_real_gbps = gbps(bf16_real_bytes * np, ours_bf16.best());
  const double redirected_gbps = gbps(bf16_bytes * np, redirected.best());
  const bool exceeded =
      ours_gbps > bound_gbps || bf16_gbps > bound_gbps || redirected_gbps > bound_gbps;
  std::sort(paired.begin(), paired.end());
  const double paired_fraction = paired[paired.size() / 2];
  std::sort(redirect_paired.begin(), redirect_paired.end());
  const double redirect_ratio = redirect_paired[redirect_paired.size() / 2];
  const double ours_pps = np / ours.best();
  const double bf16_pps = np / ours_bf16.best();
  const double torch_pps = np / torch_step.best();

  std::printf(
      "host Adam: %lld parameters, isa %s, %d threads; best (median) of %d rounds (%d runs of each "
      "fast case, 1 torch step per round) after %d warm-up rounds\n",
      static_cast<long long>(numel), isa.c_str(), threads, iters, kRepeats, warmup);
  std::printf(
      "  bandwidth kernels (%s, %d threads), GB/s of real traffic, best (median) run; as STREAM "
      "counts\n",
      stream::isa(), threads);
  for (const Bandwidth& k : kernels) {
    std::printf("    %-28s %6.2f (%6.2f); %6.2f\n", k.name.c_str(), k.best(), k.median(),
                k.counted_bytes / k.samples->best() / 1e9);
  }
  std::printf("  bound: %.2f GB/s of real traffic (%s)\n", bound_gbps, bound->name.c_str());
  std::printf(
      "  real traffic a parameter: fp32 grads %d (read %d, write %d); bf16 grads + bf16 copy %d "
      "(read %d, write %d), +%d if the copy's lines are read before they are written\n",
      fp32_bytes, fp32_read, fp32_write, bf16_bytes, bf16_read, bf16_write, bf16_write_allocate);
  std::printf("  %-38s %9s %9s %12s %9s %8s %9s\n", "case", "best s", "median s", "params/s",
              "vs torch", "GB/s", "of bound");
  const auto row = [&](const char* name, const Samples& t, double bytes) {
    const double pps = np / t.best();
    std::printf("  %-38s %9.4f %9.4f %12.4g %8.2fx %8.2f %8.1f%%\n", name, t.best(), t.median(),
                pps, pps / torch_pps, gbps(bytes * np, t.best()),
                100.0 * gbps(bytes * np, t.best()) / bound_gbps);
  };
  row("torch::optim::AdamW (fp32)", torch_step, fp32_bytes);
  row("host_adam_step fp32 grads", ours, fp32_bytes);
  row("host_adam_step bf16 grads + bf16 copy", ours_bf16, bf16_bytes);
  std::printf(
      "  bf16 with the copy's write-allocate: %.2f GB/s, %.1f%% of the bound; fp32 Adam against "
      "the "
      "same-shape run right before it: median %.1f%% over %zu pairs\n",
      bf16_real_gbps, 100.0 * bf16_real_gbps / bound_gbps, 100.0 * paired_fraction, paired.size());
  row("bf16 reuse, in place", in_place, bf16_bytes);
  row("bf16 reuse, into a slot", redirected, bf16_bytes);
  std::printf(
      "  into a slot (speculation) against in place: median time ratio %.3f over %zu pairs (%.3f "
      "if every store paid write-allocate: 42 bytes against 28)\n",
      redirect_ratio, redirect_paired.size(), 42.0 / 28.0);
  if (exceeded)
    std::printf("  host Adam moved more real traffic than the bound: the bound is not sound\n");

  const auto stream_gbps = [&](size_t i, bool real) {
    const Stream& s = streams[i];
    return gbps((real ? s.real_bytes : s.stream_bytes) * ns, s.samples.best());
  };
  const nlohmann::json result = {
      {"bench", "adam"},
      {"numel", numel},
      {"isa", isa},
      {"stream_isa", stream::isa()},
      {"threads", threads},
      {"params_per_s", ours_pps},
      {"torch_adamw_params_per_s", torch_pps},
      {"speedup_vs_torch", ours_pps / torch_pps},
      {"triad_gbps", stream_gbps(0, false)},
      {"triad_ordinary_gbps", stream_gbps(1, false)},
      {"triad_ordinary_real_gbps", stream_gbps(1, true)},
      {"copy_gbps", stream_gbps(2, false)},
      {"copy_ordinary_real_gbps", stream_gbps(3, true)},
      {"read_gbps", stream_gbps(4, false)},
      {"same_shape_gbps", gbps(fp32_bytes * np, shape.best())},
      {"bf16_same_shape_real_gbps", gbps(bf16_real_bytes * np, shape_bf16.best())},
      {"bound_gbps", bound_gbps},
      {"bound_kernel", bound->name},
      {"bytes_per_param", fp32_bytes},
      {"gbps", ours_gbps},
      {"fraction_of_bound", ours_gbps / bound_gbps},
      {"median_paired_fraction_of_same_shape", paired_fraction},
      {"bf16_params_per_s", bf16_pps},
      {"bf16_bytes_per_param", bf16_bytes},
      {"bf16_write_allocate_bytes_per_param", bf16_write_allocate},
      {"bf16_fraction_of_bound", bf16_gbps / bound_gbps},
      {"bf16_fraction_of_bound_with_write_allocate", bf16_real_gbps / bound_gbps},
      {"bound_exceeded", exceeded},
      {"reuse_in_place_params_per_s", np / in_place.best()},
      {"redirected_params_per_s", np / redirected.best()},
      {"median_redirected_over_in_place", redirect_ratio},
      {"median_params_per_s", np / ours.median()},
      {"median_torch_adamw_params_per_s", np / torch_step.median()}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
