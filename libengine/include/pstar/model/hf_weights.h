// Loading the tensors of a Hugging Face model folder (formats/hf_folder.h) by name, shard by
// shard, into whatever holds a model's parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "pstar/model/hf_gpt2.h"  // ParameterWriter

namespace pstar::formats {
struct HfFolder;
struct TensorInfo;
class SafetensorsReader;
enum class DType;
}  // namespace pstar::formats

namespace pstar::model {

// The LibTorch dtype of a safetensors floating-point dtype (F64, F32, F16, BF16); nullopt for the
// others.
std::optional<c10::ScalarType> float_scalar_type(formats::DType dtype);

// A tensor's values as `scalar`: a view of the bytes in the reader's mapping where they are aligned
// for it (nothing is copied: a writer converts straight from the shard into the parameters, over
// LibTorch's threads), else a copy (the format packs tensors without padding). Valid while the
// reader lives; read it, never write it.
at::Tensor mapped_tensor(const formats::SafetensorsReader& reader, const formats::TensorInfo& info,
                         c10::ScalarType scalar);

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// Calls `write` with every expected tensor, in the file's dtype (F32, F16, BF16 or F64), opening
// one shard at a time, so the host holds the mapped shard and one tensor beyond the model's own
// memory. FormatError naming the file and tensor for a tensor that is missing (or that the index
// assigns to a shard lacking it), of another shape (both shapes given), or not floating-point.
// Tensors the model does not use are logged, except those `ignored` accepts. Returns the number
// of tensors written.
int64_t load_hf_weights(const formats::HfFolder& folder,
                        const std::vector<ExpectedTensor>& expected, const ParameterWriter& write,
                        const std::function<bool(const std::string&)>& ignored = nullptr);

}  // namespace pstar::model
