// The trainer's set-up (engine, data, metrics, checkpoints) and its checkpoints through the
// checkpoint module. The step is in trainer_step.cpp, the run loop and `pstar train` in
// trainer_run.cpp, profile set-up in trainer_profile.cpp, building the model in build_model.cpp.
#include "pstar/train/trainer.h"

#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/format.h"
#include "pstar/checkpoint/run_checkpoint.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/core/random_id.h"
#include "pstar/core/torch_compat.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/engine/torch_engine.h"
#include "pstar/model/gpt.h"
#include "pstar/plan/run_plan.h"
#include "pstar/train/run_facts.h"
#include "trainer_impl.h"

namespace pstar::train {
namespace {

// LibTorch builds differ in which low-precision kernels exist (1.13 has no fp16 matmul on CPU):
// find out before training rather than failing inside the first forward.
void check_dtype_supported(c10::ScalarType dtype, c10::Device device) {
  if (dtype == torch::kFloat32) return;
  const char* key = dtype == torch::kBFloat16 ? "bf16.enabled" : "fp16.enabled";
  try {
    auto a = torch::ones({2, 2}, torch::dtype(dtype).device(device));
    (void)torch::matmul(a, a);
  } catch (const c10::Error&) {
    PSTAR_THROW(ConfigError, key, ": this LibTorch (", compat::torch_version(), ") has no ",
                c10::toString(dtype), " matmul on ", device.str(),
                dtype == torch::kFloat16 ? "; use bf16.enabled on CPU" : "; train in fp32");
  }
}

}  // namespace

void Trainer::Impl::save_checkpoint() {
  checkpoint::RunState state;
  state.step = step;
  state.tokens = totals.tokens;
  state.skipped_steps = totals.skipped;
  state.loss_scaler = scaler.state();
  state.rng = at::detail::getDefaultCPUGenerator().get_state();
  checkpoints->save(state, [&](checkpoint::TensorList& out) { engine->state_dict(out); });
  if (metrics.tensorboard) metrics.tensorboard->flush();  // Note [tensorboard flushes]
}

void Trainer::Impl::resume(const std::string& where) {
  const checkpoint::RunState state =
      checkpoints->resume(where, [&](const checkpoint::TensorMap& in, const std::string& file) {
        engine->load_state_dict(in, file);
      });
  step = state.step;
  totals.tokens = state.tokens;
  totals.skipped = state.skipped_steps;
  scaler.set_state(state.loss_scaler);
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(state.rng);
}

void Trainer::Impl::init(std::unique_ptr<ParamEngine> prebuilt) {
  core::configure_runtime(comm != nullptr ? comm->world().local_world_size : 1);
  // `pstar train` passes a config its plan resolved already (train()); a Trainer made directly
  // (tests, programs over the library) is resolved here, by the same function (Note [run plan]).
  core::PhaseTimer plan_timer(&setup, core::SetupPhase::kPlan);
  const plan::RunPlan plan = plan_run(config, options.device, comm);
  plan_timer.stop();
  for (const std::string& line : plan.decisions) log::info(line);
  config = plan.config;
  // Note [step bound]: the steps after the warm-up's tracing and the first planned step.
  speculation = SpeculationPolicy(plan.speculation, config.engine.warmup_iterations + 2);
  device = plan_device(plan);
  dtype = plan_dtype(plan);
  const bool chunked = plan.chunked;
  check_dtype_supported(dtype, device);

  const int64_t seq_len = model->max_seq_len();
  core::PhaseTimer data_timer(&setup, core::SetupPhase::kData);
  data = data::open_training_data(config, model->vocab_size(), seq_len, rank(), world(), comm);
  data_timer.stop();
  PSTAR_CHECK(!data.packing || model->takes_packed_records(), ConfigError,
              "data.packing: this model does not take packed records (CausalLM::forward_records "
              "with segments and positions, Note [packed batches]); set data.packing false to "
              "train on one record a row");

  if (!model->set_activation_checkpointing(config.engine.activation_checkpointing) &&
      config.engine.activation_checkpointing) {
    log::warn("engine.activation_checkpointing: this model does not support it; ignored");
  }

  int64_t num_params = 0;
  for (auto& p : model->parameters()) num_params += p.numel();
  if (prebuilt) {
    engine = std::move(prebuilt);
  } else if (chunked) {
    // A model built outside the engine is taken into chunks module by module after the fact.
    core::PhaseTimer tier_timer(&setup, core::SetupPhase::kTier);
    std::unique_ptr<tier::DeviceTier> tier = make_tier(plan, 0);
    tier_timer.stop();
    // The engine times its own construction (layout and fit as plan) in setup_phases().
    auto chunk_engine =
        std::make_unique<engine::ChunkedEngine>(plan, engine::ChunkedEngine::leaf_modules(*model),
                                                /*predicted_non_model=*/0, comm, std::move(tier));
    chunk_engine->register_unit(*model, "");
    chunk_engine->finish_registration();
    setup.merge(chunk_engine->setup_phases());
    engine = std::move(chunk_engine);
  } else {
    core::PhaseTimer engine_timer(&setup, core::SetupPhase::kEngine);
    engine = engine::make_torch_engine(plan, *model);
  }
  if (engine->num_parameters() >= 0) num_params = engine->num_parameters();
  if (!options.metrics_path.empty()) metrics.file.emplace(rank_path(options.metrics_path));
  if (!options.profile_path.empty()) start_profile();
  core::PhaseTimer checkpoint_timer(&setup, core::SetupPhase::kCheckpoint);
  checkpoints.emplace(config, comm);
  checkpoints->check_save_dir(num_params);
  // Rank 0 names the run; checkpoint manifests record it.
  checkpoints->set_run_id(core::random_id());
  checkpoint_timer.stop();
  // Before the resume, which can take long: a directory that cannot be written is found at once.
  if (!config.training.tensorboard_dir.empty() && rank() == 0)
    metrics.tensorboard = std::make_unique<TensorBoardLog>(config.training.tensorboard_dir,
                                                           "training.tensorboard_dir");
  if (!options.resume_dir.empty()) {
    core::PhaseTimer resume_timer(&setup, core::SetupPhase::kResume);
    resume(options.resume_dir);
  }
  if (metrics.tensorboard) {
    metrics.tensorboard->start_run(step, config::to_json_text(config));
    log::info("tensorboard: ", metrics.tensorboard->path(),
              step > 0 ? str_cat(" (continuing from step ", step, ")") : std::string());
  }

  log::info("model: ", format_count(static_cast<double>(num_params)), " parameters (", num_params,
            "), vocab ", model->vocab_size(), ", seq_len ", seq_len);
  log::info("engine: ", engine->describe(), "; compute on ", device.str(), " (",
            torch::get_num_threads(), " threads), precision ",
            dtype == torch::kFloat32 ? "fp32" : c10::toString(dtype), ", LibTorch ",
            compat::torch_version());
  log::info("data: ", data.describe(), ", ", tokens_per_step(),
            data.has_records() ? " positions per step (" : " tokens per step (",
            world() > 1 ? str_cat(world(), " ranks x ") : std::string(),
            config.train_micro_batch_size_per_gpu, " x ", seq_len, " x ",
            config.gradient_accumulation_steps, " accumulation)");
  if (data.eval) init_eval();
  if (!config.training.eval_samples.empty())
    metrics.samples = std::make_unique<EvalSamples>(config, *model);
}

Trainer::Trainer(const config::TrainConfig& config, std::shared_ptr<model::CausalLM> model,
                 const TrainOptions& options)
    : impl_(std::make_unique<Impl>(config, std::move(model), options)) {
  impl_->init(nullptr);
}

Trainer::Trainer(const config::TrainConfig& config, ModelAndEngine built,
                 const TrainOptions& options)
    : impl_(std::make_unique<Impl>(config, std::move(built.model), options)) {
  impl_->setup = built.setup;
  impl_->metrics.model_flops_per_step =
      built.model_flops_per_token *
      static_cast<double>(config.train_micro_batch_size_per_gpu *
                          config.gradient_accumulation_steps * impl_->model->max_seq_len());
  impl_->init(std::move(built.engine));
}

Trainer::~Trainer() = default;

const core::SetupPhases& Trainer::setup_phases() const { return impl_->setup; }

void Trainer::finish_setup(double setup_s) {
  Impl& s = *impl_;
  // Building a model of billions of parameters into chunks takes a while: say how long and where
  // it went, so that a slow start is seen as such (and which part of it), not as a slow step.
  log::info("set-up took ", format_fixed(setup_s, 1), " s: ", s.setup.summary(setup_s));
  if (s.metrics.file) s.metrics.file->write_startup(s.setup, setup_s);
}

int64_t Trainer::steps_done() const { return impl_->step; }

}  // namespace pstar::train
