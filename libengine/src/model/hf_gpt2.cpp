#include "pstar/model/hf_gpt2.h"

#include <cstring>
#include <set>

#include "pstar/base/error.h"
#include "pstar/base/strings.h"
#include "pstar/core/log.h"
#include "pstar/core/setup_phases.h"
#include "pstar/formats/safetensors.h"
#include "pstar/model/gpt.h"
#include "pstar/model/hf_weights.h"

namespace pstar::model {
namespace {

// HF keeps these in GPT-2 files but they are not parameters.
bool is_ignored(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
         name == "lm_head.weight";
}

std::string shape_str(c10::IntArrayRef shape) { return str_cat(shape); }

}  // namespace

int64_t load_hf_gpt2_safetensors(Gpt& model, const std::string& path,
                                 const ParameterWriter& write) {
  formats::SafetensorsReader reader(path);
  const std::string prefix = "transformer.";
  std::set<std::string> used;
  int64_t loaded = 0;
  torch::NoGradGuard no_grad;
  int64_t total_bytes = 0;  // of fp32 values, whatever the file holds
  for (const auto& item : model.named_parameters()) total_bytes += 4 * item.value().numel();
  core::SetupProgress progress(str_cat("loading weights from ", path), total_bytes);
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    const formats::TensorInfo* info = reader.find(name);
    if (info == nullptr && name.rfind(prefix, 0) == 0)
      info = reader.find(name.substr(prefix.size()));
    PSTAR_CHECK(info != nullptr, FormatError, path, ": tensor '", name, "' (or '",
                name.substr(name.rfind(prefix, 0) == 0 ? prefix.size() : 0),
                "') is missing; is this a GPT-2 checkpoint with ", model.config().layers,
                " layers?");
    torch::Tensor& param = item.value();
    std::vector<int64_t> shape = info->shape;
    PSTAR_CHECK(c10::IntArrayRef(shape) == param.sizes(), FormatError, path, ": tensor '",
                info->name, "' has shape ", shape_str(shape), " but the model's '", name,
                "' needs ", shape_str(param.sizes()),
                "; set model.hidden/layers/heads/vocab_size/seq_len to the checkpoint's shape");
    const auto scalar = float_scalar_type(info->dtype);
    PSTAR_CHECK(scalar.has_value(), FormatError, path, ": tensor '", info->name, "' has dtype ",
                formats::dtype_name(info->dtype), "; expected F32, F16, BF16 or F64");
    const at::Tensor source = mapped_tensor(reader, *info, *scalar);
    if (write) {
      write(name, source);
    } else {
      param.copy_(source);
    }
    progress.advance(4 * source.numel());
    used.insert(info->name);
    ++loaded;
  }
  int64_t unused = 0;
  std::string examples;
  for (const auto& info : reader.tensors()) {
    if (used.count(info.name) || is_ignored(info.name)) continue;
    if (unused++ < 3) examples += (examples.empty() ? "" : ", ") + info.name;
  }
  if (unused > 0)
    log::warn(path, ": ", unused, " tensor(s) not used by the model (", examples,
              unused > 3 ? ", ..." : "", ")");
  log::info("loaded ", loaded, " tensors from ", path);
  return loaded;
}

}  // namespace pstar::model
