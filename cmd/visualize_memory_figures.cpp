// `pstar visualize --fig memory` (one tier's memory by moment, stacked chunks and non-model) and
// `--fig timeline` (memory over wall time).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <plplot.h>

#include "visualize_parts.h"

namespace pstar::cmd::visualize_parts {

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

}  // namespace pstar::cmd::visualize_parts
