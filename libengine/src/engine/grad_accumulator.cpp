#include "grad_accumulator.h"

#include <mutex>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

namespace pstar::engine {

void set_data_keeping_accumulator(torch::Tensor& param, const torch::Tensor& data,
                                  std::weak_ptr<torch::autograd::Node>& kept) {
  namespace autograd = torch::autograd;
  if (std::shared_ptr<autograd::Node> live = autograd::impl::try_get_grad_accumulator(param))
    kept = live;
  param.set_data(data);
  const std::shared_ptr<autograd::Node> node = kept.lock();
  if (!node) return;  // no use since the last backward: nothing to keep
  autograd::AutogradMeta* meta = autograd::impl::get_autograd_meta(param);
  if (meta == nullptr) return;
  // The node checks each gradient against the device and type it was made for: it serves the
  // tensor only where those are the tensor's again (on the way back to the device).
  const auto& made_for = node->input_metadata(0);
  if (made_for.device() != data.device() || !made_for.options().type_equal(data.options())) return;
  const std::lock_guard<std::mutex> lock(meta->mutex_);
  if (meta->grad_accumulator_.expired()) meta->grad_accumulator_ = node;
}

}  // namespace pstar::engine
