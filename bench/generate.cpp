// pstar-bench-generate: generation's tokens/s on the CPU at batch 1 and 8 for a Qwen3-shaped
// decoder of 0.1-0.5B parameters (qwen3-0.6b's width, fewer layers), against the bound of Note
// [a sound generation bound], measured in the same run; and the same steps without the key/value
// cache, for what the cache saves.
//
// Note [a sound generation bound]
// Each decoding step (one new token for every row of the batch) reads every weight at least once:
// each projection's and the head's matrix is multiplied by the batch's activations (a token
// embedding only by row, so an untied embedding table is left out). No step can therefore be faster
// than those bytes at the machine's memory bandwidth, whatever the batch: the bound is
// batch × bandwidth / bytes tokens per second. The bandwidth is measured here, in the same run, by
// a read-only sum over 1 GiB with every core (bench/stream_kernels.h, as pstar-bench-adam's): the
// highest of two just before each round's steps (on a shared machine the bandwidth others leave
// changes from minute to minute, so each round has its own bound and ratio), and of five at the
// start for the printed figure. The KV cache's reads, the attention and the sampling are left out
// of the bound: they only make a step slower, so the bound stays an upper bound. A weight that
// stays in the last level cache between steps could beat it, but the smallest model measured has
// 400 MB of weights against a few tens of MB of cache.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "pstar/core/device.h"
#include "pstar/generate/generator.h"
#include "pstar/model/decoder.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/factory.h"
#include "pstar/optim/host_adam.h"
#include "stream_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;
using pstar::generate::GenerateHooks;
using pstar::generate::GenerateOptions;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The read bandwidth of every core, bytes/s: the best of `passes` sums over 1 GiB.
class ReadBandwidth {
 public:
  ReadBandwidth() {
    auto make = [&] { return static_cast<double*>(std::aligned_alloc(64, kDoubles * 8)); };
    b_.reset(make());
    std::unique_ptr<double[], decltype(&std::free)> a(make(), &std::free), c(make(), &std::free);
    pstar::bench::stream::init(a.get(), b_.get(), c.get(), kDoubles);
  }
  double measure(int passes) const {
    double best = 0;
    for (int i = 0; i < passes; ++i) {
      const auto t0 = Clock::now();
      volatile double sink = pstar::bench::stream::read(b_.get(), kDoubles);
      (void)sink;
      best = std::max(best, static_cast<double>(kDoubles * 8) / seconds(t0, Clock::now()));
    }
    return best;
  }

 private:
  static constexpr int64_t kDoubles = int64_t{1} << 27;
  std::unique_ptr<double[], decltype(&std::free)> b_{nullptr, &std::free};
};

struct Measured {
  double decode_tokens_per_s = 0;  // rows x steps after the first, over their time
  double prefill_s = 0;
};

// Generates `steps` tokens for `batch` prompts of `prompt` random ids; times the steps after the
// prefill (the first logits) separately from it.
Measured measure(pstar::model::CausalLM& model, int64_t batch, int64_t prompt, int64_t steps,
                 bool use_cache) {
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < prompt; ++i) ids.push_back((b * 7919 + i * 104729) % 32000 + 100);
    prompts.push_back(ids);
  }
  GenerateOptions o;
  o.max_new_tokens = steps;
  o.fixed_steps = true;
  o.use_cache = use_cache;
  std::vector<Clock::time_point> at;
  GenerateHooks hooks;
  hooks.on_logits = [&](int64_t, const at::Tensor&) { at.push_back(Clock::now()); };
  const auto start = Clock::now();
  pstar::generate::generate(model, prompts, o, hooks);
  Measured m;
  m.prefill_s = seconds(start, at.front());
  m.decode_tokens_per_s = static_cast<double>(batch * (steps - 1)) / seconds(at.front(), at.back());
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "qwen3-0.6b";
  int64_t layers = 16, prompt = 64, steps = 33, uncached_steps = 5, rounds = 3;
  pstar::bench::parse_options(
      argc, argv,
      "pstar-bench-generate [--preset qwen3-0.6b] [--layers 16] [--prompt 64] [--steps 33] "
      "[--uncached-steps 5] [--rounds 3]",
      {{"--preset", [&](const std::string& v) { preset = v; }},
       {"--layers", [&](const std::string& v) { layers = std::stoll(v); }},
       {"--prompt", [&](const std::string& v) { prompt = std::stoll(v); }},
       {"--steps", [&](const std::string& v) { steps = std::stoll(v); }},
       {"--uncached-steps", [&](const std::string& v) { uncached_steps = std::stoll(v); }},
       {"--rounds", [&](const std::string& v) { rounds = std::max<int64_t>(1, std::stoll(v)); }}});
  pstar::core::configure_runtime();
  pstar::bench::stream::select_isa(pstar::optim::host_adam_isa());
  const int threads = omp_get_max_threads();
  const ReadBandwidth reader;
  const double bandwidth = reader.measure(5);

  const pstar::model::DecoderConfig* shape = pstar::model::find_decoder_preset(preset);
  if (shape == nullptr) {
    std::fprintf(stderr, "unknown preset %s\n", preset.c_str());
    return 2;
  }
  pstar::model::DecoderConfig c = *shape;
  c.layers = layers;
  c.attention.layer_kinds.resize(static_cast<size_t>(layers), pstar::model::LayerKind::kFull);
  c.seq_len = prompt + steps;
  pstar::model::BuildOptions build;
  build.seed = 1;
  auto model = std::make_shared<pstar::model::Decoder>(c, build);
  model->eval();
  // Note [a sound generation bound]: every weight once a step, an untied embedding table by row.
  int64_t weights = 0;
  for (const auto& p : model->named_parameters())
    if (c.tie_word_embeddings || p.key() != "model.embed_tokens.weight")
      weights += p.value().numel();
  const double weight_bytes = 4.0 * static_cast<double>(weights);
  std::printf(
      "model: %s with %lld layers, %.1fM parameters (%.2f GB of fp32 weights read a step)\n",
      preset.c_str(), static_cast<long long>(layers), c.num_params() / 1e6, weight_bytes / 1e9);
  std::printf("memory read bandwidth: %.2f GB/s on %d threads (stream %s)\n", bandwidth / 1e9,
              threads, pstar::bench::stream::isa());

  nlohmann::json result = {{"preset", preset},
                           {"layers", layers},
                           {"params", c.num_params()},
                           {"weight_bytes", weight_bytes},
                           {"bandwidth_bytes_per_s", bandwidth},
                           {"threads", threads},
                           {"prompt", prompt},
                           {"steps", steps}};
  measure(*model, 1, 8, 3, true);  // warm-up: allocations and kernels
  for (const int64_t batch : {1, 8}) {
    // On a shared machine: the best of `rounds` (bench/README.md), the median beside it; each
    // round against the bandwidth measured just before it (Note [a sound generation bound]).
    struct Round {
      Measured m;
      double bound = 0;
    };
    std::vector<Round> runs;
    for (int64_t r = 0; r < rounds; ++r) {
      const double bound = static_cast<double>(batch) * reader.measure(2) / weight_bytes;
      runs.push_back({measure(*model, batch, prompt, steps, true), bound});
    }
    auto ratio = [](const Round& r) { return r.m.decode_tokens_per_s / r.bound; };
    std::sort(runs.begin(), runs.end(),
              [&](const Round& a, const Round& b) { return ratio(a) > ratio(b); });
    const Round& best = runs.front();
    const Round& median = runs[runs.size() / 2];
    std::printf(
        "batch %lld: %.2f tokens/s decoding against a bound of %.2f (%.2fx), the best ratio of "
        "%lld rounds; median %.2f tokens/s, %.2fx; prefill of %lld tokens a row %.2f s\n",
        static_cast<long long>(batch), best.m.decode_tokens_per_s, best.bound, ratio(best),
        static_cast<long long>(rounds), median.m.decode_tokens_per_s, ratio(median),
        static_cast<long long>(prompt), best.m.prefill_s);
    result["batch" + std::to_string(batch)] = {
        {"tokens_per_s", best.m.decode_tokens_per_s},
        {"bound_tokens_per_s", best.bound},
        {"of_bound", ratio(best)},
        {"median_tokens_per_s", median.m.decode_tokens_per_s},
        {"median_of_bound", ratio(median)},
        {"prefill_s", best.m.prefill_s}};
  }
  // The same steps without the cache: every step a forward over the prompt and what follows.
  const Measured cached = measure(*model, 1, prompt, uncached_steps, true);
  const Measured uncached = measure(*model, 1, prompt, uncached_steps, false);
  std::printf("batch 1 without the cache: %.2f tokens/s; the cache is %.1fx faster (%lld steps)\n",
              uncached.decode_tokens_per_s,
              cached.decode_tokens_per_s / uncached.decode_tokens_per_s,
              static_cast<long long>(uncached_steps));
  result["uncached"] = {{"tokens_per_s", uncached.decode_tokens_per_s},
                        {"cached_tokens_per_s", cached.decode_tokens_per_s}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
