#include "pstar/model/hooks.h"

#include <atomic>
#include <utility>

#include <torch/autograd.h>

namespace pstar::model {
namespace {

std::atomic<ModuleHooks*> g_hooks{nullptr};
thread_local ModuleHooks* t_hooks = nullptr;

// Identity in forward; in backward it calls pre_backward before the module's own backward runs
// (the gradient reaches this node first because it wraps the module's output).
struct PreBackward : public torch::autograd::Function<PreBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               int64_t module_address) {
    ctx->saved_data["module"] = module_address;
    return x.view_as(x);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    if (ModuleHooks* hooks = active_hooks()) {
      auto* module = reinterpret_cast<torch::nn::Module*>(ctx->saved_data["module"].toInt());
      hooks->pre_backward(*module);
    }
    return {grads[0], torch::Tensor()};
  }
};

thread_local bool t_recomputing = false;

// Sets t_recomputing for a scope, restored however the scope ends (a block may throw).
class Recomputing {
 public:
  Recomputing() : outer_(std::exchange(t_recomputing, true)) {}
  ~Recomputing() { t_recomputing = outer_; }
  Recomputing(const Recomputing&) = delete;
  Recomputing& operator=(const Recomputing&) = delete;

 private:
  bool outer_;
};

struct Checkpoint : public torch::autograd::Function<Checkpoint> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                torch::Tensor x, int64_t block_address) {
    ctx->saved_data["block"] = block_address;
    ctx->save_for_backward({x});
    torch::NoGradGuard no_grad;
    return (*reinterpret_cast<const CheckpointBlock*>(block_address))(x);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto* block = reinterpret_cast<const CheckpointBlock*>(ctx->saved_data["block"].toInt());
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    std::vector<torch::Tensor> outputs;
    {
      torch::AutoGradMode enable(true);
      const Recomputing recomputing;
      outputs = (*block)(x);
    }
    // The outputs a gradient reached (a side output no loss used has none) and that have a graph.
    std::vector<torch::Tensor> roots, root_grads;
    for (size_t i = 0; i < outputs.size() && i < grads.size(); ++i) {
      if (!grads[i].defined() || !outputs[i].requires_grad()) continue;
      roots.push_back(outputs[i]);
      root_grads.push_back(grads[i]);
    }
    torch::autograd::backward(roots, root_grads);
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

ModuleHooks* active_hooks() {
  return t_hooks != nullptr ? t_hooks : g_hooks.load(std::memory_order_acquire);
}

ScopedModuleHooks::ScopedModuleHooks(ModuleHooks* hooks)
    : previous_(g_hooks.exchange(hooks, std::memory_order_acq_rel)),
      previous_on_thread_(std::exchange(t_hooks, hooks)) {}

ScopedModuleHooks::~ScopedModuleHooks() {
  t_hooks = previous_on_thread_;
  g_hooks.store(previous_, std::memory_order_release);
}

torch::Tensor run_module(torch::nn::Module& module, const std::function<torch::Tensor()>& forward) {
  ModuleHooks* hooks = active_hooks();
  if (hooks == nullptr) return forward();
  hooks->pre_forward(module);
  torch::Tensor y = forward();
  hooks->post_forward(module);
  if (y.requires_grad()) y = PreBackward::apply(y, reinterpret_cast<int64_t>(&module));
  return y;
}

std::vector<torch::Tensor> checkpoint(const CheckpointBlock* block, const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return (*block)(x);
  return Checkpoint::apply(x, reinterpret_cast<int64_t>(block));
}

bool recomputing() { return t_recomputing; }

}  // namespace pstar::model
