// Training throughput of each decoder family against a Llama of the same width and depth, in the
// same run (issue 54): the families differ in their norms (Gemma 3's four a block and (1 + w)), q/k
// norms (Qwen3, Gemma 3), activation (tanh-GELU), sliding windows (Mistral, Gemma 3), the scaled
// embedding and fused checkpoints (Phi-3: none at run time), so their steps should cost what the
// Llama's does plus those extra passes over the activations. Each family's model is a folder this
// benchmark writes (config.json through the family's own spelling, random fp32 weights), trained
// by the chunk engine in fp32 on the CPU from a token file of random ids.
//
// A mixture of experts (issue 55) is paired with the dense model of its active size instead:
// Qwen3-MoE with 8 experts of width 3·hidden/2, top 2, against Qwen3 with one MLP of width
// 3·hidden. Its extra work is the router, the grouping of tokens by expert and the weighted sum;
// its matmul FLOPs are the dense model's plus the router's.
//
// The trainers are built side by side and their steps interleaved: a Llama step and a family step
// make a pair, which goes first alternating, so both see nearly the same moment of a shared
// machine; the headline is the median over pairs of (family step time / Llama step time). The
// bound beside each: the step's matmul FLOPs (plan::train_flops_per_token, Note [flops per token])
// over this machine's fp32 matmul rate, measured in the same run with LibTorch on a square product
// of the model's width. The last line is one JSON object with the figures.
//
//   build/cpu-release/bench/pstar-bench-families [--hidden 256] [--layers 4] [--seq-len 256]
//       [--steps 6] [--warmup 2] [--micro-batch 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "pstar/engine/param_engine.h"
#include "pstar/formats/config.h"
#include "pstar/formats/safetensors.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/family.h"
#include "pstar/model/hf_decoder_config.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/estimate.h"
#include "pstar/train/run_facts.h"
#include "pstar/train/trainer.h"

namespace {

namespace fs = std::filesystem;
using pstar::model::DecoderConfig;

struct Options {
  int64_t hidden = 256, layers = 4, seq_len = 256, steps = 6, warmup = 2, micro_batch = 2;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The family's network at the benchmark's shape: every family switch of its row, the shape of the
// Llama beside it (heads of 64, a quarter of them key/value heads, SwiGLU width 3·hidden).
DecoderConfig shape_of(const char* family, const Options& o) {
  DecoderConfig c = pstar::model::family_defaults(*pstar::model::find_decoder_family(family));
  c.hidden = o.hidden;
  c.layers = o.layers;
  c.head_dim = 64;
  c.heads = o.hidden / 64;
  c.kv_heads = std::max<int64_t>(1, c.heads / 4);
  c.intermediate = 3 * o.hidden;
  c.vocab_size = 8192;
  c.max_positions = c.seq_len = o.seq_len;
  c.tie_word_embeddings = false;
  c.bias.qkv = c.family->attention_bias == pstar::model::AttentionBias::kQkvAlways;
  c.attention.rope[0].theta = c.attention.rope[1].theta = 10000;
  const bool sliding = c.family->sliding != pstar::model::SlidingRule::kNever &&
                       c.family->sliding != pstar::model::SlidingRule::kFromMaxWindow;
  if (sliding) c.attention.sliding_window = o.seq_len / 4;  // a window that masks most of each row
  c.attention.layer_kinds = pstar::model::family_layer_kinds(
      *c.family, c.layers, sliding, 0, pstar::model::default_sliding_pattern(*c.family));
  if (c.family->query_pre_attn_scalar) c.attention.query_pre_attn_scalar = 64;
  if (c.moe) {
    c.moe->experts = 8;
    c.moe->top_k = 2;
    c.moe->expert_intermediate = c.intermediate / 2;  // top_k of them: the dense width
    c.moe->normalize_top_k = true;
  }
  return c;
}

// A folder of `c` with random fp32 weights (norms near their identity), as save_pretrained lays it
// out for the family.
void write_folder(const std::string& dir, const DecoderConfig& c) {
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << pstar::model::decoder_config_to_hf_json(c, "float32");
  pstar::formats::SafetensorsWriter writer;
  torch::manual_seed(1);
  for (const auto& t : pstar::model::decoder_checkpoint_tensors(c)) {
    const bool norm = t.name.find("norm") != std::string::npos;
    const double identity = norm && c.norms.kind == pstar::model::NormKind::kWeight ? 1.0 : 0.0;
    const auto value = (norm ? 0.0 : 0.02) * torch::randn(t.shape) + identity;
    writer.add(t.name, pstar::formats::DType::kF32, t.shape, value.data_ptr(), value.nbytes());
  }
  writer.write(dir + "/model.safetensors");
}

pstar::config::TrainConfig config_for(const std::string& folder, const std::string& tokens,
                                      const Options& o) {
  pstar::config::TrainConfig c;
  c.model.init_from = folder;
  c.model.seq_len = o.seq_len;
  c.data.path = tokens;
  c.train_micro_batch_size_per_gpu = o.micro_batch;
  c.training.steps = o.warmup + o.steps;
  c.training.lr_schedule.type = "constant";
  c.bf16.enabled = pstar::config::OnOffAuto::kOff;
  return c;
}

// fp32 matmul FLOP/s of LibTorch here on a square product of `n`, the best of a few.
double matmul_rate(int64_t n) {
  const auto a = torch::randn({n, n}), b = torch::randn({n, n});
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const double begin = now_s();
    const auto c = torch::mm(a, b);
    (void)c.sum().item<float>();
    best = std::max(best, 2.0 * static_cast<double>(n * n * n) / (now_s() - begin));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const char* usage =
      "pstar-bench-families [--hidden 256] [--layers 4] [--seq-len 256] [--steps 6] [--warmup 2] "
      "[--micro-batch 2]";
  pstar::bench::parse_options(
      argc, argv, usage,
      {{"--hidden", [&](const std::string& v) { o.hidden = std::stoll(v); }},
       {"--layers", [&](const std::string& v) { o.layers = std::stoll(v); }},
       {"--seq-len", [&](const std::string& v) { o.seq_len = std::stoll(v); }},
       {"--steps", [&](const std::string& v) { o.steps = std::stoll(v); }},
       {"--warmup", [&](const std::string& v) { o.warmup = std::stoll(v); }},
       {"--micro-batch", [&](const std::string& v) { o.micro_batch = std::stoll(v); }}});
  const fs::path dir =
      fs::temp_directory_path() / ("pstar-bench-families-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string tokens = (dir / "tokens.bin").string();
  {
    std::ofstream out(tokens, std::ios::binary);
    std::mt19937 rng(1);
    for (int i = 0; i < (1 << 20); ++i) {
      const auto id = static_cast<uint16_t>(rng() % 8192);
      out.write(reinterpret_cast<const char*>(&id), 2);
    }
  }
  pstar::train::TrainOptions quiet;
  quiet.device = "cpu";
  quiet.progress = false;
  auto trainer = [&](const char* family) {
    const std::string folder = (dir / family).string();
    write_folder(folder, shape_of(family, o));
    const auto c = config_for(folder, tokens, o);
    return std::make_unique<pstar::train::Trainer>(
        c, pstar::train::build_model_and_engine(pstar::train::plan_run(c, "cpu", nullptr)), quiet);
  };
  const double rate = matmul_rate(o.hidden * 4);
  nlohmann::json out = {{"hidden", o.hidden},
                        {"layers", o.layers},
                        {"seq_len", o.seq_len},
                        {"micro_batch", o.micro_batch},
                        {"matmul_gflops", rate / 1e9}};
  std::printf(
      "decoder families against a Llama of hidden %lld, %lld layers, seq_len %lld, micro "
      "batch %lld, fp32, chunk engine on the CPU; matmul %.1f GFLOP/s\n",
      static_cast<long long>(o.hidden), static_cast<long long>(o.layers),
      static_cast<long long>(o.seq_len), static_cast<long long>(o.micro_batch), rate / 1e9);
  const double tokens_per_step = static_cast<double>(o.micro_batch * o.seq_len);
  struct Row {
    const char* family;
    const char* baseline;  // the dense model of the same (active) shape
  };
  std::map<std::string, std::unique_ptr<pstar::train::Trainer>> baselines;
  for (const Row row :
       {Row{"mistral", "llama"}, Row{"qwen2", "llama"}, Row{"qwen3", "llama"},
        Row{"gemma3_text", "llama"}, Row{"phi3", "llama"}, Row{"qwen3_moe", "qwen3"}}) {
    const char* family = row.family;
    auto& llama = baselines[row.baseline];
    if (!llama) llama = trainer(row.baseline);
    auto other = trainer(family);
    std::vector<double> ratios, mine, theirs;
    for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
      const bool llama_first = s % 2 == 0;
      auto& first = llama_first ? llama : other;
      auto& second = llama_first ? other : llama;
      const double a = first->step().step_time_s, b = second->step().step_time_s;
      if (s < o.warmup) continue;
      const double llama_s = llama_first ? a : b, family_s = llama_first ? b : a;
      ratios.push_back(family_s / llama_s);
      mine.push_back(family_s);
      theirs.push_back(llama_s);
    }
    pstar::model::ModelShape shape;
    shape.family = pstar::model::ModelFamily::kDecoder;
    shape.decoder = shape_of(family, o);
    const double bound_s =
        pstar::plan::train_flops_per_token(shape, false) * tokens_per_step / rate;
    std::printf(
        "  %-12s %8.0f tokens/s (%s %8.0f): %.3f x the %s's step; step %.3f s = "
        "%.2f x its matmul bound %.3f s\n",
        family, tokens_per_step / median(mine), row.baseline, tokens_per_step / median(theirs),
        median(ratios), row.baseline, median(mine), median(mine) / bound_s, bound_s);
    const std::string base = row.baseline;
    out[family] = {{"baseline", base},
                   {"tokens_per_s", tokens_per_step / median(mine)},
                   {base + "_tokens_per_s", tokens_per_step / median(theirs)},
                   {"step_over_" + base, median(ratios)},
                   {"step_over_bound", median(mine) / bound_s}};
    // Llama's own bound, once.
    if (base == "llama" && !out.contains("llama")) {
      pstar::model::ModelShape l;
      l.family = pstar::model::ModelFamily::kDecoder;
      l.decoder = shape_of("llama", o);
      const double lb = pstar::plan::train_flops_per_token(l, false) * tokens_per_step / rate;
      out["llama"] = {{"step_over_bound", median(theirs) / lb}};
    }
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
