// Building the model and, for the chunk engine, the engine that takes it into chunks as it is
// built.
#include <algorithm>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/core/clock.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/model/factory.h"
#include "pstar/model/init.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/activations.h"
#include "pstar/plan/estimate.h"
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

std::shared_ptr<model::CausalLM> build_model(const config::TrainConfig& config,
                                             core::SetupPhases* phases) {
  const model::ModelShape shape = model::resolve_model_shape(config.model);
  // Note [counter-based init]: the values come from training.seed, not LibTorch's generator;
  // seeding it still gives whatever draws from it later the same start in every run.
  torch::manual_seed(config.training.seed);
  model::BuildOptions options;
  options.seed = static_cast<uint64_t>(config.training.seed);
  options.initialise = config.model.init_from.empty();  // else every value is loaded next
  const auto build_begin = core::Clock::now();
  auto model = model::build_causal_lm(shape, options);
  // Construction and values interleave unit by unit; the values are the bytes written.
  if (phases != nullptr && options.initialise) {
    int64_t numel = 0;
    for (const auto& p : model->parameters()) numel += p.numel();
    phases->add(core::SetupPhase::kInit, core::seconds_since(build_begin), 4 * numel);
  } else if (phases != nullptr) {
    phases->add(core::SetupPhase::kModel, core::seconds_since(build_begin));
  }
  core::PhaseTimer weights_timer(phases, core::SetupPhase::kWeights);
  if (model::load_pretrained(shape, config.model.init_from, *model) > 0) {
    int64_t numel = 0;
    for (const auto& p : model->parameters()) numel += p.numel();
    weights_timer.set_bytes(4 * numel);
  }
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

// Note [set-up phases]: each part below is timed into `out.setup`; the chunk engine times its own
// parts of registration (payload memory, values, bookkeeping), and the model's construction is
// what building took beside them.
ModelAndEngine build_model_and_engine(const plan::RunPlan& plan, dist::Communicator* comm) {
  const config::TrainConfig& config = plan.config;
  ModelAndEngine out;
  core::SetupPhases& phases = out.setup;
  const model::ModelShape shape = model::resolve_model_shape(config.model);
  out.model_flops_per_token = plan::model_flops_per_token(shape);
  if (config.engine.mode != config::EngineMode::kChunked) {
    out.model = build_model(config, &phases);
    return out;
  }
  core::PhaseTimer tier_timer(&phases, core::SetupPhase::kTier);
  const NonModelPrediction predicted = predict_non_model(plan);
  const int64_t non_model = predicted.total();
  if (predicted.library_workspaces > 0)
    log::info("CUDA libraries' workspaces: ", format_bytes(predicted.library_workspaces),
              " on the device, counted as non-model memory from the start");
  std::unique_ptr<tier::DeviceTier> tier = make_tier(plan, non_model);
  tier_timer.stop();
  // The engine times its own construction: the layout and fit as plan, its reservations as
  // allocation (setup_phases below, which kModel is the rest of).
  const auto build_begin = core::Clock::now();
  auto engine = std::make_unique<ChunkedEngine>(plan, plan::model_leaf_modules(shape), non_model,
                                                comm, std::move(tier));
  torch::manual_seed(config.training.seed);  // as build_model
  // Note [counter-based init]: the engine writes each unit's values straight into its chunks, or
  // leaves them to the weights loaded next.
  engine::UnitValues values;
  values.seed = static_cast<uint64_t>(config.training.seed);
  if (config.model.init_from.empty()) {
    values.from = engine::UnitValues::From::kInit;
    values.init = [&shape](const std::string& name) { return model::parameter_init(shape, name); };
  } else {
    values.from = engine::UnitValues::From::kLoad;
  }
  model::BuildOptions options;
  options.seed = values.seed;
  options.on_unit_built = [&](torch::nn::Module& unit, const std::string& prefix) {
    engine->register_unit(unit, prefix, values);
  };
  auto model = model::build_causal_lm(shape, options);
  engine->finish_registration();
  const core::SetupPhases registration = engine->setup_phases();
  phases.merge(registration);
  phases.add(core::SetupPhase::kModel,
             std::max(0.0, core::seconds_since(build_begin) - registration.total_seconds()));
  core::PhaseTimer weights_timer(&phases, core::SetupPhase::kWeights);
  if (model::load_pretrained(shape, config.model.init_from, *model,
                             [&](const std::string& name, const at::Tensor& value) {
                               engine->load_parameter(name, value);
                             }) > 0)
    weights_timer.set_bytes(4 * engine->num_parameters());
  weights_timer.stop();
  out.model = model;
  out.engine = std::move(engine);
  return out;
}

}  // namespace pstar::train
