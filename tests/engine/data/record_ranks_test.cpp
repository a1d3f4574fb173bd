// data.jsonl on two real ranks (processes over Gloo): rank 0 makes the record cache and the other
// reads it (Note [token cache on several ranks]); when rank 0 cannot, the other stops with a
// DistError pointing at it instead of waiting or making its own.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "engine/dist/forked_ranks.h"
#include "pstar/base/error.h"
#include "pstar/data/record_sampler.h"
#include "pstar/data/record_source.h"
#include "pstar/dist/communicator.h"
#include "pstar/formats/config.h"
#include "test_util.h"
#include "text/record_fixtures.h"

namespace pstar::data {
namespace {

namespace fs = std::filesystem;
using pstar::testing::write_text;

config::DataConfig data_in(const pstar::testing::ScratchDir& dir, const std::string& lines) {
  fs::create_directories(dir.path() / "tok");
  write_text(dir.file("tok/tokenizer.json"), text::testing::small_tokenizer_json());
  write_text(dir.file("tok/tokenizer_config.json"), text::testing::small_tokenizer_config());
  write_text(dir.file("chat.jsonl"), lines);
  config::DataConfig data;
  data.jsonl = dir.file("chat.jsonl");
  data.tokenizer = dir.file("tok");
  return data;
}

int records_files(const pstar::testing::ScratchDir& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir.path()))
    n += e.path().extension() == ".records" ? 1 : 0;
  return n;
}

const std::string kLine = R"({"messages": [{"role": "user", "content": "Hello"},)"
                          R"( {"role": "assistant", "content": "Paris is the capital"}]})";

TEST(RecordRanksTest, RankZeroMakesTheCacheAndTheOtherReadsIt) {
  pstar::testing::ScratchDir dir;
  const config::DataConfig data = data_in(dir, kLine + "\n" + kLine + "\n" + kLine + "\n");
  pstar::testing::run_ranks(2, [&](dist::Communicator& comm) {
    const RecordSources sources = open_record_sources(data, 400, 32, &comm);
    // Both ranks see the same records, from the one file rank 0 wrote.
    RecordSampler sampler(*sources.train, Sampling::kRandom, true, 1, 32, 1, 3, comm.rank(), 2);
    const double total =
        comm.all_reduce_sum(static_cast<double>(sampler.global_counted_targets(1)));
    return sources.train->records() == 3 && records_files(dir) == 1 &&
           total == 2.0 * static_cast<double>(sampler.global_counted_targets(1));
  });
}

TEST(RecordRanksTest, WhenRankZeroFailsTheOtherSaysSo) {
  pstar::testing::ScratchDir dir;
  const config::DataConfig data = data_in(dir, kLine + "\n{not json\n");
  pstar::testing::run_ranks(2, [&](dist::Communicator& comm) {
    try {
      (void)open_record_sources(data, 400, 32, &comm);
    } catch (const FormatError& e) {
      return comm.rank() == 0 &&
             std::string(e.what()).find("line 2: not JSON") != std::string::npos;
    } catch (const DistError& e) {
      return comm.rank() == 1 &&
             std::string(e.what()).find("data.jsonl " + data.jsonl +
                                        ": rank 0 could not make its record cache") !=
                 std::string::npos;
    }
    return false;
  });
  EXPECT_EQ(records_files(dir), 0);
}

}  // namespace
}  // namespace pstar::data
