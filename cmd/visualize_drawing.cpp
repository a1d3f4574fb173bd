// `pstar visualize`'s drawing helpers over PLplot's C API: text, stage bands, step lines, stacked
// areas, axes, legends and the plot area, shared by every figure.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <plplot.h>
#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "visualize_parts.h"

namespace pstar::cmd::visualize_parts {
namespace {

// More step boundaries than this (one per ~20 points of plot width) would hide the data.
constexpr size_t kMaxStepLines = 40;

}  // namespace

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

LegendEntry box(std::string text, Colour colour) {
  return {LegendEntry::kBox, std::move(text), colour};
}
LegendEntry line(std::string text, Colour colour, PLINT style, PLFLT width) {
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

}  // namespace pstar::cmd::visualize_parts
