// `pstar visualize` end to end: every figure in every format from a synthetic profile written with
// formats::write_profile, checked down to the PNG's pixels, and the errors bad input gives.
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

namespace pstar::cmd {
namespace {

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

void append(ProfileMemory& m, const MemoryRow& r, bool by_moment) {
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

void add_event(Profile& p, double t, int64_t step, int64_t moment, int64_t chunk,
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
Profile synthetic_profile(int64_t steps = 3) {
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

uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

int paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

// The 8-bit, non-interlaced RGB or RGBA PNGs cairo writes: chunks, inflate, unfilter.
Image decode_png(const std::vector<uint8_t>& bytes) {
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

bool is_white(const uint8_t* px) { return px[0] == 255 && px[1] == 255 && px[2] == 255; }

size_t count_colour(const Image& img, uint8_t r, uint8_t g, uint8_t b) {
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

// ---- every figure in every format --------------------------------------------------------------

class VisualizeFigureTest
    : public VisualizeTest,
      public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(VisualizeFigureTest, WritesTheFigure) {
  const auto& [figure, ext] = GetParam();
  const std::string out = "fig." + ext;
  const RunResult r = visualize({"run.h5", "--fig", figure, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "wrote fig." + ext)) << r;
  EXPECT_EQ(r.out, out + "\n") << r;  // the path written, for scripts
  EXPECT_EQ(outputs(), std::set<std::string>{out});
  const std::string bytes = pstar::testing::read_text(dir_.file(out));
  ASSERT_GT(bytes.size(), 1000u) << out;
  if (ext == "png") {
    EXPECT_EQ(bytes.substr(0, 4), "\x89PNG");
    expect_figure_png(dir_.file(out), figure);
  } else if (ext == "svg") {
    EXPECT_TRUE(contains(bytes, "<svg")) << out;
    EXPECT_TRUE(contains(bytes, "</svg>")) << out;
  } else {
    EXPECT_EQ(bytes.substr(0, 5), "%PDF-");
    EXPECT_TRUE(contains(bytes, "%%EOF")) << out;
  }
}

INSTANTIATE_TEST_SUITE_P(
    FiguresAndFormats, VisualizeFigureTest,
    ::testing::Combine(::testing::Values("memory", "location", "moves", "timeline"),
                       ::testing::Values("png", "svg", "pdf")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST_F(VisualizeTest, TierOptionsAndUpperCaseExtension) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"run.h5", "--fig", "memory", "--tier", "host", "-o", "host.png"},
           {"run.h5", "--fig", "timeline", "--tier", "device", "-o", "device.PNG"}}) {
    const RunResult r = visualize(args);
    ASSERT_EQ(r.exit_code, 0) << r;
    expect_figure_png(dir_.file(args.back()), "memory");
  }
  // --tier means nothing to the location figure: a warning, not an error.
  const RunResult r = visualize({"run.h5", "--fig", "location", "--tier", "host", "-o", "l.svg"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "--tier host has no effect on --fig location")) << r;
  EXPECT_EQ(outputs(), (std::set<std::string>{"host.png", "device.PNG", "l.svg"}));
}

TEST_F(VisualizeTest, ReplacesAnExistingOutput) {
  pstar::testing::write_text(dir_.file("fig.png"), "old");
  const RunResult r = visualize({"run.h5", "--fig", "moves", "-o", "fig.png"});
  ASSERT_EQ(r.exit_code, 0) << r;
  expect_figure_png(dir_.file("fig.png"), "moves");
  EXPECT_EQ(outputs(), std::set<std::string>{"fig.png"});
}

TEST_F(VisualizeTest, TimelineWithoutClockSamplesUsesTheMoments) {
  Profile p = synthetic_profile(2);
  p.by_time = ProfileMemory{};
  formats::write_profile(dir_.file("moments.h5"), p);
  const RunResult r = visualize({"moments.h5", "--fig", "timeline", "-o", "t.png"});
  ASSERT_EQ(r.exit_code, 0) << r;
  expect_figure_png(dir_.file("t.png"), "timeline");
}

TEST_F(VisualizeTest, ManyMomentsAndChunks) {
  // 150 steps, 4200 moments: stacked-area polygons of some 17000 points, step labels thinned out.
  formats::write_profile(dir_.file("long.h5"), synthetic_profile(150));
  for (const char* figure : {"memory", "location", "moves", "timeline"}) {
    const RunResult r = visualize({"long.h5", "--fig", figure, "-o", std::string(figure) + ".png"});
    ASSERT_EQ(r.exit_code, 0) << r;
    expect_figure_png(dir_.file(std::string(figure) + ".png"), figure, false);
  }
}

// ---- bad input ---------------------------------------------------------------------------------

TEST_F(VisualizeTest, MissingProfileIsAnIoError) {
  const RunResult r = visualize({"nope.h5", "--fig", "memory", "-o", "m.png"});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(contains(r.err, "I/O error")) << r;
  EXPECT_TRUE(contains(r.err, "nope.h5")) << r;
  EXPECT_TRUE(outputs().empty());
}

TEST_F(VisualizeTest, GarbageProfileIsAFormatError) {
  pstar::testing::write_text(dir_.file("garbage.h5"), std::string(4096, 'x'));
  const RunResult r = visualize({"garbage.h5", "--fig", "memory", "-o", "m.png"});
  EXPECT_EQ(r.exit_code, 4) << r;
  EXPECT_TRUE(contains(r.err, "format error")) << r;
  EXPECT_TRUE(contains(r.err, "garbage.h5")) << r;
  EXPECT_EQ(outputs(), std::set<std::string>{"garbage.h5"});
}

TEST_F(VisualizeTest, ProfileWithoutMomentsHasNothingToPlot) {
  Profile p = synthetic_profile(1);
  p.by_moment = ProfileMemory{};
  p.by_time = ProfileMemory{};
  p.location.clear();
  p.events = formats::ProfileEvents{};
  formats::write_profile(dir_.file("empty.h5"), p);
  const RunResult r = visualize({"empty.h5", "--fig", "location", "-o", "l.png"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "nothing to plot")) << r;
  EXPECT_TRUE(contains(r.err, "empty.h5")) << r;
  EXPECT_TRUE(contains(r.err, "record more steps")) << r;
  EXPECT_EQ(outputs(), std::set<std::string>{"empty.h5"});
}

TEST_F(VisualizeTest, UnknownFigureOrTierIsAUsageError) {
  RunResult r = visualize({"run.h5", "--fig", "pie", "-o", "m.png"});
  EXPECT_EQ(r.exit_code, 105) << r;
  EXPECT_TRUE(contains(r.err, "pie")) << r;
  EXPECT_TRUE(contains(r.err, "memory")) << r;
  EXPECT_TRUE(contains(r.err, "timeline")) << r;
  r = visualize({"run.h5", "--fig", "memory", "--tier", "disk", "-o", "m.png"});
  EXPECT_EQ(r.exit_code, 105) << r;
  EXPECT_TRUE(contains(r.err, "disk")) << r;
  EXPECT_TRUE(contains(r.err, "host")) << r;
  r = visualize({"run.h5", "-o", "m.png"});
  EXPECT_EQ(r.exit_code, 106) << r;
  EXPECT_TRUE(contains(r.err, "--fig")) << r;
  EXPECT_TRUE(outputs().empty());
}

TEST_F(VisualizeTest, UnknownOutputExtensionIsAConfigError) {
  for (const char* out : {"m.jpg", "m"}) {
    const RunResult r = visualize({"run.h5", "--fig", "memory", "-o", out});
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_TRUE(contains(r.err, std::string("'") + out + "'")) << r;
    EXPECT_TRUE(contains(r.err, ".png, .svg or .pdf")) << r;
  }
  EXPECT_TRUE(outputs().empty());
}

TEST_F(VisualizeTest, UnwritableOutputIsAnIoError) {
  pstar::testing::write_text(dir_.file("file"), "not a directory");
  for (const char* out : {"no/such/dir/m.png", "file/m.svg"}) {
    const RunResult r = visualize({"run.h5", "--fig", "memory", "-o", out});
    EXPECT_EQ(r.exit_code, 3) << r;
    EXPECT_TRUE(contains(r.err, std::string("cannot write output file '") + out + "'")) << r;
  }
  EXPECT_EQ(outputs(), std::set<std::string>{"file"});
}

// ---- defaults and PatrickStar's names ----------------------------------------------------------

// Without -o the figure goes beside the profile as <stem>-<figure>.png, whose path is printed;
// `--fig access` is PatrickStar's name for the location figure. The profile is never the output.
TEST_F(VisualizeTest, WithoutOutputWritesBesideTheProfileAndPrintsThePath) {
  fs::create_directories(dir_.path() / "runs");
  formats::write_profile(dir_.file("runs/profile.h5"), synthetic_profile(2));
  const std::string before = pstar::testing::read_text(dir_.file("runs/profile.h5"));
  for (const std::string figure : {"memory", "access", "location", "moves", "timeline"}) {
    const RunResult r = visualize({"runs/profile.h5", "--fig", figure});
    ASSERT_EQ(r.exit_code, 0) << r;
    const std::string out = "runs/profile-" + figure + ".png";
    EXPECT_EQ(r.out, out + "\n") << r;
    expect_figure_png(dir_.file(out), figure == "access" ? "location" : figure);
  }
  // access and location are one figure.
  EXPECT_EQ(pstar::testing::read_bytes(dir_.file("runs/profile-access.png")),
            pstar::testing::read_bytes(dir_.file("runs/profile-location.png")));
  EXPECT_EQ(pstar::testing::read_text(dir_.file("runs/profile.h5")), before);
  // From inside the profile's directory, a bare name.
  const RunResult r =
      run_pstar({"visualize", "profile.h5", "--fig", "moves"}, dir_.path() / "runs");
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "profile-moves.png\n") << r;
  // -o naming the profile itself is refused before anything is written.
  const RunResult self =
      visualize({"runs/profile.h5", "--fig", "memory", "-o", "runs/../runs/profile.h5"});
  EXPECT_EQ(self.exit_code, 2) << self;
  EXPECT_TRUE(contains(self.err, "that is the profile itself")) << self;
  EXPECT_EQ(pstar::testing::read_text(dir_.file("runs/profile.h5")), before);
}

// Note [location rows]: each chunk row says where its compute payload (the heat map) and its
// optimizer payloads (the strip at its right, from where Adam ran) are, and the legend names the
// payload kinds with their dtypes and PatrickStar's names. The synthetic run's Adam runs on the
// device for the chunks then on it and on the host for the rest, so the strip has both colours.
TEST_F(VisualizeTest, LocationFigureNamesThePayloadKindsOfItsRows) {
  const RunResult png = visualize({"run.h5", "--fig", "location", "-o", "l.png"});
  ASSERT_EQ(png.exit_code, 0) << png;
  const Image img = decode_png(pstar::testing::read_bytes(dir_.file("l.png")));
  ASSERT_TRUE(img.error.empty()) << img.error;
  // The strip: a column between the heat map and the legend (x ~ 0.658..0.68 of the page) with
  // host and device rows.
  size_t host = 0, device = 0;
  for (uint32_t y = 100; y < 600; ++y) {
    const uint8_t* px = img.at(static_cast<uint32_t>(0.67 * 1200), y);
    host += px[0] == 70 && px[1] == 130 && px[2] == 180;
    device += px[0] == 230 && px[1] == 120 && px[2] == 40;
  }
  EXPECT_GT(host, 50u);
  EXPECT_GT(device, 50u);
}

// Chunks whose optimizer payloads are on NVMe (engine.nvme_path): their cells on the host are the
// place "nvme", and their host Adam's nvme_read events put them on NVMe in the optimizer strip;
// both are drawn in the NVMe colour (140, 86, 75), named in the legend.
TEST_F(VisualizeTest, LocationFigureShowsChunksOnNvme) {
  Profile p = synthetic_profile(2);
  const size_t chunks = p.chunks.size();
  const auto on_nvme = [](int64_t c) { return c >= 7 && c <= 10; };
  for (size_t i = 0; i < p.location.size(); ++i)
    if (on_nvme(static_cast<int64_t>(i % chunks)) &&
        p.location[i] == static_cast<int8_t>(ChunkPlace::kHost))
      p.location[i] = static_cast<int8_t>(ChunkPlace::kNvme);
  int64_t reads = 0;
  for (size_t e = 0; e < p.events.kind.size(); ++e) {
    if (on_nvme(p.events.chunk[e]) &&
        p.events.kind[e] == static_cast<int8_t>(ChunkEventKind::kAdamHost)) {
      p.events.kind[e] = static_cast<int8_t>(ChunkEventKind::kNvmeRead);
      ++reads;
    }
  }
  ASSERT_GT(reads, 0);
  formats::write_profile(dir_.file("nvme.h5"), p);
  // The file keeps the new codes.
  const Profile back = formats::read_profile(dir_.file("nvme.h5"));
  EXPECT_EQ(back.location, p.location);
  const RunResult r = visualize({"nvme.h5", "--fig", "location", "-o", "nvme.png"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const Image img = decode_png(pstar::testing::read_bytes(dir_.file("nvme.png")));
  ASSERT_TRUE(img.error.empty()) << img.error;
  EXPECT_GT(count_colour(img, 140, 86, 75), 2000u) << "no NVMe cells in the map";
  size_t strip = 0;
  for (uint32_t y = 100; y < 600; ++y) {
    const uint8_t* px = img.at(static_cast<uint32_t>(0.67 * 1200), y);
    strip += px[0] == 140 && px[1] == 86 && px[2] == 75;
  }
  EXPECT_GT(strip, 50u) << "no NVMe rows in the optimizer strip";
}

// Hundreds of chunks stay one row each, labelled every few rows.
TEST_F(VisualizeTest, LocationFigureWithHundredsOfChunks) {
  Profile p = synthetic_profile(1);
  const size_t moments = p.by_moment.size(), chunks = 400, old_chunks = p.chunks.size();
  std::vector<int8_t> location;
  for (size_t i = 0; i < moments; ++i)
    for (size_t c = 0; c < chunks; ++c)
      location.push_back(p.location[i * old_chunks + c % old_chunks]);
  p.location = location;
  formats::ProfileChunks table;
  for (size_t c = 0; c < chunks; ++c) {
    table.id.push_back(static_cast<int64_t>(c));
    table.numel.push_back(1);
    table.capacity.push_back(1);
    table.group.push_back(0);
    table.owner.push_back(0);
    table.embedding.push_back(0);
    table.payloads.push_back("param+grad,master,exp_avg,exp_avg_sq");
  }
  p.chunks = table;
  p.run.num_chunks = static_cast<int64_t>(chunks);
  formats::write_profile(dir_.file("wide.h5"), p);
  const RunResult r = visualize({"wide.h5", "--fig", "access"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "wide-access.png\n") << r;
  expect_figure_png(dir_.file("wide-access.png"), "location");
  EXPECT_TRUE(contains(r.err, "400 chunks")) << r;
}

// ---- damaged profiles --------------------------------------------------------------------------

// Note [profile checksum]: a real profile (`pstar profile`, gpt-tiny) with one byte inverted at
// every 997th offset, one copy per offset: each copy is a format error naming it (exit 4), never a
// crash, a hang or a figure, because the checksum is checked before libhdf5 parses anything. Under
// the cpu-asan preset the same runs are checked by AddressSanitizer.
TEST_F(VisualizeTest, EveryDamagedCopyOfARealProfileIsAFormatErrorNeverACrash) {
  fs::create_directories(dir_.path() / "conf");
  pstar::testing::write_text(dir_.file("conf/corpus.txt"), pstar::testing::repetitive_corpus());
  pstar::testing::write_text(dir_.file("conf/train.json"), R"({
    "model": {"preset": "gpt-tiny", "seq_len": 32},
    "data": {"text": "corpus.txt"},
    "train_micro_batch_size_per_gpu": 2,
    "default_chunk_size": 20000,
    "bf16": {"enabled": false},
    "engine": {"mode": "chunked", "chunk_size_search": false, "device_memory": "2500KB",
               "host_memory": "1GB"}
  })");
  const RunResult made = run_pstar(
      {"profile", "conf/train.json", "-o", "real.h5", "--steps", "1", "--device", "cpu", "-q"},
      dir_.path());
  ASSERT_EQ(made.exit_code, 0) << made;
  const std::vector<uint8_t> good = pstar::testing::read_bytes(dir_.file("real.h5"));
  ASSERT_GT(good.size(), 10000u);
  // The good file plots.
  RunResult r = visualize({"real.h5", "--fig", "memory", "-o", "good.png"});
  ASSERT_EQ(r.exit_code, 0) << r;

  std::vector<size_t> offsets;
  for (size_t at = 0; at < good.size(); at += 997) offsets.push_back(at);
  offsets.push_back(good.size() - 1);
  fs::create_directories(dir_.path() / "flipped");
  // Two at a time (ctest gives this test one core, but each run mostly waits on start-up).
  constexpr size_t kParallel = 2;
  size_t refused = 0;
  for (size_t first = 0; first < offsets.size(); first += kParallel) {
    std::vector<std::pair<std::string, Spawned>> running;
    for (size_t k = first; k < std::min(offsets.size(), first + kParallel); ++k) {
      std::vector<uint8_t> bytes = good;
      bytes[offsets[k]] ^= 0xFF;
      const std::string name = "flipped/at-" + std::to_string(offsets[k]) + ".h5";
      pstar::testing::write_bytes(dir_.file(name), bytes);
      running.emplace_back(
          name,
          spawn_pstar({"visualize", name, "--fig", "location", "-o", name + ".png"}, dir_.path()));
    }
    for (auto& [name, child] : running) {
      const RunResult result = wait_pstar(child, 120);
      EXPECT_EQ(result.exit_code, 4) << name << "\n" << result;
      EXPECT_TRUE(contains(result.err, "format error: profile '" + name + "'")) << result;
      EXPECT_FALSE(contains(result.err, "AddressSanitizer")) << result;
      EXPECT_FALSE(fs::exists(dir_.file(name + ".png"))) << name;
      refused += result.exit_code == 4;
    }
  }
  std::printf(
      "[ flips    ] %zu of %zu damaged copies (%zu-byte profile, every 997th byte) refused "
      "with a format error\n",
      refused, offsets.size(), good.size());
  EXPECT_EQ(refused, offsets.size());
}

}  // namespace
}  // namespace pstar::cmd
