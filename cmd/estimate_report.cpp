// `pstar estimate`'s output: the model and parameter count in words, each memory tier's items,
// the step time's terms, as tables or JSON.
#include "estimate_parts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/estimate.h"

namespace pstar::cmd::estimate_parts {

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
// gated silu MLP 14336, vocabulary 128256, untied head".
std::string model_text(const model::ModelShape& s) {
  switch (s.family) {
    case model::ModelFamily::kGpt:
      return str_cat("GPT hidden ", s.gpt.hidden, ", ", s.gpt.layers, " layers, ", s.gpt.heads,
                     " heads");
    case model::ModelFamily::kDecoder: {
      const model::DecoderConfig& c = s.decoder;
      const std::string mlp =
          c.moe ? str_cat(c.moe->experts, " experts of width ", c.moe->expert_intermediate,
                          " (top ", c.moe->top_k, ", ", params_text(c.active_params()),
                          " parameters active a token)")
                : str_cat(c.intermediate);
      return str_cat(c.model_type(), " hidden ", c.hidden, ", ", c.layers, " layers, ", c.heads,
                     "/", c.kv_heads, " query/key-value heads of ", c.head_dim, ", gated ",
                     model::mlp_activation_name(c.activation), " MLP ", mlp, ", vocabulary ",
                     c.vocab_size, c.tie_word_embeddings ? ", tied head" : ", untied head");
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
    j["model_type"] = s.decoder.model_type();
    j["heads"] = s.decoder.heads;
    j["kv_heads"] = s.decoder.kv_heads;
    j["head_dim"] = s.decoder.head_dim;
    if (s.decoder.moe) {
      // Compute (FLOPs, TFLOPS) counts the active parameters; memory and Adam count them all.
      j["active_params"] = s.decoder.active_params();
      j["experts"] = s.decoder.moe->experts;
      j["experts_per_token"] = s.decoder.moe->top_k;
    }
    j["intermediate"] = s.decoder.intermediate;
    j["tie_word_embeddings"] = s.decoder.tie_word_embeddings;
  }
  return j;
}

Tiers memory_items(const plan::Evaluation& e, int64_t gpu_capacity, int64_t host_capacity,
                   int64_t ranks_per_host, int64_t nvme_capacity) {
  const auto& f = e.fit;
  // The padding is spread over the chunks' elements, each tier holding its payloads' share of it
  // (chunks may differ in size: Note [chunk sizes]).
  const auto owned = static_cast<double>(f.owned.host_elements + f.owned.device_elements +
                                         f.owned.nvme_host_elements + f.owned.nvme_device_elements);
  const double compute_share =
      static_cast<double>(e.payload.compute()) / static_cast<double>(e.payload.whole());
  const double device_share =
      owned > 0 ? (static_cast<double>(f.owned.device_elements) +
                   static_cast<double>(f.owned.nvme_device_elements) * compute_share) /
                      owned
                : 0;
  const double nvme_share =
      owned > 0 ? static_cast<double>(f.owned.nvme_host_elements + f.owned.nvme_device_elements) *
                      (1 - compute_share) / owned
                : 0;
  const double padding = static_cast<double>(f.owned.padding_bytes);
  Tiers t;
  t.gpu = json{
      {"param_grad_chunks",
       (f.owned.device_elements + f.owned.nvme_device_elements) * e.payload.compute()},
      {"optimizer_chunks", f.owned.device_elements * e.payload.optimizer()},
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
       ranks_per_host * (f.owned.host_elements + f.owned.nvme_host_elements) * e.payload.compute()},
      {"optimizer_chunks", ranks_per_host * f.owned.host_elements * e.payload.optimizer()},
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
      {"communication_exposed_s", t.comm_exposed_s()},
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
  std::printf("\nStep time (micro-batch %lld x %lld tokens per GPU, no overlap assumed%s%s)\n",
              static_cast<long long>(w.micro_batch), static_cast<long long>(w.seq_len),
              t.nvme_read_bytes > 0 ? " but of host Adam with NVMe I/O" : "",
              t.comm_s > 0 ? (t.nvme_read_bytes > 0 ? " and of communication with compute"
                                                    : " but of communication with compute")
                           : "");
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
  if (t.comm_s > 0) {
    // Note [communication time]: beside compute, only what outlasts it counts.
    std::printf("  %-46s %10.3f s\n", "  all-gather + reduce-scatter, beside compute", t.comm_s);
    row("communication not hidden by compute", t.comm_exposed_s());
  }
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
        {"oversized_chunks", e.layout.oversized_chunks},
        {"split_modules", e.layout.split_modules},
        {"largest_chunk", e.layout.largest_chunk()},
        {"padding_elements", e.layout.padding_elements()},
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
  // Note [split modules]: on several ranks such modules are split over groups of their own.
  int64_t largest_part = 0;
  for (int64_t k = 0; k < e.layout.num_chunks; ++k)
    if (e.layout.part_of(k) >= 0) largest_part = std::max(largest_part, e.layout.size_of(k));
  const std::string larger =
      e.layout.split_modules > 0
          ? str_cat(" (", e.layout.oversized_chunks, " of them the parts of ",
                    e.layout.split_modules, " module(s) split over the ranks, up to ", largest_part,
                    " elements each)")
      : e.layout.oversized_chunks > 0
          ? str_cat(" (", e.layout.oversized_chunks, " of them larger, one module each, up to ",
                    e.layout.largest_chunk(), ")")
          : std::string();
  std::printf(
      "  %lld chunks of %lld elements%s at %lld bytes/parameter, padding %.2f%%; per GPU %lld "
      "owned: %lld on the host, %lld kept on the GPU\n",
      static_cast<long long>(e.layout.num_chunks), static_cast<long long>(e.layout.chunk_size),
      larger.c_str(), static_cast<long long>(e.payload.whole()),
      100.0 * static_cast<double>(e.layout.padding_elements()) /
          static_cast<double>(e.layout.total_elements()),
      static_cast<long long>(e.fit.owned_chunks), static_cast<long long>(e.fit.host_chunks),
      static_cast<long long>(e.fit.device_chunks));
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

}  // namespace pstar::cmd::estimate_parts
