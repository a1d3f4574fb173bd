// What the profile file's tests share (profile_test.cpp, profile_read_errors_test.cpp,
// profile_interop_test.cpp): a fixture with a scratch directory and a full profile, comparisons,
// and helpers that tamper with files through HDF5's own APIs.
#pragma once

#include "pstar/formats/profile.h"

#include <H5Cpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/base/version.h"
#include "pstar_test_paths.h"
#include "test_util.h"

namespace pstar::formats::profile_testing {

namespace fs = std::filesystem;
using pstar::testing::message_of;

class ProfileTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return scratch_.file(name); }

  std::vector<std::string> dir_entries(const fs::path& dir) const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  pstar::testing::ScratchDir scratch_;
};

inline int8_t code(ProfileStage s) { return static_cast<int8_t>(s); }
inline int8_t code(ChunkPlace p) { return static_cast<int8_t>(p); }

// A profile with distinct, non-trivial values in every column: 3 chunks, 2 steps of 2 moments,
// 5 clock samples, an event of every kind and a NaN loss.
inline Profile full_profile() {
  Profile p;
  ProfileRun& r = p.run;
  // Over 64 KiB with quotes, newlines and UTF-8: larger than an HDF5 object header holds inline.
  r.config_json = "{\"model\": \"gpt2\", \"note\": \"µ-batch ✓\\n\"}\n" + std::string(70000, 'x');
  r.pstar_version = "0.4.0-dev";
  r.torch_version = "2.1.2";
  r.created = "2024-05-06T07:08:09Z";
  r.precision = "bf16";
  r.chunk_size = 524288;
  r.num_chunks = 3;
  r.compute_bytes_per_chunk = 1048576;
  r.optimizer_bytes_per_chunk = 6291456;
  r.device_budget = int64_t{80} << 30;
  r.host_budget = int64_t{1} << 40;
  r.world_size = 2;
  r.rank = 1;
  r.warmup_iterations = 1;
  r.steps = 2;

  ProfileChunks& c = p.chunks;
  c.id = {0, 1, 2};
  c.numel = {524288, 400000, 123};
  c.capacity = {524288, 524288, 524288};
  c.group = {0, 0, 1};
  c.owner = {0, 1, 0};
  c.embedding = {1, 0, 0};
  c.payloads = {"param+grad,master,exp_avg,exp_avg_sq", "", "param+grad (gathered) ✓"};
  c.tensors = {"transformer.wte.weight", "h.0.attn.c_attn.weight,h.0.attn.c_attn.bias", ""};

  ProfileMemory& m = p.by_moment;
  m.step = {1, 1, 2, 2};
  m.moment = {0, 1, 0, 1};
  m.name = {"forward of transformer.h.0.attn.c_attn.weight", "backward of lm_head", "",
            "optimizer"};
  m.stage = {code(ProfileStage::kForward), code(ProfileStage::kBackward),
             code(ProfileStage::kForward), code(ProfileStage::kOptimizer)};
  m.time_s = {0.0, 0.125, 1.5, 1.75e-3};
  m.device_total = {100, 200, int64_t{1} << 50, 0};
  m.device_chunks = {60, 120, 7, 0};
  m.device_non_model = {40, 80, (int64_t{1} << 50) - 7, 0};
  m.host_total = {1, 2, 3, 4};
  m.host_chunks = {1, 2, 3, 3};
  m.host_non_model = {0, 0, 0, 1};

  ProfileMemory& t = p.by_time;
  t.stage = {0, 0, 1, 1, 2};
  t.time_s = {0.0, 0.005, 0.01, 0.015, 0.02};
  t.device_total = {10, 20, 30, 40, 50};
  t.device_chunks = {5, 10, 15, 20, 25};
  t.device_non_model = {5, 10, 15, 20, 25};
  t.host_total = {7, 7, 7, 7, -7};
  t.host_chunks = {7, 7, 7, 7, -7};
  t.host_non_model = {0, 0, 0, 0, 0};

  ProfileEvents& e = p.events;
  for (int k = 0; k < 8; ++k) {
    e.time_s.push_back(0.01 * k);
    e.step.push_back(1 + k / 4);
    e.moment.push_back(k % 3 == 0 ? -1 : k / 2);  // -1: outside any moment
    e.chunk.push_back(k % 3);
    e.kind.push_back(static_cast<int8_t>(k));
    e.bytes.push_back(int64_t{1} << (k + 20));
    e.duration_s.push_back(k * 1e-6);
  }

  p.location = {code(ChunkPlace::kDevice), code(ChunkPlace::kHost),   code(ChunkPlace::kAbsent),
                code(ChunkPlace::kHost),   code(ChunkPlace::kDevice), code(ChunkPlace::kAbsent),
                code(ChunkPlace::kDevice), code(ChunkPlace::kDevice), code(ChunkPlace::kHost),
                code(ChunkPlace::kAbsent), code(ChunkPlace::kHost),   code(ChunkPlace::kHost)};

  ProfileSteps& s = p.steps;
  s.step = {1, 2};
  s.time_s = {1.25, 1.0};
  s.forward_s = {0.5, 0.4};
  s.backward_s = {0.6, 0.5};
  s.optimizer_s = {0.15, 0.1};
  s.loss = {5.4497, std::numeric_limits<double>::quiet_NaN()};
  s.device_peak_bytes = {177471488, 177471489};
  s.host_peak_bytes = {73400320, 0};
  s.moved_h2d_bytes = {8608808, 0};
  s.moved_d2h_bytes = {0, 8608808};
  return p;
}

// Doubles compared bit for bit, so that NaN equals NaN.
inline void expect_same(const std::vector<double>& a, const std::vector<double>& b,
                        const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, a.empty() ? 0 : std::memcmp(a.data(), b.data(), a.size() * sizeof(double))) << what;
}

inline void expect_same(const ProfileMemory& a, const ProfileMemory& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.moment, b.moment);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.stage, b.stage);
  expect_same(a.time_s, b.time_s, "memory time_s");
  EXPECT_EQ(a.device_total, b.device_total);
  EXPECT_EQ(a.device_chunks, b.device_chunks);
  EXPECT_EQ(a.device_non_model, b.device_non_model);
  EXPECT_EQ(a.host_total, b.host_total);
  EXPECT_EQ(a.host_chunks, b.host_chunks);
  EXPECT_EQ(a.host_non_model, b.host_non_model);
}

inline void expect_same(const Profile& a, const Profile& b) {
  EXPECT_EQ(a.run.schema_version, b.run.schema_version);
  EXPECT_EQ(a.run.config_json, b.run.config_json);
  EXPECT_EQ(a.run.pstar_version, b.run.pstar_version);
  EXPECT_EQ(a.run.torch_version, b.run.torch_version);
  EXPECT_EQ(a.run.created, b.run.created);
  EXPECT_EQ(a.run.precision, b.run.precision);
  EXPECT_EQ(a.run.chunk_size, b.run.chunk_size);
  EXPECT_EQ(a.run.num_chunks, b.run.num_chunks);
  EXPECT_EQ(a.run.compute_bytes_per_chunk, b.run.compute_bytes_per_chunk);
  EXPECT_EQ(a.run.optimizer_bytes_per_chunk, b.run.optimizer_bytes_per_chunk);
  EXPECT_EQ(a.run.device_budget, b.run.device_budget);
  EXPECT_EQ(a.run.host_budget, b.run.host_budget);
  EXPECT_EQ(a.run.world_size, b.run.world_size);
  EXPECT_EQ(a.run.rank, b.run.rank);
  EXPECT_EQ(a.run.warmup_iterations, b.run.warmup_iterations);
  EXPECT_EQ(a.run.steps, b.run.steps);

  EXPECT_EQ(a.chunks.id, b.chunks.id);
  EXPECT_EQ(a.chunks.numel, b.chunks.numel);
  EXPECT_EQ(a.chunks.capacity, b.chunks.capacity);
  EXPECT_EQ(a.chunks.group, b.chunks.group);
  EXPECT_EQ(a.chunks.owner, b.chunks.owner);
  EXPECT_EQ(a.chunks.embedding, b.chunks.embedding);
  EXPECT_EQ(a.chunks.payloads, b.chunks.payloads);
  EXPECT_EQ(a.chunks.tensors, b.chunks.tensors);

  expect_same(a.by_moment, b.by_moment);
  expect_same(a.by_time, b.by_time);

  expect_same(a.events.time_s, b.events.time_s, "events time_s");
  EXPECT_EQ(a.events.step, b.events.step);
  EXPECT_EQ(a.events.moment, b.events.moment);
  EXPECT_EQ(a.events.chunk, b.events.chunk);
  EXPECT_EQ(a.events.kind, b.events.kind);
  EXPECT_EQ(a.events.bytes, b.events.bytes);
  expect_same(a.events.duration_s, b.events.duration_s, "events duration_s");

  EXPECT_EQ(a.location, b.location);

  EXPECT_EQ(a.steps.step, b.steps.step);
  expect_same(a.steps.time_s, b.steps.time_s, "steps time_s");
  expect_same(a.steps.forward_s, b.steps.forward_s, "steps forward_s");
  expect_same(a.steps.backward_s, b.steps.backward_s, "steps backward_s");
  expect_same(a.steps.optimizer_s, b.steps.optimizer_s, "steps optimizer_s");
  expect_same(a.steps.loss, b.steps.loss, "steps loss");
  EXPECT_EQ(a.steps.device_peak_bytes, b.steps.device_peak_bytes);
  EXPECT_EQ(a.steps.host_peak_bytes, b.steps.host_peak_bytes);
  EXPECT_EQ(a.steps.moved_h2d_bytes, b.steps.moved_h2d_bytes);
  EXPECT_EQ(a.steps.moved_d2h_bytes, b.steps.moved_d2h_bytes);
}

inline std::vector<hsize_t> dataset_dims(const std::string& file_path, const std::string& dataset) {
  H5::H5File file(file_path, H5F_ACC_RDONLY);
  const H5::DataSpace space = file.openDataSet(dataset).getSpace();
  std::vector<hsize_t> dims(static_cast<size_t>(space.getSimpleExtentNdims()));
  space.getSimpleExtentDims(dims.data());
  return dims;
}

// Tampering, through HDF5's C API (an id closed on destruction) and its C++ API.
class RawFile {
 public:
  explicit RawFile(const std::string& path)
      : id_(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {
    EXPECT_GE(id_, 0) << "cannot open " << path;
  }
  ~RawFile() {
    if (id_ >= 0) H5Fclose(id_);
  }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;
  void delete_link(const char* name) { EXPECT_GE(H5Ldelete(id_, name, H5P_DEFAULT), 0) << name; }

 private:
  hid_t id_;
};

// Every edit below goes through HDF5 and then reseals the file (a new checksum header), so that
// the reader's own checks of the contents are what the tests reach (Note [profile checksum]).
inline void set_schema_version(const std::string& path, int64_t version) {
  {
    H5::H5File file(path, H5F_ACC_RDWR);
    file.openAttribute("schema_version").write(H5::PredType::NATIVE_INT64, &version);
  }
  reseal_profile(path);
}

// Replaces dataset `name` by one of the given type and shape holding `values` (repeated).
template <typename T>
void replace_dataset(const std::string& path, const std::string& name, const H5::PredType& type,
                     std::vector<hsize_t> dims, T value) {
  RawFile(path).delete_link(name.c_str());
  {
    H5::H5File file(path, H5F_ACC_RDWR);
    size_t total = 1;
    for (hsize_t d : dims) total *= d;
    std::vector<T> values(total, value);
    H5::DataSet dataset =
        file.createDataSet(name, type, H5::DataSpace(static_cast<int>(dims.size()), dims.data()));
    if (total > 0) dataset.write(values.data(), type);
  }
  reseal_profile(path);
}

// ---------------------------------------------------------------------------------------------

}  // namespace pstar::formats::profile_testing
