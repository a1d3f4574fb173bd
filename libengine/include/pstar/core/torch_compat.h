// Every difference between the LibTorch versions pstar builds against (Debian's 1.13 CPU build
// and 2.x CUDA builds) is absorbed here, so the rest of the code is version-free.
#pragma once

#include <sstream>
#include <string>
#include <type_traits>

#include <torch/version.h>

#define PSTAR_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||                \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// c10::Allocator::allocate lost its const in LibTorch 2.3, which also added copy_data().
#if PSTAR_TORCH_VERSION_AT_LEAST(2, 3)
#define PSTAR_ALLOCATE_CONST
#define PSTAR_ALLOCATOR_HAS_COPY_DATA 1
#else
#define PSTAR_ALLOCATE_CONST const
#define PSTAR_ALLOCATOR_HAS_COPY_DATA 0
#endif

namespace pstar::compat {

// "1.13.1" etc., for logs and metadata.
inline const char* torch_version() { return TORCH_VERSION; }

// torch::optim keys per-parameter state by the TensorImpl address: as a string in 1.13, as the
// pointer itself in later versions.
template <typename StateMap, typename Tensor>
auto optimizer_state_key(const StateMap&, const Tensor& param) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << param.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

}  // namespace pstar::compat
