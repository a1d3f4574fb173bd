// Building the model a resolved ModelShape describes, and loading its pretrained weights.
#pragma once

#include <memory>

#include "pstar/model/causal_lm.h"
#include "pstar/model/gpt.h"      // BuildOptions
#include "pstar/model/hf_gpt2.h"  // ParameterWriter
#include "pstar/model/model_shape.h"

namespace pstar::model {

// The model of `shape`, built as `options` say: each unit handed to options.on_unit_built as it is
// built (the chunk engine takes it into chunks and writes its values there), or given its
// counter-based initial values from options.seed (Note [counter-based init]).
std::shared_ptr<CausalLM> build_causal_lm(const ModelShape& shape,
                                          const BuildOptions& options = {});

// Writes the counter-based initial values of every parameter of `unit` (named `prefix` + its name
// in the unit: the Hugging Face name) in place: fp32 tensors on the CPU.
void initialise_unit(torch::nn::Module& unit, const std::string& prefix, const ModelShape& shape,
                     uint64_t seed);

// Loads `init_from` (model.init_from: a GPT-2 .safetensors file, or a Hugging Face folder of the
// shape's family) into `model`, through `write` when the parameters live elsewhere (the chunk
// engine). Returns the number of tensors loaded; 0 when `init_from` is empty.
int64_t load_pretrained(const ModelShape& shape, const std::string& init_from, CausalLM& model,
                        const ParameterWriter& write = nullptr);

}  // namespace pstar::model
