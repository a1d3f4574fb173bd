// What the ZeRO tests check of each rank's chunks (Note [counter-based init]): the initial
// parameters of a one-rank model, and the parameters a rank's chunk engine owns, each against
// them bit for bit.
#pragma once

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "pstar/base/strings.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/model/factory.h"
#include "pstar/model/model_shape.h"

namespace pstar::testing {

// The parameters a one-rank model of `c` starts with, by name.
inline std::map<std::string, at::Tensor> one_rank_parameters(const config::TrainConfig& c) {
  std::map<std::string, at::Tensor> reference;
  model::BuildOptions options;
  options.seed = c.training.seed;
  for (const auto& item :
       model::build_causal_lm(model::resolve_model_shape(c.model), options)->named_parameters())
    reference[item.key()] = item.value().detach().clone();
  return reference;
}

// The names of the parameters `engine` owns (its state_dict without Adam's state) into `owned`,
// with each one's elements into `numel` where given; returns "" when each holds the bits of its
// namesake in `reference`, else what differs. A piece of a split module's tensor (Note
// [checkpoint pieces]) is held against its elements of the tensor.
inline std::string check_owned_parameters(engine::ChunkedEngine& engine,
                                          const std::map<std::string, at::Tensor>& reference,
                                          std::vector<std::string>& owned,
                                          std::map<std::string, int64_t>* numel = nullptr) {
  checkpoint::TensorList state;
  engine.state_dict(state);
  for (const auto& [name, tensor] : state) {
    if (name == checkpoint::kAdamStep || starts_with(name, checkpoint::kShapePrefix) ||
        ends_with(name, checkpoint::exp_avg_of("")) ||
        ends_with(name, checkpoint::exp_avg_sq_of("")))
      continue;
    const auto piece = checkpoint::parse_piece_name(name);
    const auto it = reference.find(piece ? piece->first : name);
    if (it == reference.end()) return "unknown parameter " + name;
    const at::Tensor got = tensor.contiguous();
    const at::Tensor want = piece ? it->second.reshape({-1})
                                        .slice(0, piece->second, piece->second + got.numel())
                                        .contiguous()
                                  : it->second;
    if (got.sizes() != want.sizes() ||
        std::memcmp(got.data_ptr(), want.data_ptr(), static_cast<size_t>(want.nbytes())) != 0)
      return name + " differs from the one-rank model";
    owned.push_back(name);
    if (numel != nullptr) (*numel)[name] = got.numel();
  }
  return "";
}

}  // namespace pstar::testing
