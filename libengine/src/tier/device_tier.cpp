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
