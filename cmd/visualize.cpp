// `pstar visualize PROFILE.h5 --fig memory|location|moves|timeline -o OUT.png|svg|pdf`: draws one
// figure of a profile file (docs/profile.md) with PLplot's C API through its cairo drivers.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <plplot.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/core/log.h"
#include "pstar/formats/file_guard.h"
#include "pstar/formats/profile.h"

namespace pstar::cmd {
namespace {

namespace fs = std::filesystem;
using formats::ChunkEventKind;
using formats::ChunkPlace;
using formats::Profile;
using formats::ProfileMemory;
using formats::ProfileStage;

constexpr double kMiB = 1024.0 * 1024.0;
// Pixels for PNG, points for SVG and PDF. The cairo drivers size text in points at 72 dpi in all
// three, so a figure looks the same in each format.
constexpr PLINT kWidth = 1200, kHeight = 700;
// The plot area in normalized page coordinates; the legend goes to its right. PLplot sizes the
// legend from its own font metrics, narrower than the TrueType text cairo draws, hence the room.
constexpr PLFLT kLeft = 0.085, kRight = 0.68, kBottom = 0.12, kTop = 0.91;
// Character heights relative to PLplot's default, whose text is large on a 1200x700 page.
constexpr PLFLT kTextScale = 0.9, kSmallText = 0.65, kLegendText = 0.85;
// More step boundaries than this (one per ~20 points of plot width) would hide the data.
constexpr size_t kMaxStepLines = 40;

// ---- PLplot session ----------------------------------------------------------------------------

// Colour map 0 indices. PLplot's default map is a black background with red axes, so every colour
// used is set here, entry 0 (the background) white.
enum Colour : PLINT {
  kBackground = 0,
  kInk,
  kGrid,
  kForwardBand,
  kBackwardBand,
  kOptimizerBand,
  kChunks,
  kNonModel,
  kTotal,
  kBudget,
  kStepLine,
  kAbsent,
  kOnHost,
  kOnDevice,
  kH2D,
  kD2H,
  kDeviceLine,
  kHostLine,
  kBothPlaces,
  kOnNvme,
  kColourCount,
};

void set_palette() {
  struct Entry {
    Colour index;
    PLINT r, g, b;
    PLFLT alpha;
  };
  static constexpr Entry kPalette[] = {
      {kBackground, 255, 255, 255, 1.0},
      {kInk, 34, 34, 34, 1.0},
      {kGrid, 225, 225, 225, 1.0},
      {kForwardBand, 222, 235, 250, 1.0},
      {kBackwardBand, 253, 232, 210, 1.0},
      {kOptimizerBand, 222, 242, 218, 1.0},
      {kChunks, 31, 119, 180, 0.75},
      {kNonModel, 255, 127, 14, 0.75},
      {kTotal, 20, 20, 20, 1.0},
      {kBudget, 214, 39, 40, 1.0},
      {kStepLine, 110, 110, 110, 1.0},
      {kAbsent, 238, 238, 238, 1.0},
      {kOnHost, 70, 130, 180, 1.0},
      {kOnDevice, 230, 120, 40, 1.0},
      {kH2D, 44, 160, 44, 1.0},
      {kD2H, 148, 103, 189, 1.0},
      {kDeviceLine, 31, 119, 180, 1.0},
      {kHostLine, 44, 160, 44, 1.0},
      {kBothPlaces, 150, 150, 205, 1.0},
      {kOnNvme, 140, 86, 75, 1.0},
  };
  plscmap0n(kColourCount);
  for (const Entry& e : kPalette) plscol0a(e.index, e.r, e.g, e.b, e.alpha);
}

// plabort() reports a call made in the wrong state, which would be a bug here: collected and
// raised as an InternalError once the plot is closed.
std::string& plplot_messages() {
  static std::string messages;
  return messages;
}
void on_plabort(PLCHAR_VECTOR message) {
  std::string& m = plplot_messages();
  m += (m.empty() ? "" : "; ") + std::string(message);
}

// plexit() (a fatal PLplot error) always ends the process after its handler returns; the handler
// only removes the half-written file and reports in pstar's form. run_visualize checks what it can
// beforehand (the output device exists, the output file can be opened) so this stays a last resort.
std::string& plexit_cleanup_path() {
  static std::string path;
  return path;
}
int on_plexit(PLCHAR_VECTOR message) {
  if (!plexit_cleanup_path().empty()) std::remove(plexit_cleanup_path().c_str());
  log::error(error_kind_name(ErrorKind::kInternal), ": PLplot: ", message);
  return error_exit_code(ErrorKind::kInternal);
}

bool plplot_has_device(const char* name) {
  constexpr int kMaxDevices = 128;
  std::vector<PLCHAR_VECTOR> menu(kMaxDevices), names(kMaxDevices);
  PLCHAR_VECTOR* menu_ptr = menu.data();
  PLCHAR_VECTOR* names_ptr = names.data();
  int count = kMaxDevices;
  plgDevs(&menu_ptr, &names_ptr, &count);
  for (int i = 0; i < count; ++i)
    if (names[i] != nullptr && std::strcmp(names[i], name) == 0) return true;
  return false;
}

// PLplot has one global stream: a session owns it from plinit() to plend().
class PlotSession {
 public:
  PlotSession(const char* device, const std::string& path) {
    plplot_messages().clear();
    plexit_cleanup_path() = path;
    plsabort(on_plabort);
    plsexit(on_plexit);
    plsdev(device);
    plsfnam(path.c_str());
    plspage(0, 0, kWidth, kHeight, 0, 0);
    set_palette();  // before plinit, or the page is cleared to the default black
    plinit();
    open_ = true;
    pladv(0);
    plschr(0, kTextScale);
    plsyax(7, 0);  // MiB as plain numbers up to 9,999,999 rather than "x10^4" labels
  }
  ~PlotSession() {
    if (open_) plend();
    plexit_cleanup_path().clear();
  }
  PlotSession(const PlotSession&) = delete;
  PlotSession& operator=(const PlotSession&) = delete;

  // Writes the file (the cairo drivers write on plend).
  void finish() {
    open_ = false;
    plend();
    plexit_cleanup_path().clear();
    PSTAR_CHECK(plplot_messages().empty(), InternalError, "PLplot: ", plplot_messages());
  }

 private:
  bool open_ = false;
};

// ---- output file -------------------------------------------------------------------------------

const char* output_device(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".png") return "pngcairo";
  if (ext == ".svg") return "svgcairo";
  if (ext == ".pdf") return "pdfcairo";
  PSTAR_THROW(
      ConfigError, "-o: '", path, "': ",
      ext.empty() ? std::string("no file extension") : "unknown output extension '" + ext + "'",
      "; use .png, .svg or .pdf");
}

// The figure is drawn into a temporary file next to the output and renamed over it once complete,
// so a failed run never leaves a truncated figure under the output's name.
class TempOutput {
 public:
  explicit TempOutput(std::string target) : temp_(std::move(target)) {
    // Opened here so an unwritable path is a clear I/O error; PLplot would exit the process.
    std::FILE* f = std::fopen(temp_.path().c_str(), "wb");
    PSTAR_CHECK(f != nullptr, IoError, "cannot write output file '", temp_.target(),
                "': ", std::strerror(errno));
    std::fclose(f);
  }

  const std::string& path() const { return temp_.path(); }

  void commit() {
    std::error_code ec;
    const auto size = fs::file_size(temp_.path(), ec);
    PSTAR_CHECK(!ec && size > 0, IoError, "writing output file '", temp_.target(),
                "' failed: PLplot wrote nothing", ec ? " (" + ec.message() + ")" : "");
    temp_.publish("figure");
  }

 private:
  formats::TempPath temp_;  // Note [publish by rename]
};

// ---- data --------------------------------------------------------------------------------------

// Plot coordinates index the profile's columns, so a profile that read_profile accepted but whose
// columns disagree must stop here with a FormatError, not read out of bounds.
void check_profile(const std::string& path, const Profile& p) {
  const size_t n = p.by_moment.size();
  PSTAR_CHECK(n > 0, ConfigError, "nothing to plot: the profile '", path,
              "' has no recorded moments; record more steps");
  auto rows = [&](const char* name, size_t size, size_t expected) {
    PSTAR_CHECK(size == expected, FormatError, path, ": ", name, " has ", size, " rows; expected ",
                expected);
  };
  auto memory = [&](const char* group, const ProfileMemory& m, bool by_moment) {
    const std::string g = std::string("/memory/") + group + "/";
    const size_t rows_expected = m.size();
    if (by_moment) {
      rows((g + "step").c_str(), m.step.size(), rows_expected);
      rows((g + "moment").c_str(), m.moment.size(), rows_expected);
    }
    rows((g + "stage").c_str(), m.stage.size(), rows_expected);
    rows((g + "device_total").c_str(), m.device_total.size(), rows_expected);
    rows((g + "device_chunks").c_str(), m.device_chunks.size(), rows_expected);
    rows((g + "device_non_model").c_str(), m.device_non_model.size(), rows_expected);
    rows((g + "host_total").c_str(), m.host_total.size(), rows_expected);
    rows((g + "host_chunks").c_str(), m.host_chunks.size(), rows_expected);
    rows((g + "host_non_model").c_str(), m.host_non_model.size(), rows_expected);
    for (const int8_t s : m.stage)
      PSTAR_CHECK(s >= 0 && s <= 2, FormatError, path, ": ", g, "stage has the value ",
                  static_cast<int>(s), "; expected 0 (forward), 1 (backward) or 2 (optimizer)");
  };
  memory("by_moment", p.by_moment, true);
  memory("by_time", p.by_time, false);
  rows("/location", p.location.size(), n * p.chunks.size());
  for (const int8_t v : p.location)
    PSTAR_CHECK(v >= 0 && v <= 3, FormatError, path, ": /location has the value ",
                static_cast<int>(v), "; expected 0 (absent), 1 (host), 2 (device) or 3 (nvme)");
  const auto& e = p.events;
  rows("/events/moment", e.moment.size(), e.size());
  rows("/events/kind", e.kind.size(), e.size());
  rows("/events/bytes", e.bytes.size(), e.size());
  for (const int64_t m : e.moment)
    PSTAR_CHECK(m >= -1 && m < static_cast<int64_t>(n), FormatError, path,
                ": /events/moment has the value ", m,
                "; expected -1 or a row of /memory/by_moment (", n, " rows)");
}

std::vector<double> mib(const std::vector<int64_t>& bytes) {
  std::vector<double> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<double>(bytes[i]) / kMiB;
  return out;
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

struct Tier {
  std::string name;                              // "device" | "host"
  std::vector<double> total, chunks, non_model;  // MiB
  int64_t budget = 0;                            // bytes; 0: none recorded
};

Tier tier_of(const Profile& p, const ProfileMemory& m, const std::string& name) {
  Tier t;
  t.name = name;
  const bool device = name == "device";
  t.total = mib(device ? m.device_total : m.host_total);
  t.chunks = mib(device ? m.device_chunks : m.host_chunks);
  t.non_model = mib(device ? m.device_non_model : m.host_non_model);
  t.budget = device ? p.run.device_budget : p.run.host_budget;
  return t;
}

// ---- drawing helpers ---------------------------------------------------------------------------

// '#' starts a PLplot text escape; a literal one is written "##".
std::string plain(const std::string& text) {
  std::string out;
  for (const char c : text) out += c == '#' ? std::string("##") : std::string(1, c);
  return out;
}

std::string mib_text(double mib_value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", mib_value);
  return buf;
}

// "gpt-mini, bf16, 3 steps": what the profile was of, for titles.
std::string run_summary(const Profile& p) {
  std::string model;
  try {
    const auto config = nlohmann::json::parse(p.run.config_json);
    if (config.contains("model") && config["model"].contains("preset") &&
        config["model"]["preset"].is_string())
      model = config["model"]["preset"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
    // The title loses the model name; nothing else depends on the config.
  }
  std::string text = model;
  if (!p.run.precision.empty()) text += (text.empty() ? "" : ", ") + p.run.precision;
  const int64_t steps = p.steps.size() ? static_cast<int64_t>(p.steps.size()) : p.run.steps;
  if (steps > 0) text += str_cat(text.empty() ? "" : ", ", steps, steps == 1 ? " step" : " steps");
  if (p.run.world_size > 1) text += str_cat(", rank ", p.run.rank, " of ", p.run.world_size);
  return plain(text);
}

Colour band_colour(ProfileStage stage) {
  switch (stage) {
    case ProfileStage::kForward:
      return kForwardBand;
    case ProfileStage::kBackward:
      return kBackwardBand;
    case ProfileStage::kOptimizer:
      return kOptimizerBand;
  }
  return kForwardBand;
}

const char* stage_letter(ProfileStage stage) {
  switch (stage) {
    case ProfileStage::kForward:
      return "F";
    case ProfileStage::kBackward:
      return "B";
    case ProfileStage::kOptimizer:
      return "O";
  }
  return "";
}

void fill_rect(double x0, double x1, double y0, double y1) {
  PLFLT x[4] = {x0, x1, x1, x0}, y[4] = {y0, y0, y1, y1};
  plfill(4, x, y);
}

void vline(double x, double y0, double y1) {
  PLFLT xs[2] = {x, x}, ys[2] = {y0, y1};
  plline(2, xs, ys);
}

void hline(double y, double x0, double x1) {
  PLFLT xs[2] = {x0, x1}, ys[2] = {y, y};
  plline(2, xs, ys);
}

struct Band {
  double x0, x1;
  ProfileStage stage;
};

// Runs of one stage. Row i spans [edges[i], edges[i + 1]); edges has one entry more than stage.
std::vector<Band> stage_bands(const std::vector<int8_t>& stage, const std::vector<double>& edges) {
  std::vector<Band> bands;
  for (size_t i = 0; i < stage.size(); ++i) {
    const auto s = static_cast<ProfileStage>(stage[i]);
    if (!bands.empty() && bands.back().stage == s)
      bands.back().x1 = edges[i + 1];
    else
      bands.push_back({edges[i], edges[i + 1], s});
  }
  return bands;
}

void draw_bands(const std::vector<Band>& bands, double y0, double y1) {
  for (const Band& b : bands) {
    plcol0(band_colour(b.stage));
    fill_rect(b.x0, b.x1, y0, y1);
  }
}

struct StepStart {
  double x;
  int64_t step;
};

// Where each recorded step begins, at by_moment row i's x (x_of_row(i)).
template <typename XOfRow>
std::vector<StepStart> step_starts(const ProfileMemory& by_moment, XOfRow x_of_row) {
  std::vector<StepStart> starts;
  for (size_t i = 0; i < by_moment.size(); ++i)
    if (i == 0 || by_moment.step[i] != by_moment.step[i - 1])
      starts.push_back({x_of_row(i), by_moment.step[i]});
  return starts;
}

bool show_steps(const std::vector<StepStart>& starts) { return starts.size() <= kMaxStepLines; }

// Dashed lines at step boundaries and "step N" at the top left of steps (at most ten labels), when
// there are few enough steps to see the data between the lines.
void draw_steps(const std::vector<StepStart>& starts, double y0, double y1) {
  if (!show_steps(starts)) return;
  plcol0(kStepLine);
  pllsty(2);
  plwidth(1.0);
  for (size_t i = 1; i < starts.size(); ++i) vline(starts[i].x, y0, y1);
  pllsty(1);
  const size_t every = std::max<size_t>(1, (starts.size() + 9) / 10);
  plschr(0, kSmallText);
  PLFLT xmin, xmax, ymin, ymax;
  plgvpw(&xmin, &xmax, &ymin, &ymax);
  const double pad = (xmax - xmin) * 0.004;
  for (size_t i = 0; i < starts.size(); i += every)
    plptex(starts[i].x + pad, y1 - (y1 - y0) * 0.035, 1, 0, 0,
           str_cat("step ", starts[i].step).c_str());
  plschr(0, kTextScale);
}

// Closed polygon between two step functions (row i spans [i, i+1)): the stacked areas.
void fill_between(const std::vector<double>& lower, const std::vector<double>& upper) {
  const size_t n = upper.size();
  std::vector<PLFLT> x, y;
  x.reserve(4 * n);
  y.reserve(4 * n);
  for (size_t i = 0; i < n; ++i) {
    x.insert(x.end(), {static_cast<double>(i), static_cast<double>(i + 1)});
    y.insert(y.end(), {upper[i], upper[i]});
  }
  for (size_t i = n; i-- > 0;) {
    x.insert(x.end(), {static_cast<double>(i + 1), static_cast<double>(i)});
    y.insert(y.end(), {lower[i], lower[i]});
  }
  plfill(static_cast<PLINT>(x.size()), x.data(), y.data());
}

void stairs(const std::vector<double>& v) {
  std::vector<PLFLT> x, y;
  for (size_t i = 0; i < v.size(); ++i) {
    x.insert(x.end(), {static_cast<double>(i), static_cast<double>(i + 1)});
    y.insert(y.end(), {v[i], v[i]});
  }
  plline(static_cast<PLINT>(x.size()), x.data(), y.data());
}

void draw_axes(const char* x_label, const char* y_label, const std::string& title) {
  plcol0(kInk);
  plwidth(1.0);
  plbox("bcnst", 0, 0, "bcnstv", 0, 0);
  pllab(x_label, y_label, title.c_str());
}

void draw_grid() {
  plcol0(kGrid);
  plwidth(1.0);
  plbox("g", 0, 0, "g", 0, 0);
}

struct LegendEntry {
  enum Kind { kBox, kLine, kText } kind;
  std::string text;
  Colour colour = kInk;
  PLINT line_style = 1;
  PLFLT line_width = 2.0;
};

LegendEntry box(std::string text, Colour colour) {
  return {LegendEntry::kBox, std::move(text), colour};
}
LegendEntry line(std::string text, Colour colour, PLINT style = 1, PLFLT width = 2.0) {
  return {LegendEntry::kLine, std::move(text), colour, style, width};
}
std::vector<LegendEntry> stage_legend() {
  return {box("forward", kForwardBand), box("backward", kBackwardBand),
          box("optimizer", kOptimizerBand)};
}

// One column to the right of the plot area, centred vertically. (PLplot's RIGHT|TOP|OUTSIDE is the
// corner above and to the right, off the page here.)
void draw_legend(const std::vector<LegendEntry>& entries) {
  const size_t n = entries.size();
  std::vector<PLINT> opts(n), text_colours(n, kInk), box_colours(n), box_patterns(n, 0),
      line_colours(n), line_styles(n);
  std::vector<PLFLT> box_scales(n, 0.9), box_widths(n, 1.0), line_widths(n);
  std::vector<const char*> texts(n);
  for (size_t i = 0; i < n; ++i) {
    const LegendEntry& e = entries[i];
    switch (e.kind) {
      case LegendEntry::kBox:
        opts[i] = PL_LEGEND_COLOR_BOX;
        break;
      case LegendEntry::kLine:
        opts[i] = PL_LEGEND_LINE;
        break;
      case LegendEntry::kText:
        opts[i] = PL_LEGEND_NONE;
        break;
    }
    texts[i] = e.text.c_str();
    box_colours[i] = e.colour;
    line_colours[i] = e.colour;
    line_styles[i] = e.line_style;
    line_widths[i] = e.line_width;
  }
  PLFLT width = 0, height = 0;
  plschr(0, kLegendText);
  pllegend(&width, &height, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
           PL_POSITION_RIGHT | PL_POSITION_OUTSIDE | PL_POSITION_VIEWPORT, 0.015, 0.0, 0.04,
           kBackground, kInk, 1, 0, 0, static_cast<PLINT>(n), opts.data(), 0.8, 0.75, 2.0, 0.0,
           text_colours.data(), texts.data(), box_colours.data(), box_patterns.data(),
           box_scales.data(), box_widths.data(), line_colours.data(), line_styles.data(),
           line_widths.data(), nullptr, nullptr, nullptr, nullptr);
  plschr(0, kTextScale);
}

// Budget line: drawn when it is within 3x the data's peak, otherwise only named in the legend,
// so a roomy host budget does not flatten the curves into the bottom of the plot.
bool budget_on_scale(int64_t budget_bytes, double peak_mib) {
  return budget_bytes > 0 && static_cast<double>(budget_bytes) / kMiB <= 3.0 * peak_mib;
}

LegendEntry budget_entry(const std::string& tier, int64_t budget_bytes, bool on_scale,
                         Colour colour) {
  const std::string text = tier + " budget " + format_bytes(budget_bytes);
  if (on_scale) return line(text, colour, 2, 2.0);
  return {LegendEntry::kText, text + ", off scale", kInk};
}

double y_top(double peak) { return peak > 0 ? peak * 1.12 : 1.0; }

void set_plot_area(double x0, double x1, double y0, double y1) {
  plvpor(kLeft, kRight, kBottom, kTop);
  plwind(x0, x1, y0, y1);
}

std::vector<double> row_edges(size_t n) {
  std::vector<double> edges(n + 1);
  for (size_t i = 0; i <= n; ++i) edges[i] = static_cast<double>(i);
  return edges;
}

// ---- figures -----------------------------------------------------------------------------------

void memory_figure(const Profile& p, const std::string& tier_name) {
  const ProfileMemory& m = p.by_moment;
  const size_t n = m.size();
  const Tier t = tier_of(p, m, tier_name);
  std::vector<double> stacked(n), zero(n, 0.0);
  for (size_t i = 0; i < n; ++i) stacked[i] = t.chunks[i] + t.non_model[i];
  const double peak = std::max(max_of(t.total), max_of(stacked));
  const bool budget_shown = budget_on_scale(t.budget, peak);
  const double budget_mib = static_cast<double>(t.budget) / kMiB;
  const double top = y_top(std::max(peak, budget_shown ? budget_mib : 0.0));
  const double right = static_cast<double>(n);
  set_plot_area(0, right, 0, top);

  draw_bands(stage_bands(m.stage, row_edges(n)), 0, top);
  draw_grid();
  plcol0(kChunks);
  fill_between(zero, t.chunks);
  plcol0(kNonModel);
  fill_between(t.chunks, stacked);
  plcol0(kTotal);
  plwidth(1.5);
  stairs(t.total);
  if (budget_shown) {
    plcol0(kBudget);
    plwidth(2.0);
    pllsty(2);
    hline(budget_mib, 0, right);
    pllsty(1);
  }
  const auto starts = step_starts(m, [](size_t i) { return static_cast<double>(i); });
  draw_steps(starts, 0, top);
  draw_axes("moment (row of /memory/by_moment, all recorded steps)",
            (t.name + " memory (MiB)").c_str(), t.name + " memory by moment: " + run_summary(p));

  std::vector<LegendEntry> legend = stage_legend();
  legend.push_back(box("chunks (model data)", kChunks));
  legend.push_back(box("non-model (activations)", kNonModel));
  legend.push_back(line("total, peak " + mib_text(max_of(t.total)), kTotal, 1, 1.5));
  if (t.budget > 0) legend.push_back(budget_entry(t.name, t.budget, budget_shown, kBudget));
  if (show_steps(starts)) legend.push_back(line("step boundary", kStepLine, 2, 1.0));
  draw_legend(legend);
}

// Note [location rows]
// Each row of the location figure is one chunk, and it holds every kind of payload (pstar keeps a
// chunk's parameters, gradients and Adam state together, where PatrickStar keeps one chunk list
// per kind: fp16 param, fp32 param, momentum, variance). The compute payloads (param+grad, or
// param and grad) are what moves between the tiers, and what /location records, so they fill the
// heat map. The optimizer payloads (master, exp_avg, exp_avg_sq: PatrickStar's fp32 param,
// momentum and variance) do not move during training; they sit where the chunk's Adam runs, which
// the adam_device and adam_host events record per step. A narrow strip to the right of the heat
// map shows that place per chunk, so each row says where both groups of its payloads are.

// A chunk's payloads split into the compute and the optimizer group (/chunks/payloads, e.g.
// "param+grad,master,exp_avg,exp_avg_sq"), each as legend text with its dtype.
struct RowPayloads {
  std::string compute, optimizer;
  std::string patrickstar;  // the optimizer kinds under PatrickStar's names
  bool operator==(const RowPayloads& o) const {
    return compute == o.compute && optimizer == o.optimizer;
  }
};

RowPayloads row_payloads(const std::string& payloads, const std::string& precision) {
  std::vector<std::string> compute, optimizer;
  size_t start = 0;
  while (start <= payloads.size()) {
    const size_t end = std::min(payloads.find(',', start), payloads.size());
    const std::string kind = payloads.substr(start, end - start);
    if (!kind.empty())
      (kind.rfind("param", 0) == 0 || kind == "grad" ? compute : optimizer).push_back(kind);
    start = end + 1;
  }
  const auto join = [](const std::vector<std::string>& kinds) {
    std::string text;
    for (const auto& k : kinds) text += (text.empty() ? "" : ", ") + k;
    return text;
  };
  RowPayloads r;
  // The param is in the run's precision; a separate grad and the optimizer state are fp32.
  const std::string param_dtype = precision.empty() ? "compute dtype" : precision;
  r.compute = compute.empty() ? "none recorded" : join(compute) + " (" + param_dtype + ")";
  r.optimizer = optimizer.empty() ? std::string() : join(optimizer) + " (fp32)";
  std::vector<std::string> names;
  for (const auto& k : optimizer) {
    if (k == "master") names.push_back("fp32 param");
    if (k == "exp_avg") names.push_back("momentum");
    if (k == "exp_avg_sq") names.push_back("variance");
  }
  r.patrickstar = join(names);
  return r;
}

// `words` in lines of at most `width` characters, broken at spaces (a longer word stays whole).
std::vector<std::string> wrap(const std::string& words, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  size_t start = 0;
  while (start < words.size()) {
    size_t end = words.find(' ', start);
    if (end == std::string::npos) end = words.size();
    const std::string word = words.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

// Where a chunk's optimizer payloads are, from where its Adam ran in the recorded steps (on the
// host with them read from NVMe: kNvme).
enum class OptimizerPlace { kNone, kHost, kDevice, kBoth, kNvme };

std::vector<OptimizerPlace> optimizer_places(const Profile& p) {
  std::map<int64_t, size_t> row_of;
  for (size_t c = 0; c < p.chunks.size(); ++c) row_of.emplace(p.chunks.id[c], c);
  std::vector<OptimizerPlace> places(p.chunks.size(), OptimizerPlace::kNone);
  const auto& e = p.events;
  for (size_t k = 0; k < e.size(); ++k) {
    const auto kind = static_cast<ChunkEventKind>(e.kind[k]);
    auto it = row_of.find(e.chunk[k]);
    if (it == row_of.end()) continue;
    OptimizerPlace& place = places[it->second];
    if (kind == ChunkEventKind::kNvmeRead) place = OptimizerPlace::kNvme;
    if (place == OptimizerPlace::kNvme) continue;  // its host Adam's events say no more
    if (kind != ChunkEventKind::kAdamDevice && kind != ChunkEventKind::kAdamHost) continue;
    const OptimizerPlace here =
        kind == ChunkEventKind::kAdamDevice ? OptimizerPlace::kDevice : OptimizerPlace::kHost;
    place = place == OptimizerPlace::kNone || place == here ? here : OptimizerPlace::kBoth;
  }
  return places;
}

void location_figure(const Profile& p) {
  const ProfileMemory& m = p.by_moment;
  const size_t n = m.size(), chunks = p.chunks.size();
  const double right = static_cast<double>(n);
  const double heat_top = kTop - 0.075;  // the stage strip sits above the heat map
  // The optimizer strip (Note [location rows]) sits right of the heat map, inside kRight.
  const double strip_left = kRight - 0.022, heat_right = strip_left - 0.012;
  const double heat_ymax = std::max<double>(1.0, static_cast<double>(chunks));
  plvpor(kLeft, heat_right, kBottom, heat_top);
  plwind(0, right, 0, heat_ymax);

  // Runs of one place along each chunk's row, one rectangle each: far fewer than cells.
  bool map_nvme = false;
  for (size_t c = 0; c < chunks; ++c) {
    size_t i = 0;
    while (i < n) {
      const int8_t place = p.location[i * chunks + c];
      size_t j = i + 1;
      while (j < n && p.location[j * chunks + c] == place) ++j;
      switch (static_cast<ChunkPlace>(place)) {
        case ChunkPlace::kAbsent:
          plcol0(kAbsent);
          break;
        case ChunkPlace::kHost:
          plcol0(kOnHost);
          break;
        case ChunkPlace::kDevice:
          plcol0(kOnDevice);
          break;
        case ChunkPlace::kNvme:
          plcol0(kOnNvme);
          map_nvme = true;
          break;
      }
      fill_rect(static_cast<double>(i), static_cast<double>(j), static_cast<double>(c),
                static_cast<double>(c + 1));
      i = j;
    }
  }
  const auto starts = step_starts(m, [](size_t i) { return static_cast<double>(i); });
  const bool steps_shown = show_steps(starts);
  plcol0(kInk);
  plwidth(1.5);
  if (steps_shown)
    for (size_t i = 1; i < starts.size(); ++i) vline(starts[i].x, 0, heat_ymax);
  plwidth(1.0);
  plbox("bcnst", 0, 0, "bcst", 0, 0);
  // Chunk ids beside their rows' middles (every k-th past 24 rows) rather than at row edges.
  const size_t every = std::max<size_t>(1, (chunks + 23) / 24);
  plschr(0, chunks > 12 ? kSmallText : kTextScale);
  for (size_t c = 0; c < chunks; c += every)
    plmtex("lv", 0.6, (static_cast<double>(c) + 0.5) / heat_ymax, 1.0,
           std::to_string(p.chunks.id[c]).c_str());
  plschr(0, kTextScale);

  // What the rows hold: one description when every chunk has the same payloads (pstar's engine
  // gives every chunk the same), else the first chunk's with a pointer to the table.
  RowPayloads kinds = chunks > 0 ? row_payloads(p.chunks.payloads[0], p.run.precision)
                                 : RowPayloads{"none", "", ""};
  bool uniform = true;
  for (size_t c = 1; c < chunks && uniform; ++c)
    uniform = row_payloads(p.chunks.payloads[c], p.run.precision) == kinds;
  pllab("moment (row of /memory/by_moment, all recorded steps)",
        plain("chunk: " + kinds.compute).c_str(), "");

  // The optimizer strip.
  const std::vector<OptimizerPlace> opt = optimizer_places(p);
  bool opt_none = false, opt_both = false, opt_nvme = false;
  plvpor(strip_left, kRight, kBottom, heat_top);
  plwind(0, 1, 0, heat_ymax);
  for (size_t c = 0; c < chunks; ++c) {
    switch (opt[c]) {
      case OptimizerPlace::kNone:
        plcol0(kAbsent);
        opt_none = true;
        break;
      case OptimizerPlace::kHost:
        plcol0(kOnHost);
        break;
      case OptimizerPlace::kDevice:
        plcol0(kOnDevice);
        break;
      case OptimizerPlace::kBoth:
        plcol0(kBothPlaces);
        opt_both = true;
        break;
      case OptimizerPlace::kNvme:
        plcol0(kOnNvme);
        opt_nvme = true;
        break;
    }
    fill_rect(0, 1, static_cast<double>(c), static_cast<double>(c + 1));
  }
  plcol0(kInk);
  plbox("bc", 0, 0, "bc", 0, 0);
  plschr(0, kSmallText);
  plmtex("b", 1.2, 0.5, 0.5, "optim.");
  plschr(0, kTextScale);

  // The legend, in short lines (the column right of the plot is narrow): what each row's two
  // parts show and the places' colours.
  std::vector<LegendEntry> legend;
  const auto text = [&](const std::string& words) {
    for (const std::string& l : wrap(words, 25)) legend.push_back({LegendEntry::kText, plain(l)});
  };
  text("map: where each chunk's " + kinds.compute + " is");
  legend.push_back(box("absent", kAbsent));
  legend.push_back(box("on the host", kOnHost));
  legend.push_back(box("on the device", kOnDevice));
  if (map_nvme) legend.push_back(box("on the host, optim. on NVMe", kOnNvme));
  if (!kinds.optimizer.empty()) {
    text("optim.: where its " + kinds.optimizer + " are (where its Adam ran)" +
         (kinds.patrickstar.empty() ? "" : "; PatrickStar's " + kinds.patrickstar));
    if (opt_both) legend.push_back(box("host or device, by step", kBothPlaces));
    if (opt_nvme && !map_nvme) legend.push_back(box("on NVMe", kOnNvme));
    if (opt_none) legend.push_back(box("no Adam recorded", kAbsent));
  }
  if (!uniform) text("(payloads vary by chunk: see /chunks/payloads)");
  for (const LegendEntry& e : stage_legend()) legend.push_back(e);
  if (steps_shown) legend.push_back(line("step boundary", kInk, 1, 1.5));
  // Placed against the whole plot area, map and strip, as in the other figures.
  plvpor(kLeft, kRight, kBottom, heat_top);
  draw_legend(legend);

  // The stage strip: each stage run shaded, lettered where it is wide enough to read.
  plvpor(kLeft, heat_right, heat_top + 0.015, kTop);
  plwind(0, right, 0, 1);
  const auto bands = stage_bands(m.stage, row_edges(n));
  draw_bands(bands, 0, 1);
  plcol0(kInk);
  plschr(0, kSmallText);
  for (const Band& b : bands)
    if (b.x1 - b.x0 >= right / 60) plptex((b.x0 + b.x1) / 2, 0.3, 1, 0, 0.5, stage_letter(b.stage));
  plmtex("lv", 0.6, 0.5, 1.0, "stage");
  plwidth(1.5);
  if (steps_shown)
    for (size_t i = 1; i < starts.size(); ++i) vline(starts[i].x, 0, 1);
  plwidth(1.0);
  plbox("bc", 0, 0, "bc", 0, 0);
  plschr(0, kTextScale);
  plmtex("t", 1.2, 0.5, 0.5, ("chunk location by moment: " + run_summary(p)).c_str());
}

void moves_figure(const Profile& p) {
  const ProfileMemory& m = p.by_moment;
  const size_t n = m.size();
  const auto& e = p.events;
  std::vector<double> h2d(n, 0.0), d2h(n, 0.0);
  double h2d_total = 0, d2h_total = 0, h2d_outside = 0, d2h_outside = 0;
  for (size_t k = 0; k < e.size(); ++k) {
    const auto kind = static_cast<ChunkEventKind>(e.kind[k]);
    if (kind != ChunkEventKind::kMoveH2D && kind != ChunkEventKind::kMoveD2H) continue;
    const double moved = static_cast<double>(e.bytes[k]) / kMiB;
    const bool to_device = kind == ChunkEventKind::kMoveH2D;
    (to_device ? h2d_total : d2h_total) += moved;
    if (e.moment[k] < 0)
      (to_device ? h2d_outside : d2h_outside) += moved;
    else
      (to_device ? h2d : d2h)[static_cast<size_t>(e.moment[k])] += moved;
  }
  const double right = static_cast<double>(n);
  const double top = y_top(std::max(max_of(h2d), max_of(d2h)));
  set_plot_area(0, right, 0, top);

  draw_bands(stage_bands(m.stage, row_edges(n)), 0, top);
  draw_grid();
  // Two bars per moment, side by side: h2d on the left half, d2h on the right.
  for (size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(i);
    if (h2d[i] > 0) {
      plcol0(kH2D);
      fill_rect(x + 0.05, x + 0.5, 0, h2d[i]);
    }
    if (d2h[i] > 0) {
      plcol0(kD2H);
      fill_rect(x + 0.5, x + 0.95, 0, d2h[i]);
    }
  }
  const auto starts = step_starts(m, [](size_t i) { return static_cast<double>(i); });
  draw_steps(starts, 0, top);
  draw_axes("moment (row of /memory/by_moment, all recorded steps)", "moved (MiB)",
            "chunk moves per moment: " + run_summary(p));
  if (h2d_outside > 0 || d2h_outside > 0) {
    plschr(0, kSmallText);
    plmtex("t", 0.6, 1.0, 1.0,
           ("outside moments (not shown): h2d " + mib_text(h2d_outside) + ", d2h " +
            mib_text(d2h_outside))
               .c_str());
    plschr(0, kTextScale);
  }

  std::vector<LegendEntry> legend = stage_legend();
  legend.push_back(box("h2d (to device), " + mib_text(h2d_total), kH2D));
  legend.push_back(box("d2h (to host), " + mib_text(d2h_total), kD2H));
  if (show_steps(starts)) legend.push_back(line("step boundary", kStepLine, 2, 1.0));
  draw_legend(legend);
}

void timeline_figure(const Profile& p, const std::string& tier_name) {
  // by_time is the clock-sampled series; a profile without it still has a time per moment.
  const bool sampled = p.by_time.size() > 0;
  const ProfileMemory& m = sampled ? p.by_time : p.by_moment;
  const size_t n = m.size();
  const std::vector<double>& x = m.time_s;
  const double left = x.front(), right = std::max(x.back(), left + 1e-6);

  struct Series {
    std::vector<double> y;
    Colour colour;
    std::string label;
  };
  std::vector<Series> series;
  std::vector<std::pair<Tier, Colour>> budget_tiers;
  double peak = 0, budget_top = 0;
  if (tier_name.empty()) {
    Tier device = tier_of(p, m, "device"), host = tier_of(p, m, "host");
    series.push_back({device.total, kDeviceLine, "device total"});
    series.push_back({host.total, kHostLine, "host total"});
    budget_tiers = {{device, kDeviceLine}, {host, kHostLine}};
  } else {
    Tier t = tier_of(p, m, tier_name);
    series.push_back({t.total, kTotal, "total"});
    series.push_back({t.chunks, kChunks, "chunks"});
    series.push_back({t.non_model, kNonModel, "non-model"});
    budget_tiers = {{t, kBudget}};
  }
  for (Series& s : series) {
    peak = std::max(peak, max_of(s.y));
    s.label += ", peak " + mib_text(max_of(s.y));
  }
  for (const auto& [t, colour] : budget_tiers)
    if (budget_on_scale(t.budget, peak))
      budget_top = std::max(budget_top, static_cast<double>(t.budget) / kMiB);
  const double top = y_top(std::max(peak, budget_top));
  set_plot_area(left, right, 0, top);

  std::vector<double> edges(x);
  edges.push_back(x.back());
  draw_bands(stage_bands(m.stage, edges), 0, top);
  draw_grid();
  for (const Series& s : series) {
    plcol0(s.colour);
    plwidth(2.0);
    plline(static_cast<PLINT>(n), x.data(), s.y.data());
  }
  for (const auto& [t, colour] : budget_tiers) {
    if (!budget_on_scale(t.budget, peak)) continue;
    plcol0(colour);
    plwidth(2.0);
    pllsty(2);
    hline(static_cast<double>(t.budget) / kMiB, left, right);
    pllsty(1);
  }
  const ProfileMemory& bm = p.by_moment;
  const auto starts = step_starts(bm, [&](size_t i) { return bm.time_s[i]; });
  draw_steps(starts, 0, top);
  draw_axes("time since the first recorded step (s)",
            tier_name.empty() ? "memory (MiB)" : (tier_name + " memory (MiB)").c_str(),
            std::string(sampled ? "memory over time: " : "memory over time (per moment): ") +
                run_summary(p));

  std::vector<LegendEntry> legend = stage_legend();
  for (const Series& s : series) legend.push_back(line(s.label, s.colour));
  for (const auto& [t, colour] : budget_tiers)
    if (t.budget > 0)
      legend.push_back(budget_entry(t.name, t.budget, budget_on_scale(t.budget, peak), colour));
  if (show_steps(starts)) legend.push_back(line("step boundary", kStepLine, 2, 1.0));
  draw_legend(legend);
}

}  // namespace

void register_visualize(CLI::App& app) {
  auto o = std::make_shared<VisualizeCommandOptions>();
  CLI::App* sub = app.add_subcommand(
      "visualize", "Draw a figure of a profile file as PNG, SVG or PDF (see docs/cli.md)");
  sub->add_option("profile", o->profile_path,
                  "Profile file (HDF5) written by pstar profile or pstar train --profile")
      ->required();
  sub->add_option("--fig", o->figure,
                  "memory: one tier's memory by moment; location (or access, PatrickStar's "
                  "name): where each chunk's payloads are at each moment; moves: bytes moved per "
                  "moment; timeline: memory over wall time")
      ->required()
      ->check(CLI::IsMember({"memory", "location", "access", "moves", "timeline"}));
  sub->add_option("--tier", o->tier,
                  "Memory tier for --fig memory (default device) and timeline (default: both "
                  "tiers' totals)")
      ->check(CLI::IsMember({"device", "host"}));
  sub->add_option("-o,--output", o->output_path,
                  "Output file; .png (1200x700 pixels), .svg or .pdf chooses the format. "
                  "Default: PROFILE-stem-FIG.png beside the profile (run.h5 -> run-memory.png)");
  sub->callback([o] { run_visualize(*o); });
}

std::string visualize_default_output(const VisualizeCommandOptions& o) {
  const fs::path profile(o.profile_path);
  return (profile.parent_path() / (profile.stem().string() + "-" + o.figure + ".png")).string();
}

int run_visualize(const VisualizeCommandOptions& options) {
  VisualizeCommandOptions o = options;
  if (o.output_path.empty()) o.output_path = visualize_default_output(o);
  // PatrickStar calls the chunk-location figure "access"; the default file name keeps the name
  // the user gave.
  const std::string figure = o.figure == "access" ? "location" : o.figure;
  // Cheap checks first, so a typo in -o does not wait for the profile to load.
  {
    std::error_code ec;
    PSTAR_CHECK(!fs::equivalent(o.output_path, o.profile_path, ec), ConfigError, "-o ",
                o.output_path, ": that is the profile itself; give another output file");
  }
  const char* device = output_device(o.output_path);
  if (!o.tier.empty() && (figure == "location" || figure == "moves"))
    log::warn("--tier ", o.tier, " has no effect on --fig ", o.figure);
  const Profile profile = formats::read_profile(o.profile_path);
  if (!profile.checksummed) {
    log::warn("profile '", o.profile_path,
              "' has no checksum header (an older pstar wrote it, before profiles had one): read "
              "unchecked, so damage in it may go unnoticed (docs/profile.md#the-checksum-header)");
  }
  check_profile(o.profile_path, profile);
  PSTAR_CHECK(plplot_has_device(device), IoError, "PLplot has no '", device,
              "' output device; install plplot-driver-cairo (scripts/setup-deps.sh)");

  TempOutput out(o.output_path);
  PlotSession session(device, out.path());
  if (figure == "memory")
    memory_figure(profile, o.tier.empty() ? "device" : o.tier);
  else if (figure == "location")
    location_figure(profile);
  else if (figure == "moves")
    moves_figure(profile);
  else if (figure == "timeline")
    timeline_figure(profile, o.tier);
  else
    PSTAR_INTERNAL_ASSERT(false, "unknown figure '", o.figure, "' passed the CLI check");
  session.finish();
  out.commit();
  log::info("wrote ", o.output_path, " (", figure, ", ", profile.by_moment.size(), " moments, ",
            profile.chunks.size(), " chunks)");
  // The result, for scripts: the file written.
  std::printf("%s\n", o.output_path.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace pstar::cmd
