#include "torch_trace.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <utility>

#include <torch/csrc/autograd/profiler_kineto.h>

#include "pstar/base/error.h"
#include "pstar/core/log.h"

namespace pstar::train {

namespace profiler = torch::autograd::profiler;
namespace profiler_impl = torch::profiler::impl;

TorchTraceRequest parse_torch_trace_request(const std::string& value) {
  // The path may hold colons of its own: the step and count are the trailing numbers only.
  static const std::regex form(R"(^(.+?)(?::(\d+))?(?::(\d+))?$)");
  std::smatch m;
  TorchTraceRequest r;
  const bool matched = std::regex_match(value, m, form);
  PSTAR_CHECK(matched && !m[1].str().empty(), ConfigError, "PSTAR_TORCH_TRACE='", value,
              "': expected PATH[:STEP[:COUNT]], e.g. /tmp/step.trace.json:3:1");
  r.path = m[1].str();
  if (m[2].matched) r.first_step = std::stoll(m[2].str());
  if (m[3].matched) r.steps = std::stoll(m[3].str());
  PSTAR_CHECK(r.first_step >= 1 && r.steps >= 1, ConfigError, "PSTAR_TORCH_TRACE='", value,
              "': STEP and COUNT start at 1 (got step ", r.first_step, ", count ", r.steps, ")");
  const std::filesystem::path parent = std::filesystem::path(r.path).parent_path();
  PSTAR_CHECK(parent.empty() || std::filesystem::is_directory(parent), ConfigError,
              "PSTAR_TORCH_TRACE='", value, "': the folder ", parent.string(),
              " does not exist; create it or name another");
  return r;
}

std::optional<TorchTraceRequest> torch_trace_request_from_env() {
  const char* value = std::getenv("PSTAR_TORCH_TRACE");
  if (value == nullptr || *value == 0) return std::nullopt;
  return parse_torch_trace_request(value);
}

TorchTrace::TorchTrace(TorchTraceRequest request, bool cuda)
    : request_(std::move(request)), cuda_(cuda) {}

TorchTrace::~TorchTrace() {
  try {
    stop();
  } catch (const std::exception& e) {
    log::warn("PSTAR_TORCH_TRACE: stopping the profiler failed: ", e.what());
  }
}

void TorchTrace::before_step(int64_t step) {
  if (running_ || done_ || step != request_.first_step) return;
  const profiler_impl::ProfilerConfig config(profiler_impl::ProfilerState::KINETO,
                                             /*report_input_shapes=*/true);
  std::set<profiler_impl::ActivityType> activities{profiler_impl::ActivityType::CPU};
  if (cuda_) activities.insert(profiler_impl::ActivityType::CUDA);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  running_ = true;
  log::info("PSTAR_TORCH_TRACE: tracing ", request_.steps, " step(s) from step ", step,
            cuda_ ? " (CPU operators and CUDA activity)" : " (CPU operators)");
}

void TorchTrace::after_step(int64_t step) {
  if (running_ && step >= request_.first_step + request_.steps - 1) stop();
}

void TorchTrace::stop() {
  if (!running_) return;
  running_ = false;
  done_ = true;
  std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
  std::error_code ec;
  std::filesystem::remove(request_.path, ec);
  std::string why;
  try {
    result->save(request_.path);
  } catch (const c10::Error& e) {
    why = e.what_without_backtrace();
  }
  if (std::filesystem::exists(request_.path)) {
    log::info("PSTAR_TORCH_TRACE: ", request_.path, " (", std::filesystem::file_size(request_.path),
              " bytes, Chrome trace)");
  } else if (why.empty() || why.find("Kineto") != std::string::npos) {
    log::warn(
        "PSTAR_TORCH_TRACE: this LibTorch was built without Kineto, so no trace was "
        "written to ",
        request_.path, " (PyTorch's own LibTorch has it)");
  } else {
    log::warn("PSTAR_TORCH_TRACE: LibTorch could not write ", request_.path, ": ", why);
  }
}

}  // namespace pstar::train
