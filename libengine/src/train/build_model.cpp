// Building the model and, for the chunk engine, the engine that takes it into chunks as it is
// built.
#include <memory>
#include <string>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/core/device.h"
#include "pstar/formats/config.h"
#include "pstar/model/gpt.h"
#include "pstar/model/gpt_shape.h"
#include "pstar/model/hf_gpt2.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/plan/run_plan.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/chunked_engine.h"
#include "pstar/train/run_facts.h"
#include "pstar/train/trainer.h"
#include "trainer_impl.h"

namespace pstar::train {
namespace {

// ConfigError for bf16.enabled "auto": the run plan decides it.
c10::ScalarType compute_dtype(const config::TrainConfig& c) {
  return precision_dtype(plan::decided_precision(c));
}

}  // namespace

c10::Device compute_device(const config::TrainConfig& config, const std::string& device_option) {
  if (config.engine.mode != config::EngineMode::kChunked || tier::cuda_tier_built())
    return core::resolve_device(device_option, "--device");
  // Without the CUDA tier the chunk engine's device tier is emulated on the CPU (Note [device
  // tier]), whatever GPU LibTorch sees.
  PSTAR_CHECK(device_option != "cuda", ConfigError,
              "--device cuda: this build of pstar has no CUDA device tier for the chunk engine (it "
              "was built without a CUDA LibTorch; docs/cuda.md says how to build one); use "
              "--device cpu (the device tier emulated on the CPU) or engine.mode \"torch\"");
  if (device_option != "cpu") core::resolve_device(device_option, "--device");  // checks the name
  return c10::Device(c10::kCPU);
}

// The chunk engine's device tier for a compute device (Note [device tier]).
std::unique_ptr<tier::DeviceTier> make_tier(c10::Device device, const config::TrainConfig& config,
                                            int64_t predicted_non_model) {
  if (device.is_cpu()) return tier::make_emulated_tier();
  return tier::make_device_tier(device,
                                ChunkedEngine::device_arena_bytes(config, predicted_non_model));
}

std::shared_ptr<model::CausalLM> build_model(const config::TrainConfig& config) {
  auto shape = model::resolve_gpt_config(config.model);
  torch::manual_seed(config.training.seed);
  auto gpt = std::make_shared<model::Gpt>(shape);
  if (!config.model.init_from.empty())
    model::load_hf_gpt2_safetensors(*gpt, config.model.init_from);
  return gpt;
}

ModelAndEngine build_model_and_engine(const config::TrainConfig& config, dist::Communicator* comm,
                                      c10::Device device) {
  if (config.engine.mode != config::EngineMode::kChunked)
    return ModelAndEngine{build_model(config), nullptr};
  auto shape = model::resolve_gpt_config(config.model);
  const int64_t non_model =
      plan::estimate_gpt_activations(plan::gpt_activation_input(config, shape)).peak;
  auto engine =
      std::make_unique<ChunkedEngine>(config, compute_dtype(config), plan::gpt_leaf_modules(shape),
                                      non_model, comm, make_tier(device, config, non_model));
  torch::manual_seed(config.training.seed);
  auto gpt =
      std::make_shared<model::Gpt>(shape, [&](torch::nn::Module& unit, const std::string& prefix) {
        engine->register_unit(unit, prefix);
      });
  engine->finish_registration();
  if (!config.model.init_from.empty()) {
    model::load_hf_gpt2_safetensors(*gpt, config.model.init_from,
                                    [&](const std::string& name, const at::Tensor& value) {
                                      engine->load_parameter(name, value);
                                    });
  }
  return ModelAndEngine{gpt, std::move(engine)};
}

}  // namespace pstar::train
