// Note [counter-based init] on two ranks (forked processes over Gloo): each rank writes only the
// chunks it owns, with the values a one-rank model holds, bit for bit; together the ranks hold
// every parameter once.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/dist/forked_ranks.h"
#include "engine/engine/owned_parameters.h"
#include "engine/small_gpt_config.h"
#include "pstar/base/strings.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/dist/communicator.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/model/factory.h"
#include "pstar/model/model_shape.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::train {
namespace {

// Builds the model and chunk engine on this rank of 2 and checks every parameter it owns
// against `reference`; writes the names it owns, one a line, to `names_path`. Returns "" or what
// was wrong.
std::string check_rank(dist::Communicator& comm, const config::TrainConfig& c,
                       const std::map<std::string, at::Tensor>& reference,
                       const std::string& names_path) {
  ModelAndEngine built = build_model_and_engine(pstar::testing::cpu_plan(c, &comm), &comm);
  auto* engine = dynamic_cast<engine::ChunkedEngine*>(built.engine.get());
  if (engine == nullptr) return "no chunk engine";
  std::vector<std::string> owned;
  const std::string error = pstar::testing::check_owned_parameters(*engine, reference, owned);
  if (!error.empty()) return error;
  std::string names;
  for (const std::string& name : owned) names += name + "\n";
  pstar::testing::write_text(names_path, names);
  return "";
}

TEST(InitRanksTest, EachRankWritesTheOneRankValuesOfTheChunksItOwns) {
  pstar::testing::ScratchDir dir;
  config::TrainConfig c = pstar::testing::small_gpt_config_in(dir);
  c.train_micro_batch_size_per_gpu = 2;
  c.train_batch_size = 4;  // two ranks of 2
  const std::map<std::string, at::Tensor> reference = pstar::testing::one_rank_parameters(c);

  pstar::testing::run_ranks(
      2,
      [&](dist::Communicator& comm) {
        const std::string error =
            check_rank(comm, c, reference, dir.file("rank" + std::to_string(comm.rank()) + ".txt"));
        if (!error.empty())
          std::fprintf(stderr, "rank %ld: %s\n", static_cast<long>(comm.rank()), error.c_str());
        return error.empty();
      },
      std::chrono::seconds(60));
  ASSERT_FALSE(::testing::Test::HasFailure());
  // Every parameter is owned by exactly one rank.
  std::multiset<std::string> owned;
  for (const char* file : {"rank0.txt", "rank1.txt"}) {
    const std::string text = pstar::testing::read_text(dir.file(file));
    size_t at = 0;
    for (size_t end; (end = text.find('\n', at)) != std::string::npos; at = end + 1)
      owned.insert(text.substr(at, end - at));
  }
  EXPECT_EQ(owned.size(), reference.size());
  for (const auto& [name, value] : reference) EXPECT_EQ(owned.count(name), 1u) << name;
}

}  // namespace
}  // namespace pstar::train
