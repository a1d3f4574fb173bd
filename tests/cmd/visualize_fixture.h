// What the `pstar visualize` tests share (visualize_test.cpp, visualize_location_test.cpp): a
// synthetic profile written with formats::write_profile, a decoder for the PNGs cairo writes, and
// the fixture that runs `pstar visualize` and checks a figure down to its pixels.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "cli_util.h"
#include "pstar/formats/profile.h"
#include "test_util.h"

namespace pstar::cmd::visualize_testing {

using formats::ChunkEventKind;
using formats::ChunkPlace;
using formats::Profile;
using formats::ProfileMemory;
using formats::ProfileStage;
using pstar::testing::ScratchDir;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kChunkBytes = 4 * kMiB;

struct MemoryRow {
  int64_t step, moment;
  std::string name;
  ProfileStage stage;
  double time_s;
  int64_t device_chunks, device_non_model, host_chunks, host_non_model;
};

inline void append(ProfileMemory& m, const MemoryRow& r, bool by_moment) {
  if (by_moment) {
    m.step.push_back(r.step);
    m.moment.push_back(r.moment);
    m.name.push_back(r.name);
  }
  m.stage.push_back(static_cast<int8_t>(r.stage));
  m.time_s.push_back(r.time_s);
  m.device_chunks.push_back(r.device_chunks);
  m.device_non_model.push_back(r.device_non_model);
  m.device_total.push_back(r.device_chunks + r.device_non_model + 256 * 1024);
  m.host_chunks.push_back(r.host_chunks);
  m.host_non_model.push_back(r.host_non_model);
  m.host_total.push_back(r.host_chunks + r.host_non_model);
}

inline void add_event(Profile& p, double t, int64_t step, int64_t moment, int64_t chunk,
                      ChunkEventKind kind, int64_t bytes) {
  auto& e = p.events;
  e.time_s.push_back(t);
  e.step.push_back(step);
  e.moment.push_back(moment);
  e.chunk.push_back(chunk);
  e.kind.push_back(static_cast<int8_t>(kind));
  e.bytes.push_back(bytes);
  e.duration_s.push_back(
      kind == ChunkEventKind::kMoveH2D || kind == ChunkEventKind::kMoveD2H ? 1e-3 : 0.0);
}

// What the chunk engine records for a 12-chunk model under a 40 MiB device budget that holds six
// 4 MiB chunks next to the activations: forward visits chunks 0..11 and backward 11..0, each
// visit bringing its chunk to the device and evicting the least recently used one past six, and the
// optimizer updates the chunks where they are, three per moment. Chunk 11 is a gathered copy,
// absent except while in use.
inline Profile synthetic_profile(int64_t steps = 3) {
  constexpr int64_t kChunks = 12, kOnDevice = 6, kGathered = 11;
  Profile p;
  p.run.config_json = R"({"model": {"preset": "gpt-mini"}, "engine": {"mode": "chunked"}})";
  p.run.pstar_version = "0.1.0";
  p.run.torch_version = "1.13.0";
  p.run.created = "2024-01-01T00:00:00Z";
  p.run.precision = "bf16";
  p.run.chunk_size = kChunkBytes / 2;
  p.run.num_chunks = kChunks;
  p.run.compute_bytes_per_chunk = kChunkBytes;
  p.run.optimizer_bytes_per_chunk = 3 * kChunkBytes;
  p.run.device_budget = 40 * kMiB;
  p.run.host_budget = 2048 * kMiB;
  p.run.warmup_iterations = 1;
  p.run.steps = steps;
  for (int64_t c = 0; c < kChunks; ++c) {
    p.chunks.id.push_back(c);
    p.chunks.numel.push_back(kChunkBytes / 2);
    p.chunks.capacity.push_back(kChunkBytes / 2);
    p.chunks.group.push_back(c / 4);
    p.chunks.owner.push_back(0);
    p.chunks.embedding.push_back(c == 0 ? 1 : 0);
    p.chunks.payloads.push_back("param+grad,master,exp_avg,exp_avg_sq");
  }

  std::deque<int64_t> device;  // least recently used first
  double t = 0;
  int64_t row = 0;
  for (int64_t step = 0; step < steps; ++step) {
    const double step_start = t;
    std::vector<std::pair<int64_t, ProfileStage>> visits;
    for (int64_t c = 0; c < kChunks; ++c) visits.emplace_back(c, ProfileStage::kForward);
    for (int64_t c = kChunks; c-- > 0;) visits.emplace_back(c, ProfileStage::kBackward);
    for (int64_t c = 0; c < kChunks; c += 3) visits.emplace_back(c, ProfileStage::kOptimizer);
    int64_t moves_in = 0, moves_out = 0, device_peak = 0;
    for (size_t k = 0; k < visits.size(); ++k) {
      const auto [chunk, stage] = visits[k];
      const double dt = stage == ProfileStage::kForward    ? 0.010
                        : stage == ProfileStage::kBackward ? 0.020
                                                           : 0.015;
      if (stage != ProfileStage::kOptimizer) {
        auto it = std::find(device.begin(), device.end(), chunk);
        if (it != device.end()) {
          device.erase(it);
        } else {
          add_event(p, t, step, row, chunk,
                    chunk == kGathered ? ChunkEventKind::kAllocate : ChunkEventKind::kMoveH2D,
                    kChunkBytes);
          moves_in += chunk == kGathered ? 0 : kChunkBytes;
        }
        device.push_back(chunk);
        if (static_cast<int64_t>(device.size()) > kOnDevice) {
          const int64_t out = device.front();
          device.pop_front();
          add_event(p, t, step, row, out,
                    out == kGathered ? ChunkEventKind::kRelease : ChunkEventKind::kMoveD2H,
                    kChunkBytes);
          moves_out += out == kGathered ? 0 : kChunkBytes;
        }
      } else {
        for (int64_t c = chunk; c < chunk + 3; ++c) {
          const bool on_device = std::find(device.begin(), device.end(), c) != device.end();
          add_event(p, t, step, row, c,
                    on_device ? ChunkEventKind::kAdamDevice : ChunkEventKind::kAdamHost, 0);
        }
      }
      const int64_t local = static_cast<int64_t>(k);
      const int64_t activations = stage == ProfileStage::kForward    ? (local + 1) * kMiB
                                  : stage == ProfileStage::kBackward ? (2 * kChunks - local) * kMiB
                                                                     : kMiB / 2;
      int64_t on_device = 0, on_host = 0;
      for (int64_t c = 0; c < kChunks; ++c) {
        const bool here = std::find(device.begin(), device.end(), c) != device.end();
        const ChunkPlace place = here             ? ChunkPlace::kDevice
                                 : c == kGathered ? ChunkPlace::kAbsent
                                                  : ChunkPlace::kHost;
        p.location.push_back(static_cast<int8_t>(place));
        on_device += place == ChunkPlace::kDevice;
        on_host += place == ChunkPlace::kHost;
      }
      const MemoryRow r{
          step,
          local,
          std::string(formats::to_string(stage)) + " of chunk " + std::to_string(chunk),
          stage,
          t,
          on_device * kChunkBytes,
          activations,
          on_host * kChunkBytes,
          kMiB / 2};
      append(p.by_moment, r, true);
      device_peak = std::max(device_peak, p.by_moment.device_total.back());
      // Clock samples every 5 ms within the moment.
      for (double s = t; s < t + dt - 1e-9; s += 0.005) {
        MemoryRow sample = r;
        sample.time_s = s;
        append(p.by_time, sample, false);
      }
      t += dt;
      ++row;
    }
    p.steps.step.push_back(step);
    p.steps.time_s.push_back(t - step_start);
    p.steps.forward_s.push_back(0.12);
    p.steps.backward_s.push_back(0.24);
    p.steps.optimizer_s.push_back(0.06);
    p.steps.loss.push_back(5.5 - 0.1 * static_cast<double>(step));
    p.steps.device_peak_bytes.push_back(device_peak);
    p.steps.host_peak_bytes.push_back(kChunks * kChunkBytes);
    p.steps.moved_h2d_bytes.push_back(moves_in);
    p.steps.moved_d2h_bytes.push_back(moves_out);
  }
  // A move outside any moment (the start-up placement), which the moves figure notes.
  add_event(p, 0, 0, -1, 3, ChunkEventKind::kMoveH2D, kChunkBytes);
  return p;
}

// ---- PNG ---------------------------------------------------------------------------------------

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
  std::string error;         // why it could not be decoded
  const uint8_t* at(uint32_t x, uint32_t y) const { return &rgb[(size_t{y} * width + x) * 3]; }
};

inline uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

inline int paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

// The 8-bit, non-interlaced RGB or RGBA PNGs cairo writes: chunks, inflate, unfilter.
inline Image decode_png(const std::vector<uint8_t>& bytes) {
  Image img;
  static const uint8_t kMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() < 8 || !std::equal(kMagic, kMagic + 8, bytes.begin())) {
    img.error = "no PNG signature";
    return img;
  }
  int channels = 0;
  std::vector<uint8_t> idat;
  for (size_t pos = 8; pos + 12 <= bytes.size();) {
    const uint32_t length = be32(&bytes[pos]);
    const std::string type(bytes.begin() + static_cast<long>(pos) + 4,
                           bytes.begin() + static_cast<long>(pos) + 8);
    const uint8_t* data = &bytes[pos + 8];
    if (pos + 12 + length > bytes.size()) {
      img.error = "truncated " + type + " chunk";
      return img;
    }
    if (type == "IHDR") {
      img.width = be32(data);
      img.height = be32(data + 4);
      const int depth = data[8], colour = data[9], interlace = data[12];
      if (depth != 8 || (colour != 2 && colour != 6) || interlace != 0) {
        img.error = "unsupported IHDR: depth " + std::to_string(depth) + ", colour type " +
                    std::to_string(colour) + ", interlace " + std::to_string(interlace);
        return img;
      }
      channels = colour == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      idat.insert(idat.end(), data, data + length);
    }
    pos += 12 + length;
  }
  if (channels == 0 || idat.empty()) {
    img.error = "no IHDR or IDAT";
    return img;
  }
  const size_t stride = size_t{img.width} * static_cast<size_t>(channels);
  std::vector<uint8_t> raw(size_t{img.height} * (stride + 1));
  uLongf raw_size = static_cast<uLongf>(raw.size());
  if (uncompress(raw.data(), &raw_size, idat.data(), static_cast<uLong>(idat.size())) != Z_OK ||
      raw_size != raw.size()) {
    img.error = "IDAT does not inflate to height x (1 + row bytes)";
    return img;
  }
  std::vector<uint8_t> pixels(size_t{img.height} * stride), zero(stride, 0);
  for (uint32_t y = 0; y < img.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* out = &pixels[y * stride];
    const uint8_t* up = y ? &pixels[(y - 1) * stride] : zero.data();
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? out[i - channels] : 0;
      const int b = up[i];
      const int c = i >= static_cast<size_t>(channels) ? up[i - channels] : 0;
      int predicted = 0;
      switch (filter) {
        case 0:
          predicted = 0;
          break;
        case 1:
          predicted = a;
          break;
        case 2:
          predicted = b;
          break;
        case 3:
          predicted = (a + b) / 2;
          break;
        case 4:
          predicted = paeth(a, b, c);
          break;
        default:
          img.error = "bad filter type " + std::to_string(filter);
          return img;
      }
      out[i] = static_cast<uint8_t>(in[i] + predicted);
    }
  }
  img.rgb.resize(size_t{img.width} * img.height * 3);
  for (size_t i = 0; i < size_t{img.width} * img.height; ++i)
    std::copy_n(&pixels[i * static_cast<size_t>(channels)], 3, &img.rgb[i * 3]);
  return img;
}

inline bool is_white(const uint8_t* px) { return px[0] == 255 && px[1] == 255 && px[2] == 255; }

inline size_t count_colour(const Image& img, uint8_t r, uint8_t g, uint8_t b) {
  size_t n = 0;
  for (size_t i = 0; i < img.rgb.size(); i += 3)
    n += img.rgb[i] == r && img.rgb[i + 1] == g && img.rgb[i + 2] == b;
  return n;
}

// ---- fixture -----------------------------------------------------------------------------------

class VisualizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    profile_ = dir_.file("run.h5");
    formats::write_profile(profile_, synthetic_profile());
  }

  RunResult visualize(std::vector<std::string> args) {
    args.insert(args.begin(), "visualize");
    return run_pstar(args, dir_.path());
  }

  // Files in the scratch directory besides the profile: temporaries must not be left behind.
  std::set<std::string> outputs() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_.path()))
      if (e.path().filename() != "run.h5") names.insert(e.path().filename().string());
    return names;
  }

  // `detailed`: also look for the figure's own colours in the interiors of filled areas, which a
  // profile with thousands of moments (bands and bars under a pixel wide) does not have.
  void expect_figure_png(const std::string& path, const std::string& figure, bool detailed = true) {
    const Image img = decode_png(pstar::testing::read_bytes(path));
    ASSERT_TRUE(img.error.empty()) << path << ": " << img.error;
    EXPECT_EQ(img.width, 1200u);
    EXPECT_EQ(img.height, 700u);
    // White page (PLplot's default background is black), and a real plot on it.
    EXPECT_TRUE(is_white(img.at(0, 0)) && is_white(img.at(1199, 699))) << path;
    size_t drawn = 0;
    std::set<uint32_t> colours;
    for (size_t i = 0; i < img.rgb.size(); i += 3) {
      drawn += !is_white(&img.rgb[i]);
      colours.insert(uint32_t{img.rgb[i]} << 16 | uint32_t{img.rgb[i + 1]} << 8 | img.rgb[i + 2]);
    }
    const double share = static_cast<double>(drawn) / (1200.0 * 700.0);
    EXPECT_GT(share, 0.25) << path << ": only " << drawn << " non-white pixels";
    EXPECT_GT(colours.size(), 20u) << path;
    if (!detailed) return;
    if (figure == "location") {
      EXPECT_GT(count_colour(img, 70, 130, 180), 5000u) << "host cells in " << path;
      EXPECT_GT(count_colour(img, 230, 120, 40), 5000u) << "device cells in " << path;
      EXPECT_GT(count_colour(img, 238, 238, 238), 1000u) << "absent cells in " << path;
    }
    if (figure == "moves") {
      EXPECT_GT(count_colour(img, 44, 160, 44), 200u) << "h2d bars in " << path;
      EXPECT_GT(count_colour(img, 148, 103, 189), 200u) << "d2h bars in " << path;
    }
    // Stage bands behind the data (forward, backward, optimizer).
    if (figure != "location") {
      EXPECT_GT(count_colour(img, 222, 235, 250), 1000u) << "forward band in " << path;
      EXPECT_GT(count_colour(img, 253, 232, 210), 1000u) << "backward band in " << path;
      EXPECT_GT(count_colour(img, 222, 242, 218), 100u) << "optimizer band in " << path;
    }
  }

  ScratchDir dir_;
  std::string profile_;
};

}  // namespace pstar::cmd::visualize_testing
