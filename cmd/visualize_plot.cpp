// `pstar visualize`'s PLplot session: the palette, PLplot's error handlers, and the session that
// owns PLplot's one global stream from plinit() to plend().
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <plplot.h>

#include "pstar/base/error.h"
#include "pstar/core/log.h"
#include "visualize_parts.h"

namespace pstar::cmd::visualize_parts {
namespace {

// Pixels for PNG, points for SVG and PDF. The cairo drivers size text in points at 72 dpi in all
// three, so a figure looks the same in each format.
constexpr PLINT kWidth = 1200, kHeight = 700;

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
      {kExperts, 148, 103, 189, 1.0},
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

}  // namespace

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

PlotSession::PlotSession(const char* device, const std::string& path) {
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

PlotSession::~PlotSession() {
  if (open_) plend();
  plexit_cleanup_path().clear();
}

// Writes the file (the cairo drivers write on plend).
void PlotSession::finish() {
  open_ = false;
  plend();
  plexit_cleanup_path().clear();
  PSTAR_CHECK(plplot_messages().empty(), InternalError, "PLplot: ", plplot_messages());
}

}  // namespace pstar::cmd::visualize_parts
