// `pstar visualize --fig moves`: bytes moved between the tiers per moment, host to device and back.
#include <algorithm>
#include <string>
#include <vector>

#include <plplot.h>

#include "visualize_parts.h"

namespace pstar::cmd::visualize_parts {

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

}  // namespace pstar::cmd::visualize_parts
