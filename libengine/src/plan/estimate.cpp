#include "pstar/plan/estimate.h"

#include <algorithm>
#include <cctype>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/model/gpt_shape.h"

namespace pstar::plan {
namespace {

constexpr int64_t kGB = 1000 * 1000 * 1000;
constexpr int64_t kGiB = int64_t{1} << 30;
// Bytes host Adam moves per parameter and step (../shared/reference/peers.md: ~30 B).
constexpr double kHostAdamBytesPerParam = 30;

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

Evaluation evaluate_with(const FitInput& base, const Workload& w, int64_t hidden, int64_t layers,
                         int64_t heads) {
  PSTAR_INTERNAL_ASSERT(hidden > 0 && layers > 0 && heads > 0 && hidden % heads == 0);
  model::GptConfig shape;
  shape.hidden = hidden;
  shape.layers = layers;
  shape.heads = heads;
  shape.vocab_size = w.vocab;
  shape.seq_len = w.seq_len;
  Evaluation e;
  e.hidden = hidden;
  e.layers = layers;
  e.heads = heads;
  e.params = shape.num_params();
  e.layout = plan_layout(gpt_leaf_modules(shape),
                         LayoutOptions{w.chunk_size, w.chunk_size_search, w.use_cpu_embedding});
  e.payload = payload_bytes(w.elem_bytes, w.gradient_accumulation);
  GptActivationInput act;
  act.hidden = hidden;
  act.layers = layers;
  act.heads = heads;
  act.vocab = w.vocab;
  act.seq = w.seq_len;
  act.micro_batch = w.micro_batch;
  act.elem_bytes = w.elem_bytes;
  act.checkpointing = w.checkpointing;
  e.activations = estimate_gpt_activations(act);
  FitInput in = base;
  in.layout = e.layout;
  in.payload = e.payload;
  in.non_model = e.activations.peak;
  e.device_budget = in.device_budget;
  e.host_budget = in.host_budget;
  e.staging_per_rank = in.staging_per_rank;
  e.fit = check_fit(in);
  return e;
}

FitInput hardware_input(const Hardware& hw, const Workload& w) {
  FitInput in;
  in.world_size = hw.world();
  in.ranks_per_host = hw.gpus_per_node;
  in.device_budget = static_cast<int64_t>(kDefaultMemoryRatio * static_cast<double>(hw.gpu_memory));
  in.host_budget = static_cast<int64_t>(kDefaultMemoryRatio * static_cast<double>(hw.cpu_memory));
  // Pinned staging per GPU: one chunk's compute payload in each direction.
  in.staging_per_rank =
      2 * w.chunk_size * payload_bytes(w.elem_bytes, w.gradient_accumulation).compute();
  return in;
}

StepTime step_time(const Hardware& hw, const Workload& w, const Evaluation& e) {
  StepTime t;
  const double tokens = static_cast<double>(w.micro_batch * w.seq_len);
  // PatrickStar's count: 6·P per token, 8·P with activation recomputation.
  t.flops_per_gpu = (w.checkpointing ? 8.0 : 6.0) * static_cast<double>(e.params) * tokens;
  const double tflops = w.elem_bytes == 4 ? hw.tflops_32 : hw.tflops_16;
  t.compute_s = t.flops_per_gpu / (tflops * 1e12 * hw.mfu);
  // Host-resident chunks come up for forward and again for backward, and their gradients go
  // down: three compute payloads per chunk per step over PCIe.
  const double chunk_compute = static_cast<double>(e.layout.chunk_size * e.payload.compute());
  t.transfer_s =
      3.0 * static_cast<double>(e.fit.host_chunks) * chunk_compute / (hw.pcie_gbps * 1e9);
  // Host Adam for every rank of a node shares the node's memory bandwidth.
  const double host_params =
      static_cast<double>(e.fit.host_chunks * e.layout.chunk_size * hw.gpus_per_node);
  t.host_adam_s = host_params * kHostAdamBytesPerParam / (hw.cpu_mem_gbps * 1e9);
  // All-gather in forward and backward, reduce-scatter of gradients: 3·(N−1)/N of the model.
  const int64_t n = hw.world();
  if (n > 1) {
    const double bw =
        hw.nodes > 1 ? std::min(hw.link_gbps, hw.net_gbps / static_cast<double>(hw.gpus_per_node))
                     : hw.link_gbps;
    t.comm_s = 3.0 * static_cast<double>(n - 1) / static_cast<double>(n) *
               static_cast<double>(e.params * w.elem_bytes) / (bw * 1e9);
  }
  return t;
}

}  // namespace

Workload workload_for(const RunPlan& run, const model::GptConfig& shape) {
  const config::TrainConfig& config = run.config;
  Workload w;
  w.seq_len = shape.seq_len;
  w.vocab = shape.vocab_size;
  w.micro_batch = run.micro_batch;
  w.checkpointing = config.engine.activation_checkpointing;
  w.elem_bytes = run.compute_elem_bytes();
  w.precision = precision_name(run.precision);
  w.chunk_size = config.default_chunk_size;
  w.chunk_size_search = config.engine.chunk_size_search;
  w.use_cpu_embedding = config.use_cpu_embedding;
  w.gradient_accumulation = config.gradient_accumulation_steps > 1;
  return w;
}

const std::vector<GpuPreset>& gpu_presets() {
  // docs/estimate.md: NVIDIA datasheets for memory, dense tensor peaks and NVLink; PCIe achieved
  // rates from ../shared/reference/peers.md; host bandwidth of the usual server (DGX-1, DGX A100,
  // DGX H100/H200, a dual-channel DDR5 desktop) at ~60% of its theoretical peak.
  static const std::vector<GpuPreset> presets = {
      {"V100-32GB", 32 * kGiB, 125, 15.7, 12, 150, 80},
      {"A100-40GB", 40 * kGiB, 312, 156, 25, 300, 240},
      {"A100-80GB", 80 * kGiB, 312, 156, 25, 300, 240},
      {"H100-80GB", 80 * kGiB, 989, 494, 50, 450, 370},
      {"H200-141GB", 141 * kGB, 989, 494, 50, 450, 370},
      {"RTX4090-24GB", 24 * kGiB, 165, 82.6, 25, 25, 50},
  };
  return presets;
}

const GpuPreset* find_gpu_preset(const std::string& name) {
  std::string wanted = lower(name);
  wanted.erase(std::remove(wanted.begin(), wanted.end(), ' '), wanted.end());
  for (const auto& p : gpu_presets())
    if (lower(p.name) == wanted) return &p;
  return nullptr;
}

Evaluation evaluate(const Hardware& hw, const Workload& w, int64_t hidden, int64_t layers,
                    int64_t heads) {
  Evaluation e = evaluate_with(hardware_input(hw, w), w, hidden, layers, heads);
  e.time = step_time(hw, w, e);
  return e;
}

namespace {

int64_t search_layers(const FitInput& base, const Workload& w, int64_t hidden, int64_t heads,
                      int64_t limit) {
  auto fits = [&](int64_t layers) {
    return evaluate_with(base, w, hidden, layers, heads).fit.fits;
  };
  if (limit < 1 || !fits(1)) return 0;
  int64_t lo = 1, hi = 2;  // lo fits; find hi that does not
  while (hi <= limit && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  hi = std::min(hi, limit + 1);
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

FitInput budget_input(int64_t device_budget, int64_t host_budget) {
  FitInput in;
  in.device_budget = device_budget;
  in.host_budget = host_budget;
  return in;
}

}  // namespace

Evaluation evaluate_budgets(int64_t device_budget, int64_t host_budget, const Workload& w,
                            int64_t hidden, int64_t layers, int64_t heads) {
  return evaluate_with(budget_input(device_budget, host_budget), w, hidden, layers, heads);
}

int64_t max_layers(const Hardware& hw, const Workload& w, int64_t hidden, int64_t heads,
                   int64_t limit) {
  return search_layers(hardware_input(hw, w), w, hidden, heads, limit);
}

int64_t max_layers_budgets(int64_t device_budget, int64_t host_budget, const Workload& w,
                           int64_t hidden, int64_t heads, int64_t limit) {
  return search_layers(budget_input(device_budget, host_budget), w, hidden, heads, limit);
}

Estimate estimate_largest(const Hardware& hw, const Workload& w, std::optional<int64_t> hidden,
                          std::optional<int64_t> heads) {
  Estimate out;
  auto consider = [&](int64_t h, int64_t a, int64_t layers) {
    if (layers < 1) return;
    Evaluation e = evaluate(hw, w, h, layers, a);
    if (e.params > out.best.params) out.best = e;
  };
  if (hidden) {
    const int64_t h = *hidden;
    const int64_t a = heads.value_or(std::max<int64_t>(1, h / 128));
    consider(h, a, max_layers(hw, w, h, a));
    out.how = str_cat("layers searched at hidden ", h, ", heads ", a);
  } else {
    // Widths: the ladder's, and a grid with head size 128; depth between hidden/160 and
    // hidden/32, the range of published GPT shapes (docs/estimate.md).
    std::vector<std::pair<int64_t, int64_t>> widths;
    for (const auto& p : model::gpt_presets())
      if (p.vocab_size == 50257) widths.emplace_back(p.hidden, p.heads);
    for (int64_t h = 256; h <= 65536; h += h < 4096 ? 256 : 512)
      widths.emplace_back(h, std::max<int64_t>(1, h / 128));
    for (const auto& [h, a] : widths) {
      const int64_t lo = std::max<int64_t>(2, h / 160);
      const int64_t layers = max_layers(hw, w, h, a, std::max<int64_t>(lo, h / 32));
      if (layers >= lo) consider(h, a, layers);
    }
    out.how = "preset ladder widths and a grid of widths, layers between hidden/160 and hidden/32";
  }
  for (const auto& p : model::gpt_presets()) {
    if (p.vocab_size != 50257) continue;
    Evaluation e = evaluate(hw, w, p.hidden, p.layers, p.heads);
    out.ladder.push_back(LadderEntry{p.name, e.params, e.fit.fits});
  }
  return out;
}

std::vector<DeepSpeedEstimate> deepspeed_estimates(const Hardware& hw, int64_t hidden,
                                                   int64_t vocab) {
  // ../shared/reference/peers.md: DeepSpeed's estimators with f = 1.5; L the largest layer.
  const double f = 1.5;
  const double gpu = static_cast<double>(hw.gpu_memory);
  const double cpu = static_cast<double>(hw.cpu_memory);
  std::vector<DeepSpeedEstimate> out;
  DeepSpeedEstimate z2;
  z2.name = "DeepSpeed ZeRO-2 + CPU offload";
  z2.gpu_formula = "2P";
  z2.cpu_formula = "P*max(4*gpus_per_node,16)*1.5";
  const double per_param_cpu = static_cast<double>(std::max<int64_t>(4 * hw.gpus_per_node, 16)) * f;
  z2.max_params = static_cast<int64_t>(std::min(gpu / 2, cpu / per_param_cpu));
  out.push_back(z2);
  DeepSpeedEstimate z3;
  z3.name = "DeepSpeed ZeRO-3 + param/optimizer offload";
  z3.gpu_formula = "4L";
  z3.cpu_formula = "18*P*1.5/nodes";
  const int64_t largest_layer = std::max(vocab * hidden, 4 * hidden * hidden + 4 * hidden);
  z3.max_params = 4.0 * static_cast<double>(largest_layer) > gpu
                      ? 0
                      : static_cast<int64_t>(cpu * static_cast<double>(hw.nodes) / (18 * f));
  out.push_back(z3);
  return out;
}

}  // namespace pstar::plan
