// `pstar visualize --fig location` (or `access`, PatrickStar's name): where each chunk's payloads
// are at each moment, with the optimizer strip and the stage strip.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <plplot.h>

#include "visualize_parts.h"

namespace pstar::cmd::visualize_parts {
namespace {

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

// Note [expert rows]
// Which chunks hold a mixture of experts' experts, from /chunks/tensors: pstar registers every
// family's experts in a module list named `experts` (`model.layers.1.mlp.experts.0.up_proj.weight`,
// `...block_sparse_moe.experts.3.w1.weight`), so a chunk holds experts when one of its tensor names
// has an `experts` component. A profile from before /chunks/tensors tells nothing (all false).
std::vector<bool> expert_rows(const Profile& p) {
  std::vector<bool> rows(p.chunks.size(), false);
  for (size_t c = 0; c < p.chunks.tensors.size() && c < rows.size(); ++c) {
    const std::string names = "," + p.chunks.tensors[c];
    rows[c] = names.find(".experts.") != std::string::npos ||
              names.find(",experts.") != std::string::npos;
  }
  return rows;
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

}  // namespace

void location_figure(const Profile& p) {
  const ProfileMemory& m = p.by_moment;
  const size_t n = m.size(), chunks = p.chunks.size();
  const double right = static_cast<double>(n);
  const double heat_top = kTop - 0.075;  // the stage strip sits above the heat map
  // The optimizer strip (Note [location rows]) sits right of the heat map, inside kRight, and
  // left of it, for a mixture of experts, the experts strip (Note [expert rows]).
  const std::vector<bool> experts = expert_rows(p);
  const size_t expert_chunks =
      static_cast<size_t>(std::count(experts.begin(), experts.end(), true));
  const double strip_left = kRight - 0.022, experts_left = strip_left - 0.034;
  const double heat_right = expert_chunks > 0 ? experts_left - 0.012 : strip_left - 0.012;
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

  // The experts strip: the rows that hold experts marked, the others left blank.
  if (expert_chunks > 0) {
    plvpor(experts_left, strip_left - 0.012, kBottom, heat_top);
    plwind(0, 1, 0, heat_ymax);
    plcol0(kExperts);
    for (size_t c = 0; c < chunks; ++c)
      if (experts[c]) fill_rect(0, 1, static_cast<double>(c), static_cast<double>(c + 1));
    plcol0(kInk);
    plbox("bc", 0, 0, "bc", 0, 0);
    plschr(0, kSmallText);
    plmtex("t", 0.6, 0.5, 0.5, "exp.");  // above: below, "optim." beside it has no room
    plschr(0, kTextScale);
  }

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
  if (expert_chunks > 0) {
    text("exp.: the " + std::to_string(expert_chunks) + " chunks that hold experts");
    legend.push_back(box("holds experts", kExperts));
  }
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

}  // namespace pstar::cmd::visualize_parts
