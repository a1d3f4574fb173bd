// Loading Hugging Face GPT-2 weights (model.safetensors) into pstar's GPT.
#pragma once

#include <string>

namespace pstar::model {

class Gpt;

// Copies every parameter from the file into `model`, converting F64/F32/F16/BF16 to the model's
// dtype. Names may carry HF's `transformer.` prefix or not; HF's attention buffers
// (attn.bias, attn.masked_bias) and the tied lm_head.weight are ignored. A missing or misshaped
// tensor is a FormatError naming it and the file. Returns the number of tensors loaded.
int64_t load_hf_gpt2_safetensors(Gpt& model, const std::string& path);

}  // namespace pstar::model
