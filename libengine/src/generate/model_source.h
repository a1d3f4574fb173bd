// Where `pstar generate`'s model comes from, and loading it (private to src/generate).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "pstar/formats/config.h"
#include "pstar/model/causal_lm.h"
#include "pstar/model/model_shape.h"

namespace pstar::generate::internal {

struct ModelSource {
  std::string given;           // MODEL as given
  std::string checkpoint_dir;  // the step directory; empty for a folder
  // The Hugging Face folder: MODEL itself, or the folder the checkpoint's run started from
  // (model.init_from); empty when there is none (a GPT trained from scratch).
  std::string folder;
  std::optional<config::TrainConfig> run;  // the checkpoint's config.json
  model::ModelShape shape;                 // a decoder's seq_len still to be set (set_length)
};

// MODEL: a step directory (ckpt-0.pt), a save_dir (`latest`), or a folder with a config.json.
// ConfigError naming the path and what was looked for otherwise; a checkpoint without its
// config.json (which says what model its files hold) too.
ModelSource find_model_source(const std::string& path);

// The positions a prompt and its completion may fill: a decoder's max_position_embeddings, a
// GPT's n_positions.
int64_t model_positions(const model::ModelShape& shape);

// Builds the model of `source` with `slots` positions for a decoder's rotary tables, its
// parameters allocated in `dtype` on `device` and loaded from the folder's safetensors or every
// rank's checkpoint file (checked against the manifest, as merge-ckpt checks them).
std::shared_ptr<model::CausalLM> load_model(ModelSource& source, int64_t slots,
                                            c10::ScalarType dtype, c10::Device device);

// generation_config.json's eos_token_id (a number or a list) in `folder`, or an empty list when
// there is no such file or key. FormatError naming the file for another value.
std::vector<int64_t> generation_config_stops(const std::string& folder);

}  // namespace pstar::generate::internal
