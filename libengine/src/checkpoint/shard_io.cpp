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

const at::Tensor& indexed_piece(const TensorMap& tensors, const ShardParameter& p,
                                const ShardPiece& piece, const std::string& file,
                                const char* suffix) {
  const std::string name = piece.stored + suffix;
  auto it = tensors.find(name);
  const bool moment = *suffix != 0;
  PSTAR_CHECK(it != tensors.end() && it->second.dim() == 1 && it->second.numel() == piece.numel &&
                  it->second.scalar_type() == (moment ? c10::ScalarType::Float : p.dtype),
              FormatError, file, ": tensor '", name,
              moment ? "' is missing or is not the fp32 moment of its piece"
                     : "' is not what it was when the file was checked moments ago; was the "
                       "checkpoint rewritten meanwhile?");
  return it->second;
}

}  // namespace pstar::checkpoint::internal
