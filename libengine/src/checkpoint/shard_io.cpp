#include "shard_io.h"

#include <malloc.h>

#include "pstar/base/error.h"
#include "pstar/core/log.h"

namespace pstar::checkpoint::internal {

TensorMap read_one_file(const std::string& file) {
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
  return read_checkpoint_file(file);
}

void progress(const std::string& line) {
  if (log::level() <= log::Level::kInfo) log::status(line);
}

const at::Tensor& indexed_tensor(const TensorMap& tensors, const ShardParameter& p,
                                 const std::string& file) {
  auto it = tensors.find(p.name);
  PSTAR_CHECK(it != tensors.end() && it->second.sizes() == c10::IntArrayRef(p.shape) &&
                  it->second.scalar_type() == p.dtype,
              FormatError, file, ": tensor '", p.name,
              "' is not what it was when the file was checked moments ago; was the checkpoint "
              "rewritten meanwhile?");
  return it->second;
}

}  // namespace pstar::checkpoint::internal
