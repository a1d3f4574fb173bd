#include "pstar/plan/estimate.h"

#include <algorithm>
#include <cctype>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/family.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/plan/activations.h"

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

Evaluation evaluate_with(const FitInput& base, const Workload& w, const model::ModelShape& shape) {
  Evaluation e;
  e.shape = shape;
  e.params = shape.num_params();
  e.layout = plan_layout(
      model_leaf_modules(shape),
      LayoutOptions{w.chunk_size, w.chunk_size_search, w.use_cpu_embedding, base.world_size});
  e.payload = payload_bytes(w.elem_bytes, w.gradient_accumulation);
  e.activations = estimate_model_activations(shape, w.micro_batch, w.elem_bytes, w.checkpointing);
  FitInput in = base;
  // Pinned staging per GPU (hardware_input): the largest chunk's compute payload each way.
  if (in.staging_per_rank > 0)
    in.staging_per_rank = 2 * e.layout.largest_chunk() * e.payload.compute();
  // Ranks on GPUs of their own reduce over NCCL, through a flat fp32 buffer on the device (Note
  // [flat gathers] in engine/group_sync.h).
  if (in.device_reduce_buffer > 0)
    in.device_reduce_buffer = reduce_buffer_bytes(in.world_size, e.layout.largest_chunk());
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
  in.nvme_capacity = hw.nvme_capacity;
  if (in.world_size > 1) in.device_reduce_buffer = reduce_buffer_bytes(in.world_size, w.chunk_size);
  return in;
}

StepTime step_time(const Hardware& hw, const Workload& w, const Evaluation& e) {
  StepTime t;
  const double tokens = static_cast<double>(w.micro_batch * e.shape.seq_len());
  t.flops_per_gpu = train_flops_per_token(e.shape, w.checkpointing) * tokens;
  const double tflops = w.elem_bytes == 4 ? hw.tflops_32 : hw.tflops_16;
  t.compute_s = t.flops_per_gpu / (tflops * 1e12 * hw.mfu);
  // Chunks whose compute payload lives on the host come up for forward and again for backward,
  // and their gradients go down: three compute payloads per chunk per step over PCIe. An NVMe
  // chunk whose compute payload stays on the device sends its gradient down for host Adam and
  // takes the updated parameters back: two.
  const auto compute = static_cast<double>(e.payload.compute());  // per element
  const auto host_compute =
      static_cast<double>(e.fit.owned.host_elements + e.fit.owned.nvme_host_elements);
  t.transfer_s =
      (3.0 * host_compute + 2.0 * static_cast<double>(e.fit.owned.nvme_device_elements)) * compute /
      (hw.pcie_gbps * 1e9);
  // Host Adam (every chunk but the device's static ones) for every rank of a node shares the
  // node's memory bandwidth.
  const double host_params =
      static_cast<double>((e.fit.owned.host_elements + e.fit.owned.nvme_host_elements +
                           e.fit.owned.nvme_device_elements) *
                          hw.gpus_per_node);
  t.host_adam_s = host_params * kHostAdamBytesPerParam / (hw.cpu_mem_gbps * 1e9);
  // Note [nvme time].
  if (e.fit.nvme_chunks > 0) {
    PSTAR_INTERNAL_ASSERT(hw.nvme_read_gbps > 0 && hw.nvme_write_gbps > 0);
    const int64_t chunk_optimizer = e.layout.chunk_size * e.payload.optimizer();
    t.nvme_read_bytes = t.nvme_write_bytes = e.fit.nvme_used;
    const double per_byte = 1 / (hw.nvme_read_gbps * 1e9) + 1 / (hw.nvme_write_gbps * 1e9);
    t.nvme_io_s = static_cast<double>(e.fit.nvme_used) * per_byte;
    t.nvme_fill_s = static_cast<double>(chunk_optimizer * hw.gpus_per_node) * per_byte;
  }
  // Note [communication time]: all-gathers in the forward and the backward in the compute dtype,
  // the reduce-scatter of gradients in fp32: (N−1)/N of the model at 2·e + 4 bytes.
  const int64_t n = hw.world();
  if (n > 1) {
    const double bw =
        hw.nodes > 1 ? std::min(hw.link_gbps, hw.net_gbps / static_cast<double>(hw.gpus_per_node))
                     : hw.link_gbps;
    t.comm_s = static_cast<double>(n - 1) / static_cast<double>(n) *
               static_cast<double>(e.params * (2 * w.elem_bytes + 4)) / (bw * 1e9);
  }
  return t;
}

}  // namespace

// Note [flops per token]
// The GPT keeps PatrickStar's count, 6·P per token (8·P with recomputation), so that its figures
// stay comparable with PatrickStar's published TFLOPS and with earlier pstar reports. The decoder
// is counted matrix by matrix, since GQA, SwiGLU and a large untied vocabulary put its
// FLOPs far from 6·P: per token and layer, the forward multiplies by q_proj and o_proj
// (2·h·q each, q = heads·head_dim), k_proj and v_proj (2·h·kv each, kv = kv_heads·head_dim) and
// the three SwiGLU matrices (2·h·I each), and attention adds Q·Kᵀ and P·V over the whole S×S
// score matrix as model/decoder.cpp computes it (sliding-window layers too: the explicit path
// computes every score and masks) (2·S·q each); the head adds 2·V·h. Embedding
// lookups, norms, biases, RoPE and softmax are left out (under 1%). A mixture of experts' sparse
// layer counts the experts a token runs, not those it holds: the router (2·h·E) and top_k gated
// MLPs of the experts' width (top_k · 3 · 2·h·I_e), so that FLOPs and TFLOPS are over the active
// parameters while memory and Adam count them all. Backward is twice the forward; recomputation
// adds one forward of the layers (not of the head).
double train_flops_per_token(const model::ModelShape& shape, bool checkpointing) {
  switch (shape.family) {
    case model::ModelFamily::kGpt:
      return (checkpointing ? 8.0 : 6.0) * static_cast<double>(shape.num_params());
    case model::ModelFamily::kDecoder: {
      const model::DecoderConfig& c = shape.decoder;
      const auto h = static_cast<double>(c.hidden);
      const auto q = static_cast<double>(c.q_width());
      const auto kv = static_cast<double>(c.kv_width());
      const auto inter = static_cast<double>(c.intermediate);
      const auto seq = static_cast<double>(c.seq_len);
      const double attention = 2 * (2 * h * q + 2 * h * kv) + 2 * 2 * seq * q;
      double layers = 0;
      for (int64_t l = 0; l < c.layers; ++l) {
        if (!c.sparse_layer(l)) {
          layers += attention + 2 * 3 * h * inter;
          continue;
        }
        const model::MoeConfig& m = *c.moe;
        layers +=
            attention + 2 * h * static_cast<double>(m.experts) +
            static_cast<double>(m.top_k) * 2 * 3 * h * static_cast<double>(m.expert_intermediate);
      }
      const double head = 2 * static_cast<double>(c.vocab_size) * h;
      return 3 * (layers + head) + (checkpointing ? layers : 0);
    }
  }
  PSTAR_INTERNAL_ASSERT(false, "unknown model family");
  return 0;
}

double model_flops_per_token(const model::ModelShape& shape) {
  if (shape.family == model::ModelFamily::kGpt) {
    return 6.0 * static_cast<double>(shape.num_params()) +
           12.0 * static_cast<double>(shape.layers() * shape.hidden() * shape.seq_len());
  }
  return train_flops_per_token(shape, /*checkpointing=*/false);
}

model::ModelShape gpt_shape(const Workload& w, int64_t hidden, int64_t layers, int64_t heads) {
  PSTAR_INTERNAL_ASSERT(hidden > 0 && layers > 0 && heads > 0 && hidden % heads == 0);
  model::ModelShape s;
  s.family = model::ModelFamily::kGpt;
  s.gpt.hidden = hidden;
  s.gpt.layers = layers;
  s.gpt.heads = heads;
  s.gpt.vocab_size = w.vocab;
  s.gpt.seq_len = w.seq_len;
  return s;
}

int64_t llama3_intermediate(int64_t hidden) {
  // 1.3·(8/3)·hidden rounded up to 1024, in integers: ceil(104·hidden / (30·1024)).
  const int64_t multiple = 1024;
  return (104 * hidden + 30 * multiple - 1) / (30 * multiple) * multiple;
}

model::ModelShape llama3_shape(int64_t hidden, int64_t layers, int64_t vocab, int64_t seq_len) {
  PSTAR_INTERNAL_ASSERT(hidden > 0 && hidden % 1024 == 0 && layers > 0);
  model::ModelShape s;
  s.family = model::ModelFamily::kDecoder;
  model::DecoderConfig& c = s.decoder;
  c = model::family_defaults(model::llama_family());
  c.hidden = hidden;
  c.intermediate = llama3_intermediate(hidden);
  c.layers = layers;
  c.head_dim = 128;
  c.heads = hidden / c.head_dim;
  c.kv_heads = 8;
  c.vocab_size = vocab;
  c.seq_len = seq_len;
  c.max_positions = std::max<int64_t>(seq_len, 131072);
  c.attention.rope[0].theta = c.attention.rope[1].theta = 500000;
  c.tie_word_embeddings = false;
  c.attention.layer_kinds.assign(static_cast<size_t>(layers), model::LayerKind::kFull);
  return s;
}

Workload workload_for(const RunPlan& run, const model::ModelShape& shape) {
  const config::TrainConfig& config = run.config;
  Workload w;
  w.seq_len = shape.seq_len();
  w.vocab = shape.vocab_size();
  w.micro_batch = run.micro_batch;
  w.checkpointing = config.engine.activation_checkpointing;
  w.elem_bytes = run.compute_elem_bytes();
  w.precision = precision_name(run.precision);
  w.chunk_size = config.default_chunk_size;
  w.chunk_size_search = config.engine.chunk_size_search;
  w.use_cpu_embedding = decided_cpu_embedding(config);
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

Evaluation evaluate(const Hardware& hw, const Workload& w, const model::ModelShape& shape) {
  Evaluation e = evaluate_with(hardware_input(hw, w), w, shape);
  e.time = step_time(hw, w, e);
  return e;
}

namespace {

int64_t search_layers(const FitInput& base, const Workload& w, const ShapeAtDepth& shape,
                      int64_t limit) {
  auto fits = [&](int64_t layers) { return evaluate_with(base, w, shape(layers)).fit.fits; };
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

ShapeAtDepth gpt_at_depth(const Workload& w, int64_t hidden, int64_t heads) {
  return [&w, hidden, heads](int64_t layers) { return gpt_shape(w, hidden, layers, heads); };
}

}  // namespace

Evaluation evaluate_budgets(int64_t device_budget, int64_t host_budget, const Workload& w,
                            const model::ModelShape& shape) {
  return evaluate_with(budget_input(device_budget, host_budget), w, shape);
}

int64_t max_layers(const Hardware& hw, const Workload& w, const ShapeAtDepth& shape,
                   int64_t limit) {
  return search_layers(hardware_input(hw, w), w, shape, limit);
}

int64_t max_layers_budgets(int64_t device_budget, int64_t host_budget, const Workload& w,
                           const ShapeAtDepth& shape, int64_t limit) {
  return search_layers(budget_input(device_budget, host_budget), w, shape, limit);
}

int64_t max_layers(const Hardware& hw, const Workload& w, int64_t hidden, int64_t heads,
                   int64_t limit) {
  return max_layers(hw, w, gpt_at_depth(w, hidden, heads), limit);
}

int64_t max_layers_budgets(int64_t device_budget, int64_t host_budget, const Workload& w,
                           int64_t hidden, int64_t heads, int64_t limit) {
  return max_layers_budgets(device_budget, host_budget, w, gpt_at_depth(w, hidden, heads), limit);
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

Estimate estimate_largest_llama(const Hardware& hw, const Workload& w,
                                std::optional<int64_t> hidden) {
  Estimate out;
  auto at_depth = [&w](int64_t h) -> ShapeAtDepth {
    return [&w, h](int64_t layers) { return llama3_shape(h, layers, w.vocab, w.seq_len); };
  };
  auto consider = [&](int64_t h, int64_t layers) {
    if (layers < 1) return;
    Evaluation e = evaluate(hw, w, llama3_shape(h, layers, w.vocab, w.seq_len));
    if (e.params > out.best.params) out.best = e;
  };
  if (hidden) {
    consider(*hidden, max_layers(hw, w, at_depth(*hidden)));
    out.how = str_cat("layers searched at hidden ", *hidden, " (Llama-3-like shape rule)");
  } else {
    // Depth between hidden/160 and hidden/64: Llama 3's published shapes have hidden/layers
    // between 102 (70B) and 130 (405B) (docs/estimate.md).
    for (int64_t h = 1024; h <= 65536; h += 1024) {
      const int64_t lo = std::max<int64_t>(2, h / 160);
      const int64_t layers = max_layers(hw, w, at_depth(h), std::max<int64_t>(lo, h / 64));
      if (layers >= lo) consider(h, layers);
    }
    out.how =
        "Llama-3-like shapes (head_dim 128, 8 key/value heads, Llama 3's SwiGLU width, untied "
        "head) at widths 1024..65536, layers between hidden/160 and hidden/64";
  }
  for (const auto& p : model::decoder_presets()) {
    if (p.config.vocab_size < 1000) continue;  // llama-tiny is for tests
    model::ModelShape s;
    s.family = model::ModelFamily::kDecoder;
    s.decoder = p.config;
    s.decoder.seq_len = w.seq_len;
    s.decoder.max_positions = std::max(s.decoder.max_positions, w.seq_len);
    Evaluation e = evaluate(hw, w, s);
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
