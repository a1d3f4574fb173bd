// The run's TensorBoard event file (train/tensorboard.h).
#include "pstar/train/tensorboard.h"

#include <chrono>
#include <cmath>
#include <type_traits>
#include <variant>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/core/log.h"
#include "pstar/formats/event_file.h"

namespace pstar::train {

namespace {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Shown by TensorBoard's text plugin as markdown: indented four spaces, the JSON is a code block
// and keeps its lines.
std::string markdown_code_block(const std::string& text) {
  std::string out = "    ";
  for (char c : text) {
    out += c;
    if (c == '\n') out += "    ";
  }
  return out;
}

}  // namespace

TensorBoardLog::TensorBoardLog(const std::string& dir, const std::string& what)
    : file_(std::make_unique<formats::EventFileWriter>(dir, what)) {}

TensorBoardLog::~TensorBoardLog() { flush(); }

const std::string& TensorBoardLog::path() const { return file_->path(); }

void TensorBoardLog::start_run(int64_t resumed_step, const std::string& config_json) {
  if (resumed_step > 0) file_->add(formats::session_start_event(wall_time(), resumed_step + 1));
  file_->add(formats::text_event(wall_time(), 0, "config", markdown_code_block(config_json)));
  flush();
}

void TensorBoardLog::write_step(const StepMetrics& m) {
  std::vector<formats::EventScalar> scalars;
  for (const MetricValue& v : metric_values(m)) {
    if (v.tag.empty()) continue;
    const double value = std::visit(
        [](auto x) {
          if constexpr (std::is_same_v<decltype(x), bool>)
            return x ? 1.0 : 0.0;
          else
            return static_cast<double>(x);
        },
        v.value);
    if (std::isfinite(value)) scalars.push_back({std::string(v.tag), static_cast<float>(value)});
  }
  file_->add(formats::scalars_event(wall_time(), m.step, scalars));
}

void TensorBoardLog::write_eval(int64_t step, double loss) {
  file_->add(formats::scalars_event(wall_time(), step,
                                    {{std::string(kEvalLossTag), static_cast<float>(loss)}}));
}

void TensorBoardLog::flush() {
  try {
    file_->flush();
  } catch (const IoError& e) {
    log::warn("tensorboard: ", e.what(), "; the run goes on without them");
  }
}

}  // namespace pstar::train
