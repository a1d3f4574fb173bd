// `pstar estimate`'s flags turned into the engine's structs: sizes, counts and rates, the named
// model, the hardware (a preset and its overrides) and the workload.
#include "estimate_parts.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/estimate.h"

namespace pstar::cmd::estimate_parts {

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

std::string known_model_names() {
  std::string names;
  for (const auto& p : model::gpt_presets())
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  for (const auto& p : model::decoder_presets()) names += ", " + std::string(p.name);
  return names;
}

// --model NAME: any GPT or Llama-family preset, at --seq-len when given.
model::ModelShape resolve_named_model(const EstimateCommandOptions& o) {
  bool known = model::find_decoder_preset(o.model) != nullptr;
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

}  // namespace pstar::cmd::estimate_parts
