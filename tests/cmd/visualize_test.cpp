// `pstar visualize` end to end: every figure in every format from a synthetic profile written with
// formats::write_profile, checked down to the PNG's pixels, and the errors bad input gives. The
// defaults, the location figure's rows and damaged profiles are in visualize_location_test.cpp.
#include "visualize_fixture.h"

namespace pstar::cmd {
namespace {

using namespace pstar::cmd::visualize_testing;  // NOLINT(build/namespaces): the shared fixture

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

}  // namespace
}  // namespace pstar::cmd
