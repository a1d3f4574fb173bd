// engine.mode "torch": parameters as plain LibTorch tensors on one device, fp32 or low precision
// with fp32 masters, updated by torch::optim::Adam/AdamW. The reference the chunk engine is
// checked against.
#pragma once

#include <memory>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "pstar/train/param_engine.h"

namespace pstar::config {
struct TrainConfig;
}
namespace pstar::model {
class CausalLM;
}

namespace pstar::train {

// Moves the model to `device` and sets up precision and the optimizer.
std::unique_ptr<ParamEngine> make_torch_engine(const config::TrainConfig& config,
                                               model::CausalLM& model, c10::Device device,
                                               c10::ScalarType compute_dtype);

}  // namespace pstar::train
