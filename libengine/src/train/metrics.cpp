#include "pstar/train/metrics.h"

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/train/trainer.h"

namespace pstar::train {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "w")) {
  PSTAR_CHECK(file_ != nullptr, IoError, "--metrics: cannot create ", path, ": ", std::strerror(errno));
}

void MetricsWriter::write(const StepMetrics& m) {
  nlohmann::json line = {
      {"step", m.step},
      {"loss", m.loss},
      {"lr", m.lr},
      {"grad_norm", m.grad_norm},
      {"loss_scale", m.loss_scale},
      {"skipped", m.skipped},
      {"tokens", m.tokens},
      {"step_time_s", m.step_time_s},
      {"tokens_per_s", m.tokens_per_s},
      {"elapsed_s", m.elapsed_s},
  };
  const std::string text = line.dump() + "\n";
  PSTAR_CHECK(std::fwrite(text.data(), 1, text.size(), file_.get()) == text.size() &&
                  std::fflush(file_.get()) == 0,
              IoError, "--metrics: cannot write ", path_, ": ", std::strerror(errno));
}

}  // namespace pstar::train
