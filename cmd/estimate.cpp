// `pstar estimate`: the largest GPT or Llama-3-like model given hardware trains, or whether a named
// model or a config fits and how fast it trains (docs/estimate.md).
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/formats/config.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/estimate.h"
#include "pstar/plan/run_plan.h"
#include "pstar/train/run_facts.h"
#include "pstar/train/trainer.h"

namespace pstar::cmd {
namespace {

using nlohmann::json;

int64_t parse_size_flag(const std::string& flag, const std::string& text) {
  auto bytes = parse_size_bytes(text);
  PSTAR_CHECK(bytes.has_value(), ConfigError, flag, ": '", text,
              "' is not a positive size; write a number with a unit, e.g. 80GB, 32GiB or 1TB "
              "(units B, KB, MB, GB, TB and KiB, MiB, GiB, TiB)");
  return *bytes;
}

// Element counts: a positive integer, optionally with a binary K/M/G suffix (64M = 64·2^20).
int64_t parse_count_flag(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  std::string suffix(end);
  double scale = suffix.empty() ? 1 : 0;
  if (suffix == "K" || suffix == "k") scale = 0x1p10;
  if (suffix == "M" || suffix == "m") scale = 0x1p20;
  if (suffix == "G" || suffix == "g") scale = 0x1p30;
  const double n = value * scale;
  PSTAR_CHECK(end != text.c_str() && scale > 0 && std::isfinite(n) && n >= 1 && n < 0x1p50 &&
                  n == std::floor(n),
              ConfigError, flag, ": '", text,
              "' is not a positive whole number of elements; e.g. 67108864 or 64M");
  return static_cast<int64_t>(n);
}

// Rates: a size per second, "6GB/s" (the "/s" may be left out), as GB/s.
double parse_rate_flag(const std::string& flag, const std::string& text) {
  std::string size = text;
  if (size.size() > 2 && size.compare(size.size() - 2, 2, "/s") == 0) size.resize(size.size() - 2);
  auto bytes = parse_size_bytes(size);
  PSTAR_CHECK(bytes.has_value(), ConfigError, flag, ": '", text,
              "' is not a positive rate; write bytes per second with a unit, e.g. 6GB/s or "
              "3500MB/s (units B, KB, MB, GB, TB and KiB, MiB, GiB, TiB)");
  return static_cast<double>(*bytes) / 1e9;
}

void check_positive(const std::string& flag, double value) {
  PSTAR_CHECK(value > 0 && std::isfinite(value), ConfigError, flag, ": ", value,
              " must be positive");
}

std::string preset_list() {
  std::string names;
  for (const auto& p : plan::gpu_presets())
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

std::string params_text(int64_t params) {
  char buf[32];
  const double p = static_cast<double>(params);
  if (p >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", p / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.1fM", p / 1e6);
  return buf;
}

// "GPT hidden 4096, 32 layers, 32 heads" or "llama hidden 4096, 32 layers, 32/8 heads of 128,
// SwiGLU 14336, vocabulary 128256, untied head".
std::string model_text(const model::ModelShape& s) {
  switch (s.family) {
    case model::ModelFamily::kGpt:
      return str_cat("GPT hidden ", s.gpt.hidden, ", ", s.gpt.layers, " layers, ", s.gpt.heads,
                     " heads");
    case model::ModelFamily::kLlama: {
      const model::LlamaConfig& c = s.llama;
      return str_cat(c.model_type, " hidden ", c.hidden, ", ", c.layers, " layers, ", c.heads, "/",
                     c.kv_heads, " query/key-value heads of ", c.head_dim, ", SwiGLU ",
                     c.intermediate, ", vocabulary ", c.vocab_size,
                     c.tie_word_embeddings ? ", tied head" : ", untied head");
    }
  }
  return "";
}

json model_json(const model::ModelShape& s, int64_t params) {
  json j = {{"family", model::model_family_name(s.family)},
            {"hidden", s.hidden()},
            {"layers", s.layers()},
            {"vocab", s.vocab_size()},
            {"seq_len", s.seq_len()},
            {"params", params}};
  if (s.family == model::ModelFamily::kGpt) {
    j["heads"] = s.gpt.heads;
  } else {
    j["model_type"] = s.llama.model_type;
    j["heads"] = s.llama.heads;
    j["kv_heads"] = s.llama.kv_heads;
    j["head_dim"] = s.llama.head_dim;
    j["intermediate"] = s.llama.intermediate;
    j["tie_word_embeddings"] = s.llama.tie_word_embeddings;
  }
  return j;
}

std::string known_model_names() {
  std::string names;
  for (const auto& p : model::gpt_presets())
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  for (const auto& p : model::llama_presets()) names += ", " + std::string(p.name);
  return names;
}

// --model NAME: any GPT or Llama-family preset, at --seq-len when given.
model::ModelShape resolve_named_model(const EstimateCommandOptions& o) {
  bool known = model::find_llama_preset(o.model) != nullptr;
  for (const auto& p : model::gpt_presets()) known = known || o.model == p.name;
  PSTAR_CHECK(known, ConfigError, "--model: unknown model '", o.model,
              "'; known: ", known_model_names());
  config::ModelConfig m;
  m.preset = o.model;
  m.seq_len = o.seq_len;
  return model::resolve_model_shape(m);
}

plan::Hardware resolve_hardware(const EstimateCommandOptions& o) {
  plan::Hardware hw;
  if (!o.hardware.empty()) {
    const plan::GpuPreset* p = plan::find_gpu_preset(o.hardware);
    PSTAR_CHECK(p != nullptr, ConfigError, "--hardware: unknown GPU '", o.hardware,
                "'; known: ", preset_list(), " (or give --gpu-mem and the speeds yourself)");
    hw.name = p->name;
    hw.gpu_memory = p->memory;
    hw.tflops_16 = p->tflops_16;
    hw.tflops_32 = p->tflops_32;
    hw.pcie_gbps = p->pcie_gbps;
    hw.link_gbps = p->link_gbps;
    hw.cpu_mem_gbps = p->cpu_mem_gbps;
  }
  if (!o.gpu_mem.empty()) hw.gpu_memory = parse_size_flag("--gpu-mem", o.gpu_mem);
  PSTAR_CHECK(hw.gpu_memory > 0, ConfigError, "give the GPU: --hardware NAME (", preset_list(),
              ") or --gpu-mem SIZE");
  PSTAR_CHECK(!o.cpu_mem.empty(), ConfigError,
              "--cpu-mem: the host memory per node is required, e.g. --cpu-mem 240GB");
  hw.cpu_memory = parse_size_flag("--cpu-mem", o.cpu_mem);
  PSTAR_CHECK(o.gpus_per_node >= 1, ConfigError, "--gpus-per-node: ", o.gpus_per_node,
              " must be at least 1");
  PSTAR_CHECK(o.nodes >= 1, ConfigError, "--nodes: ", o.nodes, " must be at least 1");
  hw.gpus_per_node = o.gpus_per_node;
  hw.nodes = o.nodes;
  if (o.gpu_tflops) {
    check_positive("--gpu-tflops", *o.gpu_tflops);
    hw.tflops_16 = *o.gpu_tflops;
    hw.tflops_32 = *o.gpu_tflops / 2;  // stated in docs/estimate.md
  }
  if (o.pcie_gbps) check_positive("--pcie-gbps", *o.pcie_gbps), hw.pcie_gbps = *o.pcie_gbps;
  if (o.cpu_mem_gbps)
    check_positive("--cpu-mem-gbps", *o.cpu_mem_gbps), hw.cpu_mem_gbps = *o.cpu_mem_gbps;
  if (o.link_gbps) check_positive("--link-gbps", *o.link_gbps), hw.link_gbps = *o.link_gbps;
  if (o.net_gbps) check_positive("--net-gbps", *o.net_gbps), hw.net_gbps = *o.net_gbps;
  check_positive("--mfu", o.mfu);
  PSTAR_CHECK(o.mfu <= 1, ConfigError, "--mfu: ", o.mfu, " must be at most 1");
  hw.mfu = o.mfu;
  if (hw.world() > 1 && hw.link_gbps <= 0) hw.link_gbps = hw.pcie_gbps;
  PSTAR_CHECK(!o.nvme.empty() || (o.nvme_bw.empty() && o.nvme_write_bw.empty()), ConfigError,
              o.nvme_bw.empty() ? "--nvme-write-bw" : "--nvme-bw",
              " needs --nvme SIZE (the NVMe capacity per node), e.g. --nvme 2TB");
  if (!o.nvme.empty()) {
    hw.nvme_capacity = parse_size_flag("--nvme", o.nvme);
    if (!o.nvme_bw.empty()) {
      hw.nvme_read_gbps = parse_rate_flag("--nvme-bw", o.nvme_bw);
      hw.nvme_write_gbps = hw.nvme_read_gbps * plan::kNvmeWriteShare;
    }
    if (!o.nvme_write_bw.empty())
      hw.nvme_write_gbps = parse_rate_flag("--nvme-write-bw", o.nvme_write_bw);
  }
  return hw;
}

bool has_time_model(const plan::Hardware& hw) {
  return hw.tflops_16 > 0 && hw.pcie_gbps > 0 && hw.cpu_mem_gbps > 0 &&
         (hw.world() == 1 || hw.link_gbps > 0);
}

bool llama_search(const EstimateCommandOptions& o) { return o.family == "llama"; }

plan::Workload resolve_workload(const EstimateCommandOptions& o) {
  plan::Workload w;
  if (o.seq_len)
    PSTAR_CHECK(*o.seq_len >= 1, ConfigError, "--seq-len: ", *o.seq_len, " must be at least 1");
  PSTAR_CHECK(o.micro_batch >= 1, ConfigError, "--micro-batch: ", o.micro_batch,
              " must be at least 1");
  if (o.vocab)
    PSTAR_CHECK(*o.vocab >= 1, ConfigError, "--vocab: ", *o.vocab, " must be at least 1");
  w.seq_len = o.seq_len.value_or(1024);
  w.micro_batch = o.micro_batch;
  w.vocab = o.vocab.value_or(llama_search(o) ? 128256 : 50257);
  w.checkpointing = o.checkpointing == "on";
  const std::optional<plan::Precision> precision = plan::precision_from_name(o.precision);
  PSTAR_CHECK(precision.has_value(), ConfigError,
              "--precision: expected fp16, bf16 or fp32, found \"", o.precision, "\"");
  w.precision = plan::precision_name(*precision);
  w.elem_bytes = plan::elem_bytes(*precision);
  w.chunk_size = parse_count_flag("--chunk-size", o.chunk_size);
  return w;
}

// ---- report ------------------------------------------------------------------------------------

struct Tiers {
  json gpu, host;
  json nvme;  // null without an NVMe tier
};

// `nvme_capacity` 0: no NVMe tier, and no `nvme` column.
Tiers memory_items(const plan::Evaluation& e, int64_t gpu_capacity, int64_t host_capacity,
                   int64_t ranks_per_host, int64_t nvme_capacity = 0) {
  const auto& f = e.fit;
  const int64_t chunk = e.layout.chunk_size;
  // The padding is spread over the chunks, each tier holding its payloads' share of it.
  const auto owned = static_cast<double>(f.owned_chunks);
  const double compute_share =
      static_cast<double>(e.payload.compute()) / static_cast<double>(e.payload.whole());
  const double device_share = f.owned_chunks
                                  ? (static_cast<double>(f.device_chunks) +
                                     static_cast<double>(f.nvme_device_chunks) * compute_share) /
                                        owned
                                  : 0;
  const double nvme_share =
      f.owned_chunks ? static_cast<double>(f.nvme_chunks) * (1 - compute_share) / owned : 0;
  const double padding = static_cast<double>(f.padding_bytes);
  Tiers t;
  t.gpu = json{
      {"param_grad_chunks", (f.device_chunks + f.nvme_device_chunks) * chunk * e.payload.compute()},
      {"optimizer_chunks", f.device_chunks * chunk * e.payload.optimizer()},
      {"activations", e.activations.peak},
      {"activations_checkpointing_on",
       e.activations.stored_with_checkpointing + (e.activations.peak - e.activations.stored)},
      {"activations_checkpointing_off",
       e.activations.stored_without_checkpointing + (e.activations.peak - e.activations.stored)},
      {"working_set", f.device_working},
      {"staging", 0},
      {"padding", static_cast<int64_t>(device_share * padding)},
      {"used", f.device_used},
      {"limit", f.device_limit},
      {"headroom", f.device_limit - f.device_used},
      {"budget", e.device_budget},
      {"reserve", gpu_capacity - f.device_limit},
      {"capacity", gpu_capacity},
  };
  t.host = json{
      {"param_grad_chunks",
       ranks_per_host * (f.host_chunks + f.nvme_host_chunks) * chunk * e.payload.compute()},
      {"optimizer_chunks", ranks_per_host * f.host_chunks * chunk * e.payload.optimizer()},
      {"activations", 0},
      {"working_set", 0},
      {"staging", f.host_staging},
      {"padding", static_cast<int64_t>((1 - device_share - nvme_share) * padding *
                                       static_cast<double>(ranks_per_host))},
      {"used", f.host_used},
      {"limit", e.host_budget},
      {"headroom", e.host_budget - f.host_used},
      {"budget", e.host_budget},
      {"reserve", host_capacity - e.host_budget},
      {"capacity", host_capacity},
  };
  if (nvme_capacity > 0) {
    t.gpu["nvme_staging"] = 0;
    t.host["nvme_staging"] = f.host_nvme_staging;
    t.nvme = json{
        {"chunks_per_rank", f.nvme_chunks},
        {"compute_on_host_per_rank", f.nvme_host_chunks},
        {"compute_on_gpu_per_rank", f.nvme_device_chunks},
        {"optimizer_chunks", f.nvme_used},
        {"padding",
         static_cast<int64_t>(nvme_share * padding * static_cast<double>(ranks_per_host))},
        {"used", f.nvme_used},
        {"limit", f.nvme_limit},
        {"headroom", f.nvme_limit - f.nvme_used},
        {"reserve", nvme_capacity - f.nvme_limit},
        {"capacity", nvme_capacity},
        {"staging_chunks_per_rank", plan::kNvmeStagingChunks},
    };
  }
  return t;
}

json time_json(const plan::StepTime& t, const plan::Workload& w, const plan::Hardware& hw) {
  json j{
      {"mfu", hw.mfu},
      {"gpu_compute_s", t.compute_s},
      {"transfer_s", t.transfer_s},
      {"host_adam_s", t.host_adam_s},
      {"communication_s", t.comm_s},
      {"step_s", t.step_s()},
      {"tflops_per_gpu", t.tflops_per_gpu()},
      {"tokens_per_s", static_cast<double>(w.micro_batch * w.seq_len * hw.world()) / t.step_s()}};
  if (hw.nvme_capacity > 0) {
    j["nvme_read_gbps"] = hw.nvme_read_gbps;
    j["nvme_write_gbps"] = hw.nvme_write_gbps;
    j["nvme_read_bytes"] = t.nvme_read_bytes;
    j["nvme_write_bytes"] = t.nvme_write_bytes;
    j["nvme_io_s"] = t.nvme_io_s;
    j["nvme_fill_s"] = t.nvme_fill_s;
    j["optimizer_s"] = t.optimizer_s();
  }
  return j;
}

void print_memory(const Tiers& t, const plan::Evaluation& e, const plan::Workload& w,
                  bool hardware) {
  const std::string device_label = hardware ? "per GPU" : "device tier";
  const std::string host_label = hardware ? "per node host" : "host tier";
  const bool nvme = !t.nvme.is_null();
  auto cell = [](const json& v) {
    return v.is_null() ? std::string("-") : format_bytes(v.get<int64_t>());
  };
  auto row = [&](const char* name, const json& gpu, const json& host, const json& disk = json()) {
    std::printf("  %-46s %14s %16s", name, cell(gpu).c_str(), cell(host).c_str());
    if (nvme) std::printf(" %16s", cell(disk).c_str());
    std::printf("\n");
  };
  auto nvme_item = [&](const char* key) { return nvme ? t.nvme[key] : json(); };
  const std::string dtype = w.precision;
  std::printf("\nMemory                                           %14s %16s", device_label.c_str(),
              host_label.c_str());
  if (nvme) std::printf(" %16s", "NVMe per node");
  std::printf("\n");
  row((dtype + " param+grad chunks").c_str(), t.gpu["param_grad_chunks"],
      t.host["param_grad_chunks"]);
  row(e.payload.master ? "fp32 master + momentum + variance chunks"
                       : "momentum + variance chunks (fp32 param is master)",
      t.gpu["optimizer_chunks"], t.host["optimizer_chunks"], nvme_item("optimizer_chunks"));
  row(w.checkpointing ? "activations (checkpointing on; planned)"
                      : "activations (checkpointing off; planned)",
      t.gpu["activations"], nullptr);
  row(w.checkpointing ? "  with checkpointing off it would be"
                      : "  with checkpointing on it would be",
      w.checkpointing ? t.gpu["activations_checkpointing_off"]
                      : t.gpu["activations_checkpointing_on"],
      nullptr);
  row("working set: gathered chunks + comm buffers", t.gpu["working_set"], nullptr);
  row("pinned staging buffers", nullptr, t.host["staging"]);
  if (nvme) {
    // The pool, and one compute payload per rank when some chunks on NVMe compute on the GPU.
    char label[80];
    std::snprintf(label, sizeof label, "NVMe staging pool (%lld chunks' optimizer state%s)",
                  static_cast<long long>(plan::kNvmeStagingChunks),
                  e.fit.nvme_device_chunks > 0 ? " + 1 param+grad" : "");
    row(label, nullptr, t.host["nvme_staging"]);
  }
  row("  of the chunks above, padding (fragmentation)", t.gpu["padding"], t.host["padding"],
      nvme_item("padding"));
  row("total planned", t.gpu["used"], t.host["used"], nvme_item("used"));
  row("limit the plan may fill", t.gpu["limit"], t.host["limit"], nvme_item("limit"));
  row("headroom", t.gpu["headroom"], t.host["headroom"], nvme_item("headroom"));
  row("reserve (not planned)", t.gpu["reserve"], t.host["reserve"], nvme_item("reserve"));
  row("capacity", t.gpu["capacity"], t.host["capacity"], nvme_item("capacity"));
  if (!hardware) return;  // the config's budgets are the capacities
  const double gpu_reserve = 1 - plan::kDefaultMemoryRatio * plan::kDeviceFillRatio;
  std::printf(
      "  reserve ratio: %.0f%% of each GPU (budget %.0f%%, of which the plan fills %.0f%%), "
      "%.0f%% of host memory",
      gpu_reserve * 100, plan::kDefaultMemoryRatio * 100, plan::kDeviceFillRatio * 100,
      (1 - plan::kDefaultMemoryRatio) * 100);
  if (nvme)
    std::printf(", %.0f%% of the NVMe (filesystem headroom)", (1 - plan::kNvmeFillRatio) * 100);
  std::printf("\n");
}

void print_time(const plan::StepTime& t, const plan::Workload& w, const plan::Hardware& hw) {
  const double step = t.step_s();
  auto row = [&](const char* name, double s) {
    std::printf("  %-46s %10.3f s %5.1f%%\n", name, s, 100 * s / step);
  };
  std::printf("\nStep time (micro-batch %lld x %lld tokens per GPU, no overlap assumed%s)\n",
              static_cast<long long>(w.micro_batch), static_cast<long long>(w.seq_len),
              t.nvme_read_bytes > 0 ? " but of host Adam with NVMe I/O" : "");
  char compute[96];
  std::snprintf(compute, sizeof compute, "GPU compute (%.0f TFLOPS peak at %.0f%% MFU)",
                w.elem_bytes == 4 ? hw.tflops_32 : hw.tflops_16, hw.mfu * 100);
  row(compute, t.compute_s);
  row("host<->device transfer (PCIe)", t.transfer_s);
  if (t.nvme_read_bytes > 0) {
    // Note [nvme time]: the optimizer phase overlaps host Adam with the NVMe I/O.
    std::printf("  %-46s %10.3f s\n", "  host Adam (memory-bandwidth bound)", t.host_adam_s);
    char io[96];
    std::snprintf(io, sizeof io, "  NVMe: read %s at %.1f GB/s, write at %.1f GB/s",
                  format_bytes(t.nvme_read_bytes).c_str(), hw.nvme_read_gbps, hw.nvme_write_gbps);
    std::printf("  %-46s %10.3f s\n", io, t.nvme_io_s);
    std::printf("  %-46s %10.3f s\n", "  pipeline fill (one chunk read and written)",
                t.nvme_fill_s);
    row("host Adam || NVMe I/O, + fill", t.optimizer_s());
  } else {
    row("host Adam (memory-bandwidth bound)", t.host_adam_s);
  }
  row("communication (all-gather, reduce-scatter)", t.comm_s);
  std::printf("  %-46s %10.3f s\n", "total", step);
  std::printf("  => %.1f TFLOPS per GPU, %.0f tokens/s in all\n", t.tflops_per_gpu(),
              static_cast<double>(w.micro_batch * w.seq_len * hw.world()) / step);
}

json evaluation_json(const plan::Evaluation& e, const Tiers& tiers) {
  json j{
      {"max_params", e.params},
      {"model", model_json(e.shape, e.params)},
      {"chunks",
       {{"chunk_size", e.layout.chunk_size},
        {"num_chunks", e.layout.num_chunks},
        {"per_rank", e.fit.owned_chunks},
        {"on_host_per_rank", e.fit.host_chunks},
        {"on_device_per_rank", e.fit.device_chunks},
        {"bytes_per_param", e.payload.whole()}}},
      {"memory", {{"gpu", tiers.gpu}, {"host", tiers.host}}},
  };
  if (!tiers.nvme.is_null()) {
    j["chunks"]["optimizer_on_nvme_per_rank"] = e.fit.nvme_chunks;
    j["memory"]["nvme"] = tiers.nvme;
  }
  return j;
}

// The largest model of the family asked for (the GPT's or the Llama-3-like search).
plan::Estimate search(const EstimateCommandOptions& o, const plan::Hardware& hw,
                      const plan::Workload& w) {
  if (llama_search(o)) return plan::estimate_largest_llama(hw, w, o.hidden);
  return plan::estimate_largest(hw, w, o.hidden, o.hidden ? o.heads : std::nullopt);
}

void print_report(const EstimateCommandOptions& o, const plan::Hardware& hw,
                  const plan::Workload& w, const plan::Estimate& est, const Tiers& tiers,
                  const std::vector<plan::DeepSpeedEstimate>& ds) {
  const plan::Evaluation& e = est.best;
  const bool timed = has_time_model(hw);
  const bool searched = !o.layers && o.model.empty();
  const bool llama = llama_search(o);
  std::printf("Hardware: %lld node(s) x %lld %s (%s each), %s host memory per node\n",
              static_cast<long long>(hw.nodes), static_cast<long long>(hw.gpus_per_node),
              hw.name.c_str(), format_bytes(hw.gpu_memory).c_str(),
              format_bytes(hw.cpu_memory).c_str());
  if (hw.nvme_capacity > 0)
    std::printf("NVMe: %s per node, %.1f GB/s read, %.1f GB/s write (shared disk)\n",
                format_bytes(hw.nvme_capacity).c_str(), hw.nvme_read_gbps, hw.nvme_write_gbps);
  std::printf(
      "Workload: seq %lld, micro-batch %lld per GPU, %s, activation checkpointing %s, "
      "chunks of %lld elements, vocab %lld\n",
      static_cast<long long>(w.seq_len), static_cast<long long>(w.micro_batch), w.precision.c_str(),
      w.checkpointing ? "on" : "off", static_cast<long long>(e.layout.chunk_size),
      static_cast<long long>(w.vocab));
  const std::string what = !o.model.empty() ? o.model
                           : llama          ? std::string("Llama-3-like model")
                                            : std::string("GPT");
  std::printf("\n%s %s: %s parameters (%lld): %s\n",
              searched ? "Largest" : (e.fit.fits ? "This" : "This (does NOT fit)"), what.c_str(),
              params_text(e.params).c_str(), static_cast<long long>(e.params),
              model_text(e.shape).c_str());
  std::printf("  search: %s\n", est.how.c_str());
  std::printf(
      "  %lld chunks of %lld elements at %lld bytes/parameter; per GPU %lld owned: %lld "
      "on the host, %lld kept on the GPU\n",
      static_cast<long long>(e.layout.num_chunks), static_cast<long long>(e.layout.chunk_size),
      static_cast<long long>(e.payload.whole()), static_cast<long long>(e.fit.owned_chunks),
      static_cast<long long>(e.fit.host_chunks), static_cast<long long>(e.fit.device_chunks));
  if (hw.nvme_capacity > 0)
    std::printf(
        "  NVMe: %lld more chunks per GPU keep their optimizer state (%lld B/parameter) on NVMe, "
        "their %s param+grad on the host (%lld) or the GPU (%lld)\n",
        static_cast<long long>(e.fit.nvme_chunks), static_cast<long long>(e.payload.optimizer()),
        w.precision.c_str(), static_cast<long long>(e.fit.nvme_host_chunks),
        static_cast<long long>(e.fit.nvme_device_chunks));
  if (!e.fit.fits) std::printf("  why not: %s\n", e.fit.reason.c_str());
  print_memory(tiers, e, w, true);
  if (timed)
    print_time(e.time, w, hw);
  else
    std::printf(
        "\nStep time: give --gpu-tflops, --pcie-gbps and --cpu-mem-gbps (or --hardware) "
        "for a prediction\n");
  if (searched) {
    std::printf("\nLargest %s by micro-batch (the batch trades activations for model data):\n",
                what.c_str());
    for (int64_t mb : {1, 2, 4, 8, 16, 32}) {
      plan::Workload wb = w;
      wb.micro_batch = mb;
      const auto b = search(o, hw, wb);
      std::printf("  micro-batch %2lld: %9s", static_cast<long long>(mb),
                  b.best.params ? params_text(b.best.params).c_str() : "none");
      if (b.best.params && timed)
        std::printf("  (hidden %lld, %lld layers; %.1f TFLOPS per GPU)",
                    static_cast<long long>(b.best.shape.hidden()),
                    static_cast<long long>(b.best.shape.layers()), b.best.time.tflops_per_gpu());
      std::printf("%s\n", mb == w.micro_batch ? "  <- this estimate" : "");
    }
  }
  if (!est.ladder.empty()) {
    std::printf("\nPreset ladder (seq %lld, this workload):\n", static_cast<long long>(w.seq_len));
    for (const auto& l : est.ladder)
      std::printf("  %-14s %9s  %s\n", l.name.c_str(), params_text(l.params).c_str(),
                  l.fits ? "fits" : "does not fit");
  }
  if (o.compare) {
    std::printf(
        "\nDeepSpeed's own estimator formulas (theirs: model states only, no activations, "
        "f = 1.5):\n");
    for (const auto& d : ds)
      std::printf("  %-44s GPU %-4s CPU %-32s => %s\n", d.name.c_str(), d.gpu_formula.c_str(),
                  d.cpu_formula.c_str(),
                  d.max_params ? params_text(d.max_params).c_str() : "no fit (4L > GPU)");
    std::printf("  %-44s => %s\n", "pstar (this estimate)", params_text(e.params).c_str());
  }
}

int run_config_check(const EstimateCommandOptions& o) {
  auto config = config::load_train_config(o.config_path, o.overrides);
  PSTAR_CHECK(config.engine.mode == config::EngineMode::kChunked, ConfigError, o.config_path,
              ": engine.mode is \"", config::engine_mode_name(config.engine.mode),
              "\"; pstar estimate checks chunk-engine configs (engine.mode \"chunked\")");
  const bool hardware = !o.hardware.empty() || !o.gpu_mem.empty();
  // Reading engine.nvme_path (and checking its disk) is not done yet: the NVMe tier is
  // estimated on hardware only.
  PSTAR_CHECK(hardware || (o.nvme.empty() && o.nvme_bw.empty() && o.nvme_write_bw.empty()),
              ConfigError, "--nvme '", o.nvme,
              "': with a config, give the hardware too (--hardware or --gpu-mem, and --cpu-mem); "
              "checking a config against its own budgets does not read engine.nvme_path yet");
  // The run plan `pstar train` would resolve (Note [run plan]): for the hardware given, facts that
  // describe it; else this machine's own, gathered as `pstar train` gathers them.
  plan::Hardware hw;
  plan::RunFacts facts;
  if (hardware) {
    hw = resolve_hardware(o);
    facts.world_size = hw.world();
    facts.ranks_per_host = hw.gpus_per_node;
    facts.device = plan::DeviceKind::kCuda;
    facts.device_name = hw.name;
    // GPUs since Ampere run bf16 at twice their fp32 tensor rate: "auto" picks it there.
    facts.bf16_fast = true;
    facts.bf16_evidence =
        "estimated as bf16 on GPUs, whose tensor cores run it at twice fp32's rate";
    facts.free_device_bytes = hw.gpu_memory;
    facts.physical_memory_bytes = hw.cpu_memory;
  } else {
    core::configure_runtime();  // before the bf16 probe, which it times
    facts = train::gather_run_facts(config, "auto", nullptr);
  }
  // The estimate is per rank: a train_batch_size for another world size is not its business.
  config.train_batch_size.reset();
  const plan::RunPlan run = plan::resolve_run(config, facts);
  for (const std::string& line : run.decisions) log::info(line);
  config = run.config;
  const model::ModelShape shape = model::resolve_model_shape(config.model);
  const plan::Workload w = plan::workload_for(run, shape);
  plan::Evaluation e;
  int64_t gpu_capacity = 0, host_capacity = 0;
  std::string where;
  if (hardware) {
    e = plan::evaluate(hw, w, shape);
    gpu_capacity = hw.gpu_memory;
    host_capacity = hw.cpu_memory;
    where = str_cat(hw.world(), " x ", hw.name, " (", format_bytes(hw.gpu_memory), "), ",
                    format_bytes(hw.cpu_memory), " host per node");
  } else {
    // What `pstar train` checks at start-up: the config's budgets, one rank, no staging.
    const int64_t device = run.budgets.device, host = run.budgets.host;
    e = plan::evaluate_budgets(device, host, w, shape);
    gpu_capacity = device;
    host_capacity = host;
    where = str_cat("the config's budgets: engine.device_memory ", format_bytes(device),
                    ", engine.host_memory ", format_bytes(host));
  }
  const Tiers tiers = memory_items(e, gpu_capacity, host_capacity, hardware ? hw.gpus_per_node : 1,
                                   hardware ? hw.nvme_capacity : 0);
  if (o.json) {
    json j = evaluation_json(e, tiers);
    j["fits"] = e.fit.fits;
    j["reason"] = e.fit.reason;
    j["margin"] = {{"gpu", e.fit.device_limit - e.fit.device_used},
                   {"host", e.host_budget - e.fit.host_used}};
    if (hardware && has_time_model(hw)) j["time"] = time_json(e.time, w, hw);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s: %s (%s parameters) on %s\n", o.config_path.c_str(),
                model_text(e.shape).c_str(), params_text(e.params).c_str(), where.c_str());
    print_memory(tiers, e, w, hardware);
    if (hardware && has_time_model(hw)) print_time(e.time, w, hw);
    std::printf("\n%s: device margin %s, host margin %s\n", e.fit.fits ? "FITS" : "DOES NOT FIT",
                format_bytes(e.fit.device_limit - e.fit.device_used).c_str(),
                format_bytes(e.host_budget - e.fit.host_used).c_str());
  }
  PSTAR_CHECK(e.fit.fits, OutOfMemoryError, o.config_path, " does not fit: ", e.fit.reason);
  return 0;
}

}  // namespace

void register_estimate(CLI::App& app) {
  auto o = std::make_shared<EstimateCommandOptions>();
  CLI::App* sub = app.add_subcommand(
      "estimate",
      "Predict the largest GPT or Llama-3-like model the given hardware trains, or check a named "
      "model or a config against it (see docs/estimate.md)");
  sub->add_option("--hardware", o->hardware, "GPU preset: " + preset_list());
  sub->add_option("--gpu-mem", o->gpu_mem, "Memory per GPU, e.g. 80GB (overrides the preset's)");
  sub->add_option("--cpu-mem", o->cpu_mem, "Host memory per node, e.g. 1TB");
  sub->add_option("--gpus-per-node", o->gpus_per_node, "GPUs per node")->capture_default_str();
  sub->add_option("--nodes", o->nodes, "Nodes")->capture_default_str();
  sub->add_option("--gpu-tflops", o->gpu_tflops, "Dense fp16/bf16 peak TFLOPS per GPU");
  sub->add_option("--pcie-gbps", o->pcie_gbps, "Achieved host<->device GB/s per direction");
  sub->add_option("--cpu-mem-gbps", o->cpu_mem_gbps, "Achieved host memory GB/s per node");
  sub->add_option("--link-gbps", o->link_gbps, "GPU<->GPU GB/s per direction within a node");
  sub->add_option("--net-gbps", o->net_gbps, "Inter-node GB/s per node (default 25)");
  sub->add_option("--nvme", o->nvme,
                  "NVMe capacity per node for optimizer state, e.g. 2TB (docs/estimate.md)");
  sub->add_option("--nvme-bw", o->nvme_bw,
                  "NVMe sequential read rate per node, e.g. 6GB/s (default 6GB/s; writes at half)");
  sub->add_option("--nvme-write-bw", o->nvme_write_bw,
                  "NVMe sequential write rate per node (default half of --nvme-bw)");
  sub->add_option("--mfu", o->mfu, "Share of peak FLOPS the GPU compute reaches")
      ->capture_default_str();
  sub->add_option("--seq-len", o->seq_len,
                  "Tokens per sequence (default 1024; with --model, the preset's)");
  sub->add_option("--micro-batch", o->micro_batch, "Sequences per GPU per step")
      ->capture_default_str();
  sub->add_option("--activation-checkpointing", o->checkpointing, "on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  sub->add_option("--precision", o->precision, "fp16, bf16 or fp32")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32"}))
      ->capture_default_str();
  sub->add_option("--chunk-size", o->chunk_size, "Chunk size in elements, e.g. 64M")
      ->capture_default_str();
  sub->add_option("--vocab", o->vocab,
                  "Vocabulary of the searched shapes (default 50257; 128256 with --family llama)");
  sub->add_option("--model", o->model,
                  "Check this model: a GPT or Llama-family preset, e.g. llama-3.1-8b, GPT3_6.7B");
  sub->add_option("--family", o->family,
                  "Which shapes the largest-model search builds: gpt, or llama (Llama-3-like: "
                  "head_dim 128, 8 key/value heads, Llama 3's SwiGLU width, untied head)")
      ->check(CLI::IsMember({"gpt", "llama"}))
      ->capture_default_str();
  sub->add_option("--hidden", o->hidden, "Fix the hidden size and search the layer count");
  sub->add_option("--heads", o->heads, "Attention heads (default hidden/128)");
  sub->add_option("--layers", o->layers, "With --hidden: evaluate this exact shape");
  sub->add_option("config,--config", o->config_path,
                  "Check this training config against the hardware (or, with no hardware "
                  "flags, against its own engine budgets)");
  sub->add_option("--set", o->overrides, "With --config: override a config key, KEY=VALUE")
      ->allow_extra_args(false);
  sub->add_flag("--json", o->json, "Print JSON instead of tables");
  sub->add_flag("--compare", o->compare, "Add DeepSpeed's estimator formulas, side by side");
  sub->callback([o] { run_estimate(*o); });
}

int run_estimate(const EstimateCommandOptions& o) {
  if (!o.config_path.empty()) {
    PSTAR_CHECK(o.model.empty(), ConfigError,
                "--model and a config both name the model; give one of them");
    return run_config_check(o);
  }
  const plan::Hardware hw = resolve_hardware(o);
  plan::Workload w = resolve_workload(o);
  std::optional<int64_t> hidden = o.hidden, heads = o.heads;
  PSTAR_CHECK(!heads || hidden, ConfigError, "--heads needs --hidden");
  PSTAR_CHECK(!o.layers || hidden, ConfigError, "--layers needs --hidden");
  const bool llama = llama_search(o);
  if (!o.model.empty()) {
    PSTAR_CHECK(!hidden && !o.vocab && o.family == "gpt", ConfigError, "--model ", o.model,
                " fixes the shape; drop --hidden, --heads, --layers, --vocab and --family");
  } else if (llama && hidden) {
    PSTAR_CHECK(!heads, ConfigError,
                "--heads: Llama-3-like shapes have head_dim 128, so heads = hidden/128; drop it");
    PSTAR_CHECK(*hidden >= 1024 && *hidden % 1024 == 0, ConfigError, "--hidden ", *hidden,
                ": Llama-3-like shapes need a multiple of 1024 (hidden/128 query heads in groups "
                "of 8 key/value heads)");
  } else if (hidden) {
    PSTAR_CHECK(*hidden >= 1, ConfigError, "--hidden: ", *hidden, " must be positive");
    if (heads) PSTAR_CHECK(*heads >= 1, ConfigError, "--heads: ", *heads, " must be positive");
    const int64_t a = heads.value_or(std::max<int64_t>(1, *hidden / 128));
    PSTAR_CHECK(*hidden % a == 0, ConfigError, "--hidden ", *hidden,
                " is not divisible by --heads ", a, "; choose heads that divide hidden");
    heads = a;
  }
  plan::Estimate est;
  if (!o.model.empty()) {
    const model::ModelShape shape = resolve_named_model(o);
    w.seq_len = shape.seq_len();
    w.vocab = shape.vocab_size();
    est.best = plan::evaluate(hw, w, shape);
    est.how = str_cat("the preset ", o.model);
  } else if (o.layers) {
    PSTAR_CHECK(*o.layers >= 1, ConfigError, "--layers: ", *o.layers, " must be positive");
    est.best = plan::evaluate(hw, w,
                              llama ? plan::llama3_shape(*hidden, *o.layers, w.vocab, w.seq_len)
                                    : plan::gpt_shape(w, *hidden, *o.layers, *heads));
    est.how = "the shape given";
  } else {
    est = search(o, hw, w);
    if (est.best.params == 0) {
      // Nothing fits: explain with the smallest shape tried.
      const int64_t h = hidden.value_or(llama ? 1024 : 256);
      const auto e = plan::evaluate(
          hw, w,
          llama ? plan::llama3_shape(h, 1, w.vocab, w.seq_len)
                : plan::gpt_shape(w, h, 1, heads.value_or(std::max<int64_t>(1, h / 128))));
      PSTAR_THROW(OutOfMemoryError, "no ", llama ? "Llama-3-like model" : "GPT", " of ",
                  hidden ? "hidden " + std::to_string(h) : "any searched width",
                  " fits this hardware; even one layer of hidden ", h, ": ", e.fit.reason);
    }
  }
  const plan::Evaluation& e = est.best;
  const Tiers tiers =
      memory_items(e, hw.gpu_memory, hw.cpu_memory, hw.gpus_per_node, hw.nvme_capacity);
  const auto ds = plan::deepspeed_estimates(hw, e.shape.hidden(), w.vocab);
  if (o.json) {
    json j = evaluation_json(e, tiers);
    j["fits"] = e.fit.fits;
    j["reason"] = e.fit.reason;
    j["search"] = est.how;
    j["hardware"] = {{"name", hw.name},
                     {"gpu_memory", hw.gpu_memory},
                     {"cpu_memory", hw.cpu_memory},
                     {"gpus_per_node", hw.gpus_per_node},
                     {"nodes", hw.nodes}};
    if (hw.nvme_capacity > 0) {
      j["hardware"]["nvme_capacity"] = hw.nvme_capacity;
      j["hardware"]["nvme_read_gbps"] = hw.nvme_read_gbps;
      j["hardware"]["nvme_write_gbps"] = hw.nvme_write_gbps;
    }
    j["workload"] = {{"seq_len", w.seq_len},
                     {"micro_batch", w.micro_batch},
                     {"activation_checkpointing", w.checkpointing},
                     {"precision", w.precision},
                     {"chunk_size", w.chunk_size},
                     {"vocab", w.vocab}};
    if (has_time_model(hw)) j["time"] = time_json(e.time, w, hw);
    json ladder = json::array();
    for (const auto& l : est.ladder)
      ladder.push_back({{"name", l.name}, {"params", l.params}, {"fits", l.fits}});
    j["ladder"] = ladder;
    if (o.compare) {
      json c = json::array();
      for (const auto& d : ds)
        c.push_back({{"name", d.name},
                     {"max_params", d.max_params},
                     {"gpu_formula", d.gpu_formula},
                     {"cpu_formula", d.cpu_formula},
                     {"source", "DeepSpeed's published estimator formulas (theirs)"}});
      j["compare"] = c;
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_report(o, hw, w, est, tiers, ds);
  }
  PSTAR_CHECK(e.fit.fits, OutOfMemoryError, o.model.empty() ? "" : o.model + ": ",
              model_text(e.shape), " does not fit: ", e.fit.reason);
  return 0;
}

}  // namespace pstar::cmd
