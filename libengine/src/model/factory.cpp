#include "pstar/model/factory.h"

#include <map>

#include "pstar/base/error.h"
#include "pstar/base/strings.h"
#include "pstar/core/log.h"
#include "pstar/formats/hf_folder.h"
#include "pstar/model/decoder.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/hf_weights.h"
#include "pstar/model/init.h"

#include <torch/torch.h>

namespace pstar::model {

std::shared_ptr<CausalLM> build_causal_lm(const ModelShape& shape, const BuildOptions& options) {
  if (shape.family == ModelFamily::kDecoder)
    return std::make_shared<Decoder>(shape.decoder, options);
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
              " is not a folder; a decoder loads from a Hugging Face model folder (config.json "
              "beside model.safetensors or its shards)");
  const DecoderConfig& c = shape.decoder;
  const std::vector<CheckpointTensor> tensors = decoder_checkpoint_tensors(c);
  std::vector<ExpectedTensor> expected;
  std::map<std::string, const CheckpointTensor*> by_name;
  for (const auto& t : tensors) {
    expected.push_back({t.name, t.shape});
    by_name[t.name] = &t;
  }
  auto params = model.named_parameters();
  const ParameterWriter copy = [&](const std::string& name, const at::Tensor& value) {
    torch::NoGradGuard no_grad;
    params[name].copy_(value);
  };
  const ParameterWriter& to = write ? write : copy;
  // A fused tensor (Phi-3's qkv_proj, gate_up_proj; transformers 5's experts) is split into its
  // parameters by rows of its [numel / last, last] view.
  const ParameterWriter split = [&](const std::string& name, const at::Tensor& value) {
    const auto& parts = by_name.at(name)->parts;
    if (parts.size() == 1) return to(parts.front().parameter, value);
    const at::Tensor rows = value.reshape({-1, value.size(-1)});
    int64_t row = 0;
    for (const auto& part : parts) {
      to(part.parameter, rows.narrow(0, row, part.rows));
      row += part.rows;
    }
  };
  // Files of tied models may still carry lm_head.weight, and old ones the rotary inv_freq buffers;
  // a wrapping model's other parts (Gemma 3's vision tower) are not trained.
  const auto not_decoder = [&](const std::string& name) {
    return c.hf.wrapper && !starts_with(name, c.hf.wrapper->weight_prefix) &&
           !starts_with(name, c.hf.wrapper->head_prefix);
  };
  const formats::HfFolder folder = formats::read_hf_folder(init_from);
  if (c.hf.wrapper)
    log::info(init_from, ": a ", c.hf.wrapper->model_type,
              " model; pstar trains its language model (", c.hf.wrapper->weight_prefix,
              "*) and leaves the rest (the vision tower and its projector) untrained: merge-ckpt "
              "copies those back from this folder");
  const auto ignored = [&](const std::string& name) {
    const std::string head = c.hf.wrapper ? c.hf.wrapper->head_prefix + "weight" : "lm_head.weight";
    return (c.tie_word_embeddings && name == head) ||
           name.find("rotary_emb.inv_freq") != std::string::npos || not_decoder(name);
  };
  return load_hf_weights(folder, expected, split, ignored);
}

}  // namespace pstar::model
