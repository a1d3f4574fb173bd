// The chunk engine's hooks for evaluation forwards (Note [evaluation] in engine/chunked_engine.h).
// Private to the chunk engine.
#pragma once

#include <cstdint>
#include <vector>

#include "pstar/engine/chunked_engine.h"
#include "pstar/model/hooks.h"

namespace pstar::engine {

class EngineObserver;

class EvalHooks : public model::ModuleHooks {
 public:
  explicit EvalHooks(ChunkedEngine::Impl& engine) : s_(engine) {}

  // Between steps: notes where every chunk is and stops reporting to the observer.
  void begin();
  // Puts back every chunk the evaluation moved, releases gathered groups, resumes the observer
  // and drops the communicator's figures of the evaluation.
  void end();
  bool active() const { return active_; }

  void pre_forward(torch::nn::Module& module) override;
  void post_forward(torch::nn::Module& module) override;
  void pre_backward(torch::nn::Module& module) override;

 private:
  ChunkedEngine::Impl& s_;
  std::vector<bool> resident_before_;  // per chunk: its compute payloads were on the device
  std::vector<int64_t> brought_;       // chunks this evaluation uploaded, on the device now
  EngineObserver* observer_ = nullptr;
  bool active_ = false;
};

}  // namespace pstar::engine
