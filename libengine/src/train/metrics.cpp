#include "pstar/train/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>
#include <variant>

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"

namespace pstar::train {

MetricsWriter::MetricsWriter(const std::string& path)
    : path_(path), file_(std::fopen(path.c_str(), "w")) {
  PSTAR_CHECK(file_ != nullptr, IoError, "--metrics: cannot create ", path, ": ",
              std::strerror(errno));
}

std::vector<MetricValue> metric_values(const StepMetrics& m) {
  std::vector<MetricValue> out = {
      {"step", "", m.step},  // the event's step, not a scalar
      {"loss", "train/loss", m.loss},
      {"counted_targets", "train/counted_targets", m.counted_targets},
      {"lr", "train/lr", m.lr},
      {"grad_norm", "train/grad_norm", m.grad_norm},
      {"loss_scale", "train/loss_scale", m.loss_scale},
      {"skipped", "", m.skipped},
      {"tokens", "train/tokens", m.tokens},
      {"step_time_s", "perf/step_time_s", m.step_time_s},
      {"tokens_per_s", "perf/tokens_per_s", m.tokens_per_s},
      {"elapsed_s", "perf/elapsed_s", m.elapsed_s},
      {"forward_s", "perf/forward_s", m.times.forward_s},
      {"backward_s", "perf/backward_s", m.times.backward_s},
      {"optimizer_s", "perf/optimizer_s", m.times.optimizer_s},
  };
  if (m.eval_loss) out.push_back({"eval_loss", kEvalLossTag, *m.eval_loss});
  if (m.routing) {
    const RoutingMetrics& r = *m.routing;
    if (r.aux_loss >= 0) out.push_back({"router_aux_loss", "moe/router_aux_loss", r.aux_loss});
    out.push_back({"experts_idle", "moe/experts_idle", r.idle_experts});
    out.push_back(
        {"expert_load_max_over_mean", "moe/expert_load_max_over_mean", r.load_max_over_mean});
    out.push_back({"experts_idle_step", "moe/experts_idle_step", r.idle_in_step});
  }
  // What the trainer or the engine does not measure is -1: left out.
  const engine::EngineMetrics& e = m.engine;
  const MetricValue measured[] = {
      {"tflops", "perf/tflops", m.tflops},
      {"device_peak_bytes", "memory/device_peak_bytes", e.device_peak_bytes},
      {"device_reserved_peak_bytes", "memory/device_reserved_peak_bytes",
       e.device_reserved_peak_bytes},
      {"host_peak_bytes", "memory/host_peak_bytes", e.host_peak_bytes},
      {"model_data_bytes", "memory/model_data_bytes", e.model_data_bytes},
      {"pinned_bytes", "memory/pinned_bytes", e.pinned.current},
      {"pinned_peak_bytes", "memory/pinned_peak_bytes", e.pinned.peak},
      {"pageable_bytes", "memory/pageable_bytes", e.pageable.current},
      {"pageable_peak_bytes", "memory/pageable_peak_bytes", e.pageable.peak},
      {"device_syncs", "engine/device_syncs", e.steady.device_syncs},
      {"host_pool_allocated_bytes", "engine/host_pool_allocated_bytes",
       e.steady.pool_allocated_bytes},
      {"host_pool_trims", "engine/host_pool_trims", e.steady.pool_trims},
      {"moved_h2d_bytes", "engine/moved_h2d_bytes", e.moved_h2d_bytes},
      {"moved_d2h_bytes", "engine/moved_d2h_bytes", e.moved_d2h_bytes},
      {"prefetched_h2d_bytes", "engine/prefetched_h2d_bytes", e.prefetched_h2d_bytes},
      {"move_s", "engine/move_s", e.move_s},
      {"adam_device_chunks", "adam/adam_device_chunks", e.adam.device_chunks},
      {"adam_host_passes", "adam/adam_host_passes", e.adam.host_passes},
      {"adam_host_bytes", "adam/adam_host_bytes", e.adam.host_bytes},
      {"grad_norm_host_bytes", "adam/grad_norm_host_bytes", e.adam.norm_host_bytes},
      {"adam_queued_chunks", "adam/adam_queued_chunks", e.adam.queued_chunks},
      {"adam_early_chunks", "adam/adam_early_chunks", e.adam.early_chunks},
      {"adam_speculated_chunks", "adam/adam_speculated_chunks", e.adam.speculated_chunks},
      {"adam_rolled_back_chunks", "adam/adam_rolled_back_chunks", e.adam.rolled_back_chunks},
      {"adam_cancelled_chunks", "adam/adam_cancelled_chunks", e.adam.cancelled_chunks},
      {"adam_wait_s", "adam/adam_wait_s", e.adam.wait_s},
      {"adam_waited_behind", "adam/adam_waited_behind", e.adam.waited_behind},
      {"adam_early_s", "adam/adam_early_s", e.adam.early_s},
      {"adam_host_s", "adam/adam_host_s", e.adam.host_s},
      {"adam_rollback_s", "adam/adam_rollback_s", e.adam.rollback_s},
      {"nvme_read_bytes", "nvme/nvme_read_bytes", e.nvme.read_bytes},
      {"nvme_write_bytes", "nvme/nvme_write_bytes", e.nvme.write_bytes},
      {"nvme_wait_s", "nvme/nvme_wait_s", e.nvme.wait_s},
      {"comm_bytes", "comm/comm_bytes", e.comm_bytes},
      {"comm_s", "comm/comm_s", e.comm_s},
      {"comm_staged_bytes", "comm/comm_staged_bytes", e.comm_staged_bytes},
      {"comm_wait_s", "comm/comm_wait_s", e.comm_wait_s},
      {"comm_gathers_ahead", "comm/comm_gathers_ahead", e.comm_gathers_ahead},
      {"gathers", "comm/gathers", e.gathers},
      {"reductions", "comm/reductions", e.reductions},
  };
  for (const MetricValue& v : measured) {
    const bool known = std::visit(
        [](auto x) {
          if constexpr (std::is_same_v<decltype(x), bool>)
            return true;
          else
            return x >= 0;  // false for NaN too
        },
        v.value);
    if (known) out.push_back(v);
  }
  return out;
}

void MetricsWriter::write(const StepMetrics& m) {
  nlohmann::json line = nlohmann::json::object();
  for (const MetricValue& v : metric_values(m))
    std::visit([&](auto x) { line[std::string(v.key)] = x; }, v.value);
  for (const SampleText& s : m.eval_samples)
    line["eval_samples"].push_back({{"prompt", s.prompt}, {"completion", s.completion}});
  write_line(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void MetricsWriter::write_startup(const core::SetupPhases& phases, double setup_s) {
  nlohmann::json line = {{"record", "startup"}, {"setup_s", setup_s}};
  for (size_t i = 0; i < core::kNumSetupPhases; ++i) {
    const auto phase = static_cast<core::SetupPhase>(i);
    const std::string name = core::setup_phase_name(phase);
    line[name + "_s"] = phases.seconds(phase);
    if (phase == core::SetupPhase::kAlloc || phase == core::SetupPhase::kInit ||
        phase == core::SetupPhase::kWeights)
      line[name + "_bytes"] = phases.bytes(phase);
  }
  line["other_s"] = std::max(0.0, setup_s - phases.total_seconds());
  write_line(line.dump() + "\n");
}

void MetricsWriter::write_line(const std::string& text) {
  PSTAR_CHECK(std::fwrite(text.data(), 1, text.size(), file_.get()) == text.size() &&
                  std::fflush(file_.get()) == 0,
              IoError, "--metrics: cannot write ", path_, ": ", std::strerror(errno));
}

}  // namespace pstar::train
