#include "pstar/tier/device_tier.h"

#include <torch/torch.h>

#include "pstar/base/error.h"

namespace pstar::tier {

const char* side_name(Side side) { return side == Side::kDevice ? "device" : "host"; }

Block::Block(void* data, int64_t bytes, Side side, std::unique_ptr<Owner> owner)
    : owner_(std::move(owner)), data_(data), bytes_(bytes), side_(side) {}

void Block::reset() {
  owner_.reset();
  data_ = nullptr;
  bytes_ = 0;
}

at::Tensor DeviceTier::view(const Block& block, c10::ScalarType dtype, int64_t offset,
                            c10::IntArrayRef shape) const {
  PSTAR_INTERNAL_ASSERT(block, "a view of an empty block");
  const auto elem = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  PSTAR_INTERNAL_ASSERT((offset + numel) * elem <= block.bytes(), "a view of ", numel,
                        " elements at ", offset, " past the end of a block of ", block.bytes(),
                        " bytes");
  auto* base = static_cast<char*>(block.data()) + offset * elem;
  return torch::from_blob(base, shape, torch::dtype(dtype).device(device_of(block.side())));
}

void DeviceTier::adam_hold(Side side, const optim::AdamSpan& span) {
  const c10::Device device = device_of(side);
  if (device.is_cpu()) {
    optim::host_adam_hold(span);
    return;
  }
  PSTAR_INTERNAL_ASSERT(span.master_out == nullptr, "a redirected Adam span on the ",
                        side_name(side), " side");
  if (span.numel == 0 || span.param_out_type == optim::ParamOutType::kNone) return;
  // LibTorch's fp32 -> bf16/fp16 rounds to nearest even, as the kernels do; on the device's
  // current stream, the one its Adam runs on.
  const auto options = torch::TensorOptions().device(device);
  const at::Tensor master =
      torch::from_blob(span.master, {span.numel}, options.dtype(torch::kFloat32));
  torch::from_blob(
      span.param_out, {span.numel},
      options.dtype(span.param_out_type == optim::ParamOutType::kBF16 ? torch::kBFloat16
                                                                      : torch::kFloat16))
      .copy_(master);
}

void DeviceTier::grad_sq_sums(Side side, const std::vector<GradRef>& grads, double* out) {
  for (size_t i = 0; i < grads.size(); ++i)
    out[i] = grad_sq_sum(side, grads[i].grad, grads[i].grad_type, grads[i].numel);
}

std::unique_ptr<DeviceTier> make_device_tier(c10::Device device, int64_t arena_bytes) {
  if (device.is_cpu()) return make_emulated_tier();
  PSTAR_CHECK(device.is_cuda(), ConfigError, "the chunk engine's device tier runs on a CPU ",
              "(emulated) or a CUDA device, not on ", device.str());
  return make_cuda_tier(device.has_index() ? device.index() : 0, arena_bytes);
}

int64_t library_workspace_bytes(c10::Device device, c10::ScalarType dtype) {
  if (!device.is_cuda()) return 0;
  return cuda_library_workspace_bytes(device.has_index() ? device.index() : 0, dtype);
}

}  // namespace pstar::tier
