// `pstar visualize` end to end, continued (visualize_test.cpp has every figure in every format and
// bad input): the output's default place, the location figure's rows (payload kinds, NVMe, hundreds
// of chunks) and damaged profiles.
#include "visualize_fixture.h"

namespace pstar::cmd {
namespace {

using namespace pstar::cmd::visualize_testing;  // NOLINT(build/namespaces): the shared fixture

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

// Note [expert rows]: the chunks whose /chunks/tensors name a mixture of experts' experts are
// marked in the experts strip (x ~ 0.624..0.646 of the page) in (148, 103, 189), and only those;
// a profile without expert tensors, or without /chunks/tensors, has no strip.
TEST_F(VisualizeTest, LocationFigureMarksTheChunksThatHoldExperts) {
  Profile p = synthetic_profile(2);
  const size_t chunks = p.chunks.size();  // 12
  const auto holds_experts = [](size_t c) { return c >= 4 && c <= 7; };
  for (size_t c = 0; c < chunks; ++c) {
    const std::string layer = "model.layers." + std::to_string(c / 4);
    p.chunks.tensors.push_back(
        holds_experts(c) ? layer + ".mlp.experts." + std::to_string(c) + ".gate_proj.weight," +
                               layer + ".mlp.experts." + std::to_string(c) + ".up_proj.weight"
                         : layer + ".self_attn.q_proj.weight," + layer + ".mlp.gate.weight");
  }
  const auto purple_rows = [&](const std::string& file) {
    std::vector<bool> rows(chunks, false);
    const Image img = decode_png(pstar::testing::read_bytes(dir_.file(file)));
    EXPECT_TRUE(img.error.empty()) << img.error;
    if (!img.error.empty()) return rows;
    // Row c's middle: the heat map spans kBottom (0.12) to 0.835 of the page, bottom up.
    for (size_t c = 0; c < chunks; ++c) {
      const double y = 0.12 + (static_cast<double>(c) + 0.5) / static_cast<double>(chunks) * 0.715;
      const uint8_t* px =
          img.at(static_cast<uint32_t>(0.635 * 1200), static_cast<uint32_t>((1.0 - y) * 700));
      rows[c] = px[0] == 148 && px[1] == 103 && px[2] == 189;
    }
    return rows;
  };
  formats::write_profile(dir_.file("moe.h5"), p);
  RunResult r = visualize({"moe.h5", "--fig", "access", "-o", "moe.png"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::vector<bool> marked = purple_rows("moe.png");
  for (size_t c = 0; c < chunks; ++c) EXPECT_EQ(marked[c], holds_experts(c)) << "chunk " << c;

  for (const bool names : {true, false}) {
    SCOPED_TRACE(names ? "no expert tensors" : "no /chunks/tensors");
    Profile dense = p;
    for (std::string& t : dense.chunks.tensors) t = "model.layers.0.mlp.up_proj.weight";
    if (!names) dense.chunks.tensors.clear();
    formats::write_profile(dir_.file("dense.h5"), dense);
    r = visualize({"dense.h5", "--fig", "access", "-o", "dense.png"});
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_EQ(purple_rows("dense.png"), std::vector<bool>(chunks, false));
  }
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
