#include "pstar/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/core/device.h"
#include "pstar/core/log.h"
#include "pstar/core/torch_compat.h"
#include "pstar/data/batch_sampler.h"
#include "pstar/data/token_source.h"
#include "pstar/formats/config.h"
#include "pstar/model/gpt.h"
#include "pstar/model/hf_gpt2.h"
#include "pstar/train/loss_scaler.h"
#include "pstar/train/lr_schedule.h"
#include "pstar/train/metrics.h"

namespace pstar::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string human_duration(double s) {
  const auto total = static_cast<int64_t>(std::llround(std::max(0.0, s)));
  char buf[32];
  if (total >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                  static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  return buf;
}

std::string fixed4(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

c10::ScalarType compute_dtype(const config::TrainConfig& c) {
  if (c.bf16) return torch::kBFloat16;
  if (c.fp16.enabled) return torch::kFloat16;
  return torch::kFloat32;
}

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

struct Trainer::Impl {
  config::TrainConfig config;
  std::shared_ptr<model::CausalLM> model;
  TrainOptions options;
  c10::Device device{c10::kCPU};
  c10::ScalarType dtype = torch::kFloat32;
  bool mixed = false;  // low-precision params with fp32 master copies

  std::unique_ptr<data::TokenSource> source;
  std::unique_ptr<data::BatchSampler> sampler;
  std::vector<torch::Tensor> params;  // the model's (compute dtype)
  std::vector<torch::Tensor> master;  // fp32 copies the optimizer updates (mixed only)
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  LrSchedule schedule;
  LossScaler scaler;
  std::optional<MetricsWriter> metrics;

  int64_t step = 0;
  int64_t tokens = 0;
  int64_t skipped = 0;
  std::optional<Clock::time_point> start;

  Impl(const config::TrainConfig& c, std::shared_ptr<model::CausalLM> m, const TrainOptions& o)
      : config(c), model(std::move(m)), options(o), schedule(c), scaler(c.fp16) {}

  int64_t tokens_per_step() const {
    return config.train_micro_batch_size_per_gpu * config.gradient_accumulation_steps *
           model->max_seq_len();
  }

  // The gradients the optimizer will read, fp32.
  std::vector<torch::Tensor> grads() {
    std::vector<torch::Tensor> out;
    for (auto& p : mixed ? master : params)
      if (p.grad().defined()) out.push_back(p.grad());
    return out;
  }

  StepMetrics run_step();
};

Trainer::Trainer(const config::TrainConfig& config, std::shared_ptr<model::CausalLM> model,
                 const TrainOptions& options)
    : impl_(std::make_unique<Impl>(config, std::move(model), options)) {
  Impl& s = *impl_;
  PSTAR_CHECK(config.engine.mode == "torch", ConfigError, "engine.mode: '", config.engine.mode,
              "' is not available in this build; use \"torch\"");
  s.device = core::resolve_device(options.device, "--device");
  s.dtype = compute_dtype(config);
  s.mixed = s.dtype != torch::kFloat32;
  check_dtype_supported(s.dtype, s.device);

  core::configure_threads();
  const int64_t seq_len = s.model->max_seq_len();
  s.source = data::open_token_source(config.data, s.model->vocab_size(), seq_len);
  s.sampler = std::make_unique<data::BatchSampler>(
      *s.source, data::parse_sampling(config.data.sampling), config.train_micro_batch_size_per_gpu,
      seq_len, config.gradient_accumulation_steps, config.training.seed);

  // Module::to(dtype) would also convert a custom model's integer buffers: only the device moves
  // the whole module; dtypes change parameter by parameter.
  s.model->to(s.device);
  s.params = s.model->parameters();
  torch::NoGradGuard no_grad;
  for (auto& p : s.params) {
    PSTAR_CHECK(p.requires_grad(), ConfigError, "the model has a parameter without requires_grad; "
                "register frozen tensors as buffers instead");
    PSTAR_CHECK(p.is_floating_point(), ConfigError, "the model has a parameter of dtype ",
                p.scalar_type(), "; parameters must be floating point");
    if (p.scalar_type() != torch::kFloat32) p.set_data(p.to(torch::kFloat32));
    if (s.mixed) {
      s.master.push_back(p.detach().clone());
      p.set_data(p.to(s.dtype));
    }
  }
  const std::vector<torch::Tensor>& optimized = s.mixed ? s.master : s.params;

  const auto& opt = config.optimizer;
  if (opt.type == "AdamW") {
    s.optimizer = std::make_unique<torch::optim::AdamW>(
        optimized, torch::optim::AdamWOptions(opt.lr)
                       .betas({opt.betas[0], opt.betas[1]})
                       .eps(opt.eps)
                       .weight_decay(opt.weight_decay));
  } else {
    PSTAR_CHECK(opt.type == "Adam", ConfigError, "optimizer.type: unknown optimizer '", opt.type,
                "'; expected \"Adam\" or \"AdamW\"");
    s.optimizer = std::make_unique<torch::optim::Adam>(
        optimized, torch::optim::AdamOptions(opt.lr)
                       .betas({opt.betas[0], opt.betas[1]})
                       .eps(opt.eps)
                       .weight_decay(opt.weight_decay));
  }
  if (!options.metrics_path.empty()) s.metrics.emplace(options.metrics_path);

  int64_t num_params = 0;
  for (auto& p : s.params) num_params += p.numel();
  log::info("model: ", human_count(static_cast<double>(num_params)), " parameters (", num_params,
            "), vocab ", s.model->vocab_size(), ", seq_len ", seq_len);
  log::info("engine: torch, device ", s.device.str(), " (", torch::get_num_threads(),
            " threads), precision ", s.mixed ? c10::toString(s.dtype) : "fp32",
            s.mixed ? " with fp32 master weights" : "", ", LibTorch ", compat::torch_version());
  log::info("data: ", s.source->describe(), " (", human_count(static_cast<double>(s.source->size())),
            " tokens, ", config.data.sampling, " sampling), ", s.tokens_per_step(),
            " tokens per step (", config.train_micro_batch_size_per_gpu, " x ", seq_len, " x ",
            config.gradient_accumulation_steps, " accumulation)");
}

Trainer::~Trainer() = default;

int64_t Trainer::steps_done() const { return impl_->step; }

StepMetrics Trainer::step() { return impl_->run_step(); }

StepMetrics Trainer::Impl::run_step() {
  if (!start) start = Clock::now();
  const auto step_start = Clock::now();
  ++step;
  const int64_t accumulation = config.gradient_accumulation_steps;
  const double loss_scale = config.fp16.enabled ? scaler.scale() : 1.0;
  const int64_t vocab = model->vocab_size();

  model->train();
  std::vector<torch::Tensor> accumulated;  // fp32 grads across micro-batches (mixed only)
  double loss_sum = 0;
  for (int64_t micro = 1; micro <= accumulation; ++micro) {
    auto batch = sampler->batch(step, micro);
    auto inputs = batch.inputs.to(device), targets = batch.targets.to(device);
    auto logits = model->forward(inputs);
    PSTAR_CHECK(logits.dim() == 3 && logits.size(0) == inputs.size(0) &&
                    logits.size(1) == inputs.size(1) && logits.size(2) == vocab,
                ConfigError, "the model's forward returned logits of shape ", logits.sizes(),
                "; expected [batch, seq, vocab_size] = ", inputs.sizes(), " x ", vocab);
    auto loss = torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}).to(torch::kFloat32), targets.reshape({-1}));
    loss_sum += loss.item<double>();
    (loss * (loss_scale / static_cast<double>(accumulation))).backward();
    if (mixed) {
      // Accumulate in fp32 so many micro-batches do not lose low bits in bf16/fp16.
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        auto& g = params[i].mutable_grad();
        if (!g.defined()) continue;
        if (accumulated.size() <= i) accumulated.resize(params.size());
        if (accumulated[i].defined()) accumulated[i].add_(g.to(torch::kFloat32));
        else accumulated[i] = g.to(torch::kFloat32);
        g.reset();
      }
    }
  }
  if (mixed) {
    for (size_t i = 0; i < master.size(); ++i)
      master[i].mutable_grad() = i < accumulated.size() ? accumulated[i] : torch::Tensor();
  }
  const double loss = loss_sum / static_cast<double>(accumulation);

  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.loss_scale = loss_scale;
  m.lr = schedule.at(step);
  {
    torch::NoGradGuard no_grad;
    auto gs = grads();
    double sq = 0;
    for (auto& g : gs) {
      if (loss_scale != 1.0) g.mul_(1.0 / loss_scale);
      const double n = g.norm().item<double>();
      sq += n * n;
    }
    m.grad_norm = std::sqrt(sq);
    // The loss scale only touches gradients: a non-finite loss is divergence, not overflow.
    PSTAR_CHECK(std::isfinite(loss), NumericError, "step ", step, ": the loss is not finite (",
                loss, "); lower optimizer.params.lr, set gradient_clipping, or train in fp32");
    const bool finite = std::isfinite(m.grad_norm);
    if (!finite && config.fp16.enabled && scaler.is_dynamic()) {
      m.skipped = true;
      m.lr = 0;  // no update was made
      ++skipped;
      log::warn("step ", step, ": gradient overflow at loss scale ", loss_scale,
                "; step skipped");
    } else {
      PSTAR_CHECK(finite, NumericError, "step ", step, ": the gradient norm is not finite (loss ",
                  loss, "); lower optimizer.params.lr, set gradient_clipping, or train in fp32");
      if (config.gradient_clipping > 0 && m.grad_norm > config.gradient_clipping) {
        const double coef = config.gradient_clipping / (m.grad_norm + 1e-6);
        for (auto& g : gs) g.mul_(coef);
      }
      for (auto& group : optimizer->param_groups()) group.options().set_lr(m.lr);
      optimizer->step();
      if (mixed)
        for (size_t i = 0; i < params.size(); ++i) params[i].copy_(master[i]);
    }
    if (config.fp16.enabled) scaler.update(m.skipped);
    for (auto& p : mixed ? master : params) p.mutable_grad().reset();
  }

  tokens += tokens_per_step();
  m.tokens = tokens;
  m.step_time_s = seconds_since(step_start);
  m.tokens_per_s = static_cast<double>(tokens_per_step()) / std::max(m.step_time_s, 1e-9);
  m.elapsed_s = seconds_since(*start);
  if (metrics) metrics->write(m);
  return m;
}

TrainSummary Trainer::run() {
  Impl& s = *impl_;
  const int64_t total = s.config.training.steps;
  TrainSummary summary;
  log::info("training ", total - s.step, " steps");
  const auto run_start = Clock::now();
  const int64_t tokens_before = s.tokens;
  while (s.step < total) {
    StepMetrics m = step();
    if (summary.steps == 0) summary.first_loss = m.loss;
    summary.last_loss = m.loss;
    ++summary.steps;
    if (s.options.progress) {
      const double per_step = seconds_since(run_start) / static_cast<double>(summary.steps);
      const double eta = per_step * static_cast<double>(total - m.step);
      char line[256];
      std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  lr %.2e  %s tok/s  %s  ETA %s",
                    static_cast<long long>(m.step), static_cast<long long>(total), m.loss, m.lr,
                    human_count(m.tokens_per_s).c_str(), human_duration(m.elapsed_s).c_str(),
                    human_duration(eta).c_str());
      if (m.step % s.config.training.log_interval == 0 || m.step == 1 || m.step == total) {
        log::end_status();
        log::info(line);
      } else {
        log::status(line);
      }
    }
  }
  log::end_status();
  summary.skipped_steps = s.skipped;
  summary.tokens = s.tokens - tokens_before;
  summary.elapsed_s = seconds_since(run_start);
  summary.tokens_per_s = static_cast<double>(summary.tokens) / std::max(summary.elapsed_s, 1e-9);
  log::info("done: ", summary.steps, " steps, ", human_count(static_cast<double>(summary.tokens)),
            " tokens in ", human_duration(summary.elapsed_s), " (",
            human_count(summary.tokens_per_s), " tok/s); loss ", fixed4(summary.first_loss), " -> ",
            fixed4(summary.last_loss),
            summary.skipped_steps ? str_cat("; ", summary.skipped_steps, " skipped") : "");
  return summary;
}

std::shared_ptr<model::CausalLM> build_model(const config::TrainConfig& config) {
  auto shape = model::resolve_gpt_config(config.model);
  torch::manual_seed(config.training.seed);
  auto gpt = std::make_shared<model::Gpt>(shape);
  if (!config.model.init_from.empty()) model::load_hf_gpt2_safetensors(*gpt, config.model.init_from);
  return gpt;
}

TrainSummary train(const config::TrainConfig& config, const TrainOptions& options) {
  log::info("config: ", config.source);
  Trainer trainer(config, build_model(config), options);
  return trainer.run();
}

}  // namespace pstar::train
