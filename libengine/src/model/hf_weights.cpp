#include "pstar/model/hf_weights.h"

#include <cstring>
#include <map>
#include <optional>
#include <set>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/core/log.h"
#include "pstar/core/setup_phases.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/formats/safetensors.h"

namespace pstar::model {

std::optional<c10::ScalarType> float_scalar_type(formats::DType dtype) {
  switch (dtype) {
    case formats::DType::kF64:
      return torch::kFloat64;
    case formats::DType::kF32:
      return torch::kFloat32;
    case formats::DType::kF16:
      return torch::kFloat16;
    case formats::DType::kBF16:
      return torch::kBFloat16;
    default:
      return std::nullopt;
  }
}

at::Tensor mapped_tensor(const formats::SafetensorsReader& reader, const formats::TensorInfo& info,
                         c10::ScalarType scalar) {
  const uint8_t* bytes = reader.data(info);
  if (reinterpret_cast<uintptr_t>(bytes) % c10::elementSize(scalar) == 0)
    return torch::from_blob(const_cast<uint8_t*>(bytes), info.shape, torch::dtype(scalar));
  auto value = torch::empty(info.shape, torch::dtype(scalar));
  std::memcpy(value.data_ptr(), bytes, info.size_bytes);
  return value;
}

int64_t load_hf_weights(const formats::HfFolder& folder,
                        const std::vector<ExpectedTensor>& expected, const ParameterWriter& write,
                        const std::function<bool(const std::string&)>& ignored) {
  // Which shard holds each tensor: the index's word, or the single file.
  std::map<std::string, std::vector<const ExpectedTensor*>> by_shard;
  for (const auto& t : expected) {
    std::string shard = folder.shards.front();
    if (!folder.index_path.empty()) {
      const auto it = folder.shard_of.find(t.name);
      PSTAR_CHECK(it != folder.shard_of.end(), FormatError, folder.index_path, ": tensor \"",
                  t.name,
                  "\" is not in the weight_map; is this folder the model its config.json "
                  "describes?");
      shard = it->second;
    }
    by_shard[shard].push_back(&t);
  }
  int64_t loaded = 0, unused = 0;
  std::string unused_examples;
  torch::NoGradGuard no_grad;
  int64_t total_bytes = 0;  // of fp32 values, whatever the files hold
  for (const auto& t : expected) {
    int64_t numel = 1;
    for (const int64_t d : t.shape) numel *= d;
    total_bytes += 4 * numel;
  }
  core::SetupProgress progress(str_cat("loading weights from ", folder.dir), total_bytes);
  for (const std::string& shard : folder.shards) {
    formats::SafetensorsReader reader(shard);
    std::set<std::string> used;
    for (const ExpectedTensor* t : by_shard[shard]) {
      const formats::TensorInfo* info = reader.find(t->name);
      PSTAR_CHECK(info != nullptr, FormatError, shard, ": tensor \"", t->name, "\" is missing",
                  folder.index_path.empty() ? "" : " though the index assigns it to this shard");
      PSTAR_CHECK(info->shape == t->shape, FormatError, shard, ": tensor \"", t->name,
                  "\" has shape ", c10::IntArrayRef(info->shape), " but the model needs ",
                  c10::IntArrayRef(t->shape), " (from ", folder.config_path, ")");
      const auto scalar = float_scalar_type(info->dtype);
      PSTAR_CHECK(scalar.has_value(), FormatError, shard, ": tensor \"", t->name, "\" has dtype ",
                  formats::dtype_name(info->dtype), "; expected F32, F16, BF16 or F64");
      const at::Tensor value = mapped_tensor(reader, *info, *scalar);
      write(t->name, value);
      progress.advance(4 * value.numel());
      used.insert(t->name);
      ++loaded;
    }
    for (const auto& info : reader.tensors()) {
      if (used.count(info.name) || (ignored && ignored(info.name))) continue;
      // With an index, a tensor it assigns elsewhere is that shard's business.
      if (!folder.index_path.empty() && folder.shard_of.count(info.name) &&
          folder.shard_of.at(info.name) != shard)
        continue;
      if (unused++ < 3) unused_examples += (unused_examples.empty() ? "" : ", ") + info.name;
    }
    log::info("loaded ", used.size(), " tensors from ", shard);
  }
  if (unused > 0)
    log::warn(folder.dir, ": ", unused, " tensor(s) not used by the model (", unused_examples,
              unused > 3 ? ", ..." : "", ")");
  return loaded;
}

}  // namespace pstar::model
