// engine.mode "torch": parameters as plain LibTorch tensors on one device, fp32 or low precision
// with fp32 masters, updated by torch::optim::Adam/AdamW. The reference the chunk engine is
// checked against.
#pragma once

#include <memory>

#include "pstar/engine/param_engine.h"

namespace pstar::plan {
struct RunPlan;
}
namespace pstar::model {
class CausalLM;
}

namespace pstar::engine {

// Moves the model to the plan's device and sets up its precision and optimizer.
std::unique_ptr<ParamEngine> make_torch_engine(const plan::RunPlan& plan, model::CausalLM& model);

}  // namespace pstar::engine
