// One parameter of a model as its builder creates it, known without building the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pstar::model {

struct ParameterShape {
  std::string name;  // the Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  int64_t leaf = 0;  // its leaf module's index in construction (= use) order
};

}  // namespace pstar::model
