#include "pstar/train/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"

namespace pstar::train {

MetricsWriter::MetricsWriter(const std::string& path)
    : path_(path), file_(std::fopen(path.c_str(), "w")) {
  PSTAR_CHECK(file_ != nullptr, IoError, "--metrics: cannot create ", path, ": ",
              std::strerror(errno));
}

void MetricsWriter::write(const StepMetrics& m) {
  nlohmann::json line = {
      {"step", m.step},
      {"loss", m.loss},
      {"counted_targets", m.counted_targets},
      {"lr", m.lr},
      {"grad_norm", m.grad_norm},
      {"loss_scale", m.loss_scale},
      {"skipped", m.skipped},
      {"tokens", m.tokens},
      {"step_time_s", m.step_time_s},
      {"tokens_per_s", m.tokens_per_s},
      {"elapsed_s", m.elapsed_s},
      {"forward_s", m.times.forward_s},
      {"backward_s", m.times.backward_s},
      {"optimizer_s", m.times.optimizer_s},
  };
  for (const auto& [key, value] :
       {std::pair<const char*, int64_t>{"device_peak_bytes", m.engine.device_peak_bytes},
        {"device_reserved_peak_bytes", m.engine.device_reserved_peak_bytes},
        {"device_syncs", m.engine.device_syncs},
        {"host_peak_bytes", m.engine.host_peak_bytes},
        {"moved_h2d_bytes", m.engine.moved_h2d_bytes},
        {"moved_d2h_bytes", m.engine.moved_d2h_bytes},
        {"prefetched_h2d_bytes", m.engine.prefetched_h2d_bytes},
        {"adam_device_chunks", m.engine.adam.device_chunks},
        {"adam_host_bytes", m.engine.adam.host_bytes},
        {"adam_queued_chunks", m.engine.adam.queued_chunks},
        {"adam_early_chunks", m.engine.adam.early_chunks},
        {"adam_speculated_chunks", m.engine.adam.speculated_chunks},
        {"adam_rolled_back_chunks", m.engine.adam.rolled_back_chunks},
        {"model_data_bytes", m.engine.model_data_bytes},
        {"pinned_bytes", m.engine.pinned.current},
        {"pinned_peak_bytes", m.engine.pinned.peak},
        {"pageable_bytes", m.engine.pageable.current},
        {"pageable_peak_bytes", m.engine.pageable.peak},
        {"comm_bytes", m.engine.comm_bytes},
        {"comm_staged_bytes", m.engine.comm_staged_bytes},
        {"comm_gathers_ahead", m.engine.comm_gathers_ahead},
        {"nvme_read_bytes", m.engine.nvme.read_bytes},
        {"nvme_write_bytes", m.engine.nvme.write_bytes},
        {"gathers", m.engine.gathers},
        {"reductions", m.engine.reductions}}) {
    if (value >= 0) line[key] = value;  // chunk engine / several ranks only
  }
  if (m.eval_loss) line["eval_loss"] = *m.eval_loss;
  if (m.engine.comm_s >= 0) line["comm_s"] = m.engine.comm_s;
  if (m.engine.comm_wait_s >= 0) line["comm_wait_s"] = m.engine.comm_wait_s;
  if (m.engine.adam.wait_s >= 0) line["adam_wait_s"] = m.engine.adam.wait_s;
  if (m.engine.adam.early_s >= 0) line["adam_early_s"] = m.engine.adam.early_s;
  if (m.engine.adam.host_s >= 0) line["adam_host_s"] = m.engine.adam.host_s;
  if (m.engine.adam.rollback_s >= 0) line["adam_rollback_s"] = m.engine.adam.rollback_s;
  if (m.engine.move_s >= 0) line["move_s"] = m.engine.move_s;
  if (m.engine.nvme.wait_s >= 0) line["nvme_wait_s"] = m.engine.nvme.wait_s;
  write_line(line.dump() + "\n");
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
