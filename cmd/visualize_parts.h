// `pstar visualize`'s parts shared between its files (private to cmd/): the PLplot session
// (visualize_plot.cpp), the profile's columns checked and turned into plot data
// (visualize_data.cpp), the drawing helpers (visualize_drawing.cpp) and the figures
// (visualize_memory_figures.cpp: memory and timeline; visualize_location_figure.cpp;
// visualize_moves_figure.cpp). visualize.cpp is the command itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <plplot.h>

#include "pstar/formats/profile.h"

namespace pstar::cmd::visualize_parts {

using formats::ChunkEventKind;
using formats::ChunkPlace;
using formats::Profile;
using formats::ProfileMemory;
using formats::ProfileStage;

constexpr double kMiB = 1024.0 * 1024.0;
// The plot area in normalized page coordinates; the legend goes to its right. PLplot sizes the
// legend from its own font metrics, narrower than the TrueType text cairo draws, hence the room.
constexpr PLFLT kLeft = 0.085, kRight = 0.68, kBottom = 0.12, kTop = 0.91;
// Character heights relative to PLplot's default, whose text is large on a 1200x700 page.
constexpr PLFLT kTextScale = 0.9, kSmallText = 0.65, kLegendText = 0.85;

// ---- PLplot session (visualize_plot.cpp) --------------------------------------------------------

// Colour map 0 indices. PLplot's default map is a black background with red axes, so every colour
// used is set (visualize_plot.cpp's palette), entry 0 (the background) white.
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
  kExperts,
  kColourCount,
};

bool plplot_has_device(const char* name);

// PLplot has one global stream: a session owns it from plinit() to plend().
class PlotSession {
 public:
  PlotSession(const char* device, const std::string& path);
  ~PlotSession();
  PlotSession(const PlotSession&) = delete;
  PlotSession& operator=(const PlotSession&) = delete;

  void finish();

 private:
  bool open_ = false;
};

// ---- data (visualize_data.cpp) ------------------------------------------------------------------

void check_profile(const std::string& path, const Profile& p);

std::vector<double> mib(const std::vector<int64_t>& bytes);

double max_of(const std::vector<double>& v);

struct Tier {
  std::string name;                              // "device" | "host"
  std::vector<double> total, chunks, non_model;  // MiB
  int64_t budget = 0;                            // bytes; 0: none recorded
};

Tier tier_of(const Profile& p, const ProfileMemory& m, const std::string& name);

// ---- drawing helpers (visualize_drawing.cpp) ----------------------------------------------------

std::string plain(const std::string& text);

std::string mib_text(double mib_value);

std::string run_summary(const Profile& p);

Colour band_colour(ProfileStage stage);

const char* stage_letter(ProfileStage stage);

void fill_rect(double x0, double x1, double y0, double y1);

void vline(double x, double y0, double y1);

void hline(double y, double x0, double x1);

struct Band {
  double x0, x1;
  ProfileStage stage;
};

std::vector<Band> stage_bands(const std::vector<int8_t>& stage, const std::vector<double>& edges);

void draw_bands(const std::vector<Band>& bands, double y0, double y1);

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

bool show_steps(const std::vector<StepStart>& starts);

void draw_steps(const std::vector<StepStart>& starts, double y0, double y1);

void fill_between(const std::vector<double>& lower, const std::vector<double>& upper);

void stairs(const std::vector<double>& v);

void draw_axes(const char* x_label, const char* y_label, const std::string& title);

void draw_grid();

struct LegendEntry {
  enum Kind { kBox, kLine, kText } kind;
  std::string text;
  Colour colour = kInk;
  PLINT line_style = 1;
  PLFLT line_width = 2.0;
};

LegendEntry box(std::string text, Colour colour);
LegendEntry line(std::string text, Colour colour, PLINT style = 1, PLFLT width = 2.0);
std::vector<LegendEntry> stage_legend();

void draw_legend(const std::vector<LegendEntry>& entries);

bool budget_on_scale(int64_t budget_bytes, double peak_mib);

LegendEntry budget_entry(const std::string& tier, int64_t budget_bytes, bool on_scale,
                         Colour colour);

double y_top(double peak);

void set_plot_area(double x0, double x1, double y0, double y1);

std::vector<double> row_edges(size_t n);

// ---- figures ------------------------------------------------------------------------------------

// visualize_memory_figures.cpp
void memory_figure(const Profile& p, const std::string& tier_name);
void timeline_figure(const Profile& p, const std::string& tier_name);
// visualize_location_figure.cpp (Note [location rows])
void location_figure(const Profile& p);
// visualize_moves_figure.cpp
void moves_figure(const Profile& p);

}  // namespace pstar::cmd::visualize_parts
