// Building the model a resolved ModelShape describes, and loading its pretrained weights.
#pragma once

#include <memory>

#include "pstar/model/causal_lm.h"
#include "pstar/model/gpt.h"      // UnitBuilt
#include "pstar/model/hf_gpt2.h"  // ParameterWriter
#include "pstar/model/model_shape.h"

namespace pstar::model {

// The model of `shape`, initialised from torch's current seed, each unit handed to
// `on_unit_built` as it is built (the chunk engine takes it into chunks there).
std::shared_ptr<CausalLM> build_causal_lm(const ModelShape& shape,
                                          const UnitBuilt& on_unit_built = nullptr);

// Loads `init_from` (model.init_from: a GPT-2 .safetensors file, or a Hugging Face folder of the
// shape's family) into `model`, through `write` when the parameters live elsewhere (the chunk
// engine). Returns the number of tensors loaded; 0 when `init_from` is empty.
int64_t load_pretrained(const ModelShape& shape, const std::string& init_from, CausalLM& model,
                        const ParameterWriter& write = nullptr);

}  // namespace pstar::model
