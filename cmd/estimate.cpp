// `pstar estimate`: the largest GPT or Llama-3-like model given hardware trains, or whether a named
// model or a config fits and how fast it trains (docs/estimate.md).
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "estimate_parts.h"
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

namespace estimate_parts {

plan::Estimate search(const EstimateCommandOptions& o, const plan::Hardware& hw,
                      const plan::Workload& w) {
  if (llama_search(o)) return plan::estimate_largest_llama(hw, w, o.hidden);
  return plan::estimate_largest(hw, w, o.hidden, o.hidden ? o.heads : std::nullopt);
}

}  // namespace estimate_parts

namespace {

using namespace estimate_parts;  // the command's own parts (estimate_parts.h)

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
  sub->add_option(
      "--model", o->model,
      "Check this model: a GPT or decoder preset, e.g. llama-3.1-8b, qwen3-8b, GPT3_6.7B");
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
