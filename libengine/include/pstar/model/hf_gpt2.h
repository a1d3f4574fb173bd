// Loading Hugging Face GPT-2 weights (model.safetensors) into pstar's GPT.
#pragma once

#include <functional>
#include <string>

#include <ATen/core/Tensor.h>

namespace pstar::model {

class Gpt;

// Where loaded values go when the model's parameters are not plain tensors (the chunk engine
// keeps fp32 masters): called with each parameter's name and its value from the file.
using ParameterWriter = std::function<void(const std::string& name, const at::Tensor& value)>;

// Copies every parameter from the file into `model`, converting F64/F32/F16/BF16 to the model's
// dtype. Names may carry HF's `transformer.` prefix or not; HF's attention buffers
// (attn.bias, attn.masked_bias) and the tied lm_head.weight are ignored. A missing or misshaped
// tensor is a FormatError naming it and the file. Returns the number of tensors loaded.
int64_t load_hf_gpt2_safetensors(Gpt& model, const std::string& path,
                                 const ParameterWriter& write = nullptr);

}  // namespace pstar::model
