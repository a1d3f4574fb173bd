#include "pstar/engine/torch_engine.h"

#include "compute_dtype.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/checkpoint/store.h"
#include "pstar/plan/run_plan.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/core/torch_compat.h"
#include "pstar/formats/config.h"
#include "pstar/model/causal_lm.h"

namespace pstar::engine {
namespace {

class TorchEngine : public ParamEngine {
 public:
  TorchEngine(const config::TrainConfig& config, model::CausalLM& model, c10::Device device,
              c10::ScalarType dtype)
      : dtype_(dtype), mixed_(dtype != torch::kFloat32) {
    // Module::to(dtype) would also convert a custom model's integer buffers: only the device
    // moves the whole module; dtypes change parameter by parameter.
    model.to(device);
    params_ = model.parameters();
    for (const auto& item : model.named_parameters()) names_.push_back(item.key());
    torch::NoGradGuard no_grad;
    for (auto& p : params_) {
      PSTAR_CHECK(p.requires_grad(), ConfigError,
                  "the model has a parameter without requires_grad; register frozen tensors as "
                  "buffers instead");
      PSTAR_CHECK(p.is_floating_point(), ConfigError, "the model has a parameter of dtype ",
                  p.scalar_type(), "; parameters must be floating point");
      if (p.scalar_type() != torch::kFloat32) p.set_data(p.to(torch::kFloat32));
      if (mixed_) {
        master_.push_back(p.detach().clone());
        p.set_data(p.to(dtype));
      }
    }
    const std::vector<torch::Tensor>& optimized = mixed_ ? master_ : params_;
    const auto& opt = config.optimizer;
    adamw_ = opt.type == "AdamW";
    if (opt.type == "AdamW") {
      optimizer_ =
          std::make_unique<torch::optim::AdamW>(optimized, torch::optim::AdamWOptions(opt.lr)
                                                               .betas({opt.betas[0], opt.betas[1]})
                                                               .eps(opt.eps)
                                                               .weight_decay(opt.weight_decay));
    } else {
      PSTAR_CHECK(opt.type == "Adam", ConfigError, "optimizer.type: unknown optimizer '", opt.type,
                  "'; expected \"Adam\" or \"AdamW\"");
      optimizer_ =
          std::make_unique<torch::optim::Adam>(optimized, torch::optim::AdamOptions(opt.lr)
                                                              .betas({opt.betas[0], opt.betas[1]})
                                                              .eps(opt.eps)
                                                              .weight_decay(opt.weight_decay));
    }
  }

  std::string describe() const override {
    return mixed_ ? std::string("torch, ") + c10::toString(dtype_) + " with fp32 master weights"
                  : std::string("torch, fp32");
  }

  // Note [held parameters]: their gradients become None at the update, which torch's Adam skips.
  void skip_update(const std::vector<std::string>& names) override {
    held_.clear();
    for (const std::string& name : names) {
      const auto it = std::find(names_.begin(), names_.end(), name);
      PSTAR_INTERNAL_ASSERT(it != names_.end(), "skip_update: the model has no parameter '", name,
                            "'");
      held_.push_back(static_cast<size_t>(it - names_.begin()));
    }
  }

  void end_micro_batch() override {
    if (!mixed_) return;  // fp32: autograd accumulates into .grad across micro-batches
    // Accumulate in fp32 so many micro-batches do not lose low bits in bf16/fp16.
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& g = params_[i].mutable_grad();
      if (!g.defined()) continue;
      auto& acc = master_[i].mutable_grad();
      if (acc.defined()) {
        acc.add_(g.to(torch::kFloat32));
      } else {
        acc = g.to(torch::kFloat32);
      }
      g.reset();
    }
  }

  double grad_norm(double loss_scale) override {
    torch::NoGradGuard no_grad;
    // Every tensor's norm where its gradient is, then one copy to the host: a wait per tensor
    // was 293 waits per step at 1.31B on a GPU (99 ms of the host's time, Note [torch trace]). The
    // same norms are summed in the same order as before, so the result keeps its bits.
    std::vector<torch::Tensor> norms;
    for (auto& p : optimized())
      if (p.grad().defined()) norms.push_back(p.grad().norm().to(torch::kFloat64).reshape({1}));
    if (norms.empty()) return 0.0;
    const torch::Tensor host = torch::cat(norms).to(torch::kCPU);
    const double* n = host.data_ptr<double>();
    double sq = 0;
    for (int64_t i = 0; i < host.numel(); ++i) sq += n[i] * n[i];
    return std::sqrt(sq) / loss_scale;
  }

  void update(double lr, double grad_multiplier) override {
    torch::NoGradGuard no_grad;
    if (grad_multiplier != 1.0)
      for (auto& p : optimized())
        if (p.grad().defined()) p.mutable_grad().mul_(grad_multiplier);
    for (size_t i : held_) optimized()[i].mutable_grad().reset();
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    optimizer_->step();
    if (mixed_)
      for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(master_[i]);
  }

  void end_step() override {
    for (auto& p : optimized()) p.mutable_grad().reset();
    held_.clear();
  }

  void state_dict(TensorList& out) override {
    auto& state = optimizer_->state();
    // Each parameter's own step count (Note [held parameters]): the run's is the largest, and a
    // parameter behind it is written as the updates it missed.
    std::vector<int64_t> steps(params_.size(), 0);
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& p = optimized()[i];
      out.emplace_back(names_[i], p.detach().to(torch::kCPU, torch::kFloat32).clone());
      auto it = state.find(compat::optimizer_state_key(state, p));
      torch::Tensor m = torch::zeros_like(p), v = torch::zeros_like(p);
      if (it != state.end()) {
        adam_state(*it->second, [&](auto& s) {
          m = s.exp_avg();
          v = s.exp_avg_sq();
          steps[i] = s.step();
        });
      }
      out.emplace_back(checkpoint::exp_avg_of(names_[i]), m.detach().cpu().clone());
      out.emplace_back(checkpoint::exp_avg_sq_of(names_[i]), v.detach().cpu().clone());
    }
    const int64_t step = steps.empty() ? 0 : *std::max_element(steps.begin(), steps.end());
    out.emplace_back(checkpoint::kAdamStep, torch::tensor(step, torch::kInt64));
    for (size_t i = 0; i < params_.size(); ++i)
      if (steps[i] < step)
        out.emplace_back(checkpoint::adam_missed_of(names_[i]),
                         torch::tensor(step - steps[i], torch::kInt64));
  }

  void load_state_dict(const TensorMap& in, const std::string& file) override {
    torch::NoGradGuard no_grad;
    const int64_t step =
        checkpoint::checkpoint_tensor(in, checkpoint::kAdamStep, file, {}, torch::kInt64)
            .item<int64_t>();
    auto& state = optimizer_->state();
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = optimized()[i];
      const auto& value =
          checkpoint::checkpoint_tensor(in, names_[i], file, p.sizes(), torch::kFloat32);
      p.copy_(value);
      if (mixed_) params_[i].copy_(p);
      auto m = checkpoint::checkpoint_tensor(in, checkpoint::exp_avg_of(names_[i]), file, p.sizes(),
                                             torch::kFloat32)
                   .to(p.device());
      auto v = checkpoint::checkpoint_tensor(in, checkpoint::exp_avg_sq_of(names_[i]), file,
                                             p.sizes(), torch::kFloat32)
                   .to(p.device());
      const auto key = compat::optimizer_state_key(state, p);
      const int64_t own = step - checkpoint::adam_missed(in, names_[i], step, file);
      if (own == 0) {
        state.erase(key);
      } else if (adamw_) {
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(own);
        s->exp_avg(m.clone());
        s->exp_avg_sq(v.clone());
        state[key] = std::move(s);
      } else {
        auto s = std::make_unique<torch::optim::AdamParamState>();
        s->step(own);
        s->exp_avg(m.clone());
        s->exp_avg_sq(v.clone());
        state[key] = std::move(s);
      }
    }
  }

 private:
  std::vector<torch::Tensor>& optimized() { return mixed_ ? master_ : params_; }

  template <typename Fn>
  void adam_state(torch::optim::OptimizerParamState& state, Fn&& fn) const {
    if (adamw_) {
      fn(static_cast<torch::optim::AdamWParamState&>(state));
    } else {
      fn(static_cast<torch::optim::AdamParamState&>(state));
    }
  }

  c10::ScalarType dtype_;
  bool mixed_;
  bool adamw_ = true;
  std::vector<std::string> names_;
  std::vector<size_t> held_;           // this step's (skip_update)
  std::vector<torch::Tensor> params_;  // the model's, in the compute dtype
  std::vector<torch::Tensor> master_;  // fp32 copies the optimizer updates (mixed only)
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

std::unique_ptr<ParamEngine> make_torch_engine(const plan::RunPlan& plan, model::CausalLM& model) {
  PSTAR_INTERNAL_ASSERT(!plan.chunked, "a torch engine for a plan of engine.mode \"chunked\"");
  return std::make_unique<TorchEngine>(plan.config, model, c10::Device(plan.device_name),
                                       compute_dtype(plan.precision));
}

}  // namespace pstar::engine
