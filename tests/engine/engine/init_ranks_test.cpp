// Note [counter-based init] on two ranks (forked processes over Gloo): each rank writes only the
// chunks it owns, with the values a one-rank model holds, bit for bit; together the ranks hold
// every parameter once.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
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

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Builds the model and chunk engine on rank `rank` of 2 and checks every parameter it owns
// against `reference`; writes the names it owns, one a line, to `names_path`. Returns "" or what
// was wrong.
std::string check_rank(int rank, int port, const config::TrainConfig& c,
                       const std::map<std::string, at::Tensor>& reference,
                       const std::string& names_path) {
  dist::WorldInfo w;
  w.rank = rank;
  w.world_size = 2;
  w.local_rank = rank;
  w.local_world_size = 2;
  w.port = port;
  w.launcher = "test";
  dist::Communicator comm(w, std::chrono::seconds(60));
  ModelAndEngine built = build_model_and_engine(pstar::testing::cpu_plan(c, &comm), &comm);
  auto* engine = dynamic_cast<engine::ChunkedEngine*>(built.engine.get());
  if (engine == nullptr) return "no chunk engine";
  checkpoint::TensorList state;
  engine->state_dict(state);  // the chunks this rank owns
  std::string names;
  for (const auto& [name, tensor] : state) {
    if (name == checkpoint::kAdamStep || ends_with(name, checkpoint::exp_avg_of("")) ||
        ends_with(name, checkpoint::exp_avg_sq_of("")))
      continue;
    const auto it = reference.find(name);
    if (it == reference.end()) return "unknown parameter " + name;
    const at::Tensor got = tensor.contiguous(), want = it->second;
    if (got.sizes() != want.sizes() ||
        std::memcmp(got.data_ptr(), want.data_ptr(), static_cast<size_t>(want.nbytes())) != 0)
      return name + " differs from the one-rank model";
    names += name + "\n";
  }
  pstar::testing::write_text(names_path, names);
  return "";
}

TEST(InitRanksTest, EachRankWritesTheOneRankValuesOfTheChunksItOwns) {
  pstar::testing::ScratchDir dir;
  const std::string corpus = dir.file("corpus.txt");
  pstar::testing::write_text(corpus, pstar::testing::repetitive_corpus());
  config::TrainConfig c = pstar::testing::small_gpt_config(corpus, "chunked");
  c.train_micro_batch_size_per_gpu = 2;
  c.train_batch_size = 4;  // two ranks of 2
  std::map<std::string, at::Tensor> reference;
  model::BuildOptions options;
  options.seed = c.training.seed;
  for (const auto& item :
       model::build_causal_lm(model::resolve_model_shape(c.model), options)->named_parameters())
    reference[item.key()] = item.value().detach().clone();

  const int port = free_port();
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    std::string error;
    try {
      error = check_rank(1, port, c, reference, dir.file("rank1.txt"));
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!error.empty()) std::fprintf(stderr, "rank 1: %s\n", error.c_str());
    _exit(error.empty() ? 0 : 1);
  }
  std::string error;
  try {
    error = check_rank(0, port, c, reference, dir.file("rank0.txt"));
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "") << "rank 0";
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank 1 failed (its stderr says)";
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
