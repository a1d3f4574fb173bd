#include "pstar/model/factory.h"

#include "pstar/base/error.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/model/hf_weights.h"
#include "pstar/model/init.h"
#include "pstar/model/llama.h"

#include <torch/torch.h>

namespace pstar::model {

std::shared_ptr<CausalLM> build_causal_lm(const ModelShape& shape, const BuildOptions& options) {
  if (shape.family == ModelFamily::kLlama) return std::make_shared<Llama>(shape.llama, options);
  return std::make_shared<Gpt>(shape.gpt, options);
}

void initialise_unit(torch::nn::Module& unit, const std::string& prefix, const ModelShape& shape,
                     uint64_t seed) {
  std::vector<InitWrite> writes;
  for (const auto& item : unit.named_parameters()) {
    const at::Tensor& p = item.value();
    PSTAR_INTERNAL_ASSERT(p.is_cpu() && p.scalar_type() == torch::kFloat32 && p.is_contiguous(),
                          "initialising ", prefix, item.key(),
                          ", which is not a contiguous fp32 "
                          "tensor on the CPU");
    const std::string name = prefix + item.key();
    InitWrite w;
    w.init = parameter_init(shape, name);
    w.stream = init_stream(name);
    w.end = p.numel();
    w.f32 = p.data_ptr<float>();
    writes.push_back(w);
  }
  write_init(seed, writes);
}

int64_t load_pretrained(const ModelShape& shape, const std::string& init_from, CausalLM& model,
                        const ParameterWriter& write) {
  if (init_from.empty()) return 0;
  if (shape.family == ModelFamily::kGpt) {
    auto* gpt = dynamic_cast<Gpt*>(&model);
    PSTAR_INTERNAL_ASSERT(gpt != nullptr, "a GPT shape built a model of another kind");
    // A GPT-2 folder holds one model.safetensors: the loader reads the file itself.
    const std::string file = formats::is_directory(init_from)
                                 ? formats::read_hf_folder(init_from).shards.front()
                                 : init_from;
    return load_hf_gpt2_safetensors(*gpt, file, write);
  }
  PSTAR_CHECK(formats::is_directory(init_from), ConfigError, "model.init_from: ", init_from,
              " is not a folder; a Llama-family model loads from a Hugging Face model folder "
              "(config.json beside model.safetensors or its shards)");
  std::vector<ExpectedTensor> expected;
  for (const auto& p : shape.parameter_shapes()) expected.push_back({p.name, p.shape});
  auto params = model.named_parameters();
  const ParameterWriter copy = [&](const std::string& name, const at::Tensor& value) {
    torch::NoGradGuard no_grad;
    params[name].copy_(value);
  };
  // Files of tied models may still carry lm_head.weight, and old ones the rotary inv_freq buffers.
  const auto ignored = [&](const std::string& name) {
    return (shape.llama.tie_word_embeddings && name == "lm_head.weight") ||
           name.find("rotary_emb.inv_freq") != std::string::npos;
  };
  return load_hf_weights(formats::read_hf_folder(init_from), expected, write ? write : copy,
                         ignored);
}

}  // namespace pstar::model
