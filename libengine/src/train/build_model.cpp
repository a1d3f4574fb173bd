// Building the model and, for the chunk engine, the engine that takes it into chunks as it is
// built.
#include <memory>
#include <string>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/model/factory.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/activations.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/plan/run_plan.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/run_facts.h"
#include "pstar/train/trainer.h"
#include "trainer_impl.h"

namespace pstar::train {

using engine::ChunkedEngine;

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

// The chunk engine's device tier for the plan's compute device (Note [device tier]).
std::unique_ptr<tier::DeviceTier> make_tier(const plan::RunPlan& plan,
                                            int64_t predicted_non_model) {
  if (plan.device == plan::DeviceKind::kCpu) return tier::make_emulated_tier();
  return tier::make_device_tier(plan_device(plan),
                                ChunkedEngine::device_arena_bytes(plan, predicted_non_model));
}

std::shared_ptr<model::CausalLM> build_model(const config::TrainConfig& config) {
  const model::ModelShape shape = model::resolve_model_shape(config.model);
  torch::manual_seed(config.training.seed);
  auto model = model::build_causal_lm(shape);
  model::load_pretrained(shape, config.model.init_from, *model);
  return model;
}

NonModelPrediction predict_non_model(const plan::RunPlan& plan) {
  const model::ModelShape shape = model::resolve_model_shape(plan.config.model);
  NonModelPrediction p;
  p.activations = plan::estimate_model_activations(shape, plan.config).peak;
  // Note [library workspaces]: measured on the device before the arena is sized from this.
  p.library_workspaces = tier::library_workspace_bytes(plan_device(plan), plan_dtype(plan));
  return p;
}

ModelAndEngine build_model_and_engine(const plan::RunPlan& plan, dist::Communicator* comm) {
  const config::TrainConfig& config = plan.config;
  if (config.engine.mode != config::EngineMode::kChunked)
    return ModelAndEngine{build_model(config), nullptr};
  const model::ModelShape shape = model::resolve_model_shape(config.model);
  const NonModelPrediction predicted = predict_non_model(plan);
  const int64_t non_model = predicted.total();
  if (predicted.library_workspaces > 0)
    log::info("CUDA libraries' workspaces: ", format_bytes(predicted.library_workspaces),
              " on the device, counted as non-model memory from the start");
  auto engine = std::make_unique<ChunkedEngine>(plan, plan::model_leaf_modules(shape), non_model,
                                                comm, make_tier(plan, non_model));
  torch::manual_seed(config.training.seed);
  auto model =
      model::build_causal_lm(shape, [&](torch::nn::Module& unit, const std::string& prefix) {
        engine->register_unit(unit, prefix);
      });
  engine->finish_registration();
  model::load_pretrained(shape, config.model.init_from, *model,
                         [&](const std::string& name, const at::Tensor& value) {
                           engine->load_parameter(name, value);
                         });
  return ModelAndEngine{model, std::move(engine)};
}

}  // namespace pstar::train
