// `pstar profile` and `pstar train --profile` end to end: the file is read back through the HDF5
// reader and checked against the run's own metrics.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "pstar/base/version.h"
#include "pstar/formats/profile.h"
#include "test_util.h"

namespace pstar::cmd {
namespace {

namespace fs = std::filesystem;
using formats::ChunkEventKind;
using formats::ChunkPlace;
using nlohmann::json;
using pstar::testing::read_text;
using pstar::testing::ScratchDir;
using pstar::testing::write_text;

std::map<int64_t, json> metrics_by_step(const std::string& path) {
  std::map<int64_t, json> out;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json m = json::parse(line);
    if (m.contains("record")) continue;  // the start-up record: not a step
    out[m["step"].get<int64_t>()] = m;
  }
  return out;
}

class ProfileCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path() / "conf");
    write_text(dir_.file("conf/corpus.txt"), pstar::testing::repetitive_corpus());
    // gpt-tiny on the chunk engine with a device tier so tight that chunks move every step.
    const json config = {
        {"model", {{"preset", "gpt-tiny"}, {"seq_len", 32}}},
        {"data", {{"text", "corpus.txt"}}},
        {"train_micro_batch_size_per_gpu", 4},
        {"default_chunk_size", 20000},
        {"bf16", {{"enabled", false}}},
        {"training", {{"steps", 100}, {"save_dir", "ckpt"}, {"save_interval", 1}}},
        {"engine",
         {{"mode", "chunked"},
          {"chunk_size_search", false},
          {"device_memory", "2500KB"},
          {"host_memory", "1GB"}}},
    };
    write_text(dir_.file("conf/train.json"), config.dump(2));
  }

  ScratchDir dir_;
};

TEST_F(ProfileCliTest, ProfileAgreesWithTheRunsMetrics) {
  const auto r = run_pstar({"profile", "conf/train.json", "-o", "run.h5", "--steps", "3",
                            "--metrics", "m.jsonl", "--device", "cpu"},
                           dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "profile: run.h5 (3 steps")) << r;
  EXPECT_FALSE(fs::exists(dir_.path() / "ckpt")) << "a profile run writes no checkpoints";
  const auto metrics = metrics_by_step(dir_.file("m.jsonl"));
  ASSERT_EQ(metrics.size(), 4u);  // the warm-up and the three recorded steps

  const formats::Profile p = formats::read_profile(dir_.file("run.h5"));
  EXPECT_EQ(p.run.schema_version, formats::kProfileSchemaVersion);
  EXPECT_TRUE(p.checksummed);
  // The version `pstar --version` prints, from CMakeLists.txt's project(VERSION).
  EXPECT_EQ(p.run.pstar_version, PSTAR_TEST_PROJECT_VERSION);
  EXPECT_EQ(p.run.pstar_version, pstar::version());
  EXPECT_NE(read_text(dir_.file("run.h5"))
                .substr(0, 80)
                .find(std::string("\nversion ") + PSTAR_TEST_PROJECT_VERSION + "\n"),
            std::string::npos);
  EXPECT_EQ(p.run.steps, 3);
  EXPECT_EQ(p.run.precision, "fp32");
  EXPECT_EQ(p.run.chunk_size, 20000);
  EXPECT_EQ(p.run.device_budget, 2500 * 1000);
  EXPECT_NE(p.run.config_json.find("gpt-tiny"), std::string::npos);
  ASSERT_EQ(p.chunks.size(), static_cast<size_t>(p.run.num_chunks));
  int64_t params = 0;
  for (size_t k = 0; k < p.chunks.size(); ++k) {
    EXPECT_EQ(p.chunks.id[k], static_cast<int64_t>(k));
    EXPECT_EQ(p.chunks.owner[k], 0);
    params += p.chunks.numel[k];
  }
  EXPECT_GT(params, 100000);
  // /chunks/tensors: each chunk's tensors by name, every parameter in exactly one chunk, the token
  // embedding in the embedding chunk.
  ASSERT_EQ(p.chunks.tensors.size(), p.chunks.size());
  std::set<std::string> names;
  size_t listed = 0;
  for (size_t k = 0; k < p.chunks.size(); ++k) {
    EXPECT_FALSE(p.chunks.tensors[k].empty()) << "chunk " << k;
    std::stringstream list(p.chunks.tensors[k]);
    for (std::string name; std::getline(list, name, ',');) {
      names.insert(name);
      ++listed;
      if (name == "transformer.wte.weight") {
        EXPECT_EQ(p.chunks.embedding[k], 1) << name;
      }
    }
  }
  EXPECT_EQ(names.size(), listed) << "a tensor named in two chunks";
  for (const char* name : {"transformer.wte.weight", "transformer.h.0.attn.c_attn.weight",
                           "transformer.h.1.mlp.c_proj.bias", "transformer.ln_f.weight"})
    EXPECT_EQ(names.count(name), 1u) << name;
  ASSERT_EQ(p.steps.step, (std::vector<int64_t>{2, 3, 4}));

  const size_t rows = p.by_moment.size();
  ASSERT_GT(rows, 0u);
  ASSERT_EQ(p.location.size(), rows * p.chunks.size());
  const int64_t chunk_bytes = p.run.compute_bytes_per_chunk;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const int64_t step = p.steps.step[i];
    const json& m = metrics.at(step);
    EXPECT_EQ(p.steps.device_peak_bytes[i], m["device_peak_bytes"].get<int64_t>());
    EXPECT_DOUBLE_EQ(p.steps.loss[i], m["loss"].get<double>());
    EXPECT_GT(p.steps.forward_s[i], 0);
    EXPECT_GT(p.steps.backward_s[i], 0);
    EXPECT_LE(p.steps.forward_s[i] + p.steps.backward_s[i] + p.steps.optimizer_s[i],
              p.steps.time_s[i] * 1.001);
    // The device peak is the highest of the step's moments: chunks + non-model over each.
    int64_t peak = 0;
    for (size_t r = 0; r < rows; ++r) {
      if (p.by_moment.step[r] != step) continue;
      EXPECT_EQ(p.by_moment.device_total[r],
                p.by_moment.device_chunks[r] + p.by_moment.device_non_model[r]);
      peak = std::max(peak, p.by_moment.device_total[r]);
    }
    EXPECT_EQ(peak, m["device_peak_bytes"].get<int64_t>()) << "step " << step;
    EXPECT_LE(peak, p.run.device_budget);

    // Moves: the events' bytes are the metrics', and (after the first recorded step, whose
    // predecessor was not recorded) each is a host -> device or device -> host change of place
    // between consecutive rows of the location matrix.
    int64_t h2d = 0, d2h = 0, h2d_events = 0, d2h_events = 0;
    for (size_t e = 0; e < p.events.size(); ++e) {
      if (p.events.step[e] != step) continue;
      const auto kind = static_cast<ChunkEventKind>(p.events.kind[e]);
      if (kind == ChunkEventKind::kMoveH2D) h2d += p.events.bytes[e], ++h2d_events;
      if (kind == ChunkEventKind::kMoveD2H) d2h += p.events.bytes[e], ++d2h_events;
    }
    EXPECT_EQ(h2d, m["moved_h2d_bytes"].get<int64_t>()) << "step " << step;
    EXPECT_EQ(d2h, m["moved_d2h_bytes"].get<int64_t>()) << "step " << step;
    EXPECT_GT(h2d, 0) << "the tight budget makes chunks move every step";
    if (i == 0) continue;
    int64_t to_device = 0, to_host = 0;
    for (size_t r = 1; r < rows; ++r) {
      if (p.by_moment.step[r] != step) continue;
      for (size_t k = 0; k < p.chunks.size(); ++k) {
        const auto before = static_cast<ChunkPlace>(p.location[(r - 1) * p.chunks.size() + k]);
        const auto after = static_cast<ChunkPlace>(p.location[r * p.chunks.size() + k]);
        to_device += before == ChunkPlace::kHost && after == ChunkPlace::kDevice;
        to_host += before == ChunkPlace::kDevice && after == ChunkPlace::kHost;
      }
    }
    EXPECT_EQ(to_device * chunk_bytes, h2d) << "step " << step;
    EXPECT_EQ(to_host * chunk_bytes, d2h) << "step " << step;
    // Row by row: the moves an event row names are the changes of place that row shows.
    for (size_t r = 1; r < rows; ++r) {
      if (p.by_moment.step[r] != step) continue;
      int64_t changes = 0, moves = 0;
      for (size_t k = 0; k < p.chunks.size(); ++k)
        changes += p.location[(r - 1) * p.chunks.size() + k] != p.location[r * p.chunks.size() + k];
      for (size_t e = 0; e < p.events.size(); ++e) {
        const auto kind = static_cast<ChunkEventKind>(p.events.kind[e]);
        moves += p.events.moment[e] == static_cast<int64_t>(r) &&
                 (kind == ChunkEventKind::kMoveH2D || kind == ChunkEventKind::kMoveD2H);
      }
      EXPECT_EQ(changes, moves) << "row " << r << " (" << p.by_moment.name[r] << ")";
    }
  }
  // Stages: forward moments, then backward, then one optimizer moment per step.
  EXPECT_EQ(std::count(p.by_moment.stage.begin(), p.by_moment.stage.end(),
                       static_cast<int8_t>(formats::ProfileStage::kOptimizer)),
            3);
  // Adam ran on every chunk once per step, on one side or the other.
  int64_t adam = 0;
  for (int8_t k : p.events.kind)
    adam += k == static_cast<int8_t>(ChunkEventKind::kAdamDevice) ||
            k == static_cast<int8_t>(ChunkEventKind::kAdamHost);
  EXPECT_EQ(adam, 3 * p.run.num_chunks);
  // The clock sampler ran and stayed within the recorded time.
  ASSERT_GT(p.by_time.size(), 0u);
  EXPECT_TRUE(std::is_sorted(p.by_time.time_s.begin(), p.by_time.time_s.end()));
}

TEST_F(ProfileCliTest, TrainProfileRecordsEveryStep) {
  const auto r =
      run_pstar({"train", "conf/train.json", "--device", "cpu", "--set", "training.steps=2",
                 "--set", "training.save_interval=0", "--profile", "all.h5"},
                dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r;
  const formats::Profile p = formats::read_profile(dir_.file("all.h5"));
  EXPECT_EQ(p.steps.step, (std::vector<int64_t>{1, 2}));
}

TEST_F(ProfileCliTest, TheTorchEngineHasNothingToProfile) {
  const auto r = run_pstar(
      {"profile", "conf/train.json", "-o", "x.h5", "--device", "cpu", "--set", "engine.mode=torch"},
      dir_.path());
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "--profile records the chunk engine")) << r;
  EXPECT_FALSE(fs::exists(dir_.path() / "x.h5"));
}

TEST_F(ProfileCliTest, AnUnwritableOutputIsAnIoError) {
  const auto r = run_pstar(
      {"profile", "conf/train.json", "-o", "no/such/dir/x.h5", "--device", "cpu", "--steps", "1"},
      dir_.path());
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(contains(r.err, "no/such/dir/x.h5")) << r;
}

}  // namespace
}  // namespace pstar::cmd
