// `pstar estimate`'s parts shared between its files (private to cmd/): turning the flags into the
// engine's structs (estimate_inputs.cpp) and printing what the engine estimated
// (estimate_report.cpp); estimate.cpp is the command itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "pstar/model/model_shape.h"
#include "pstar/plan/estimate.h"

namespace pstar::cmd::estimate_parts {

using nlohmann::json;

// ---- inputs (estimate_inputs.cpp) ----
int64_t parse_size_flag(const std::string& flag, const std::string& text);
int64_t parse_count_flag(const std::string& flag, const std::string& text);
double parse_rate_flag(const std::string& flag, const std::string& text);
void check_positive(const std::string& flag, double value);
std::string preset_list();
std::string known_model_names();
model::ModelShape resolve_named_model(const EstimateCommandOptions& o);
plan::Hardware resolve_hardware(const EstimateCommandOptions& o);
// The step-time model needs every rate; without one, only memory is estimated.
bool has_time_model(const plan::Hardware& hw);
bool llama_search(const EstimateCommandOptions& o);
plan::Workload resolve_workload(const EstimateCommandOptions& o);

// ---- the search (estimate.cpp) ----
// The largest model of the family asked for (the GPT's or the Llama-3-like search).
plan::Estimate search(const EstimateCommandOptions& o, const plan::Hardware& hw,
                      const plan::Workload& w);

// ---- report (estimate_report.cpp) ----
std::string params_text(int64_t params);
std::string model_text(const model::ModelShape& s);
json model_json(const model::ModelShape& s, int64_t params);
struct Tiers {
  json gpu, host;
  json nvme;  // null without an NVMe tier
};
// `nvme_capacity` 0: no NVMe tier, and no `nvme` column.
Tiers memory_items(const plan::Evaluation& e, int64_t gpu_capacity, int64_t host_capacity,
                   int64_t ranks_per_host, int64_t nvme_capacity = 0);
json time_json(const plan::StepTime& t, const plan::Workload& w, const plan::Hardware& hw);
void print_memory(const Tiers& t, const plan::Evaluation& e, const plan::Workload& w,
                  bool hardware);
void print_time(const plan::StepTime& t, const plan::Workload& w, const plan::Hardware& hw);
json evaluation_json(const plan::Evaluation& e, const Tiers& tiers);
void print_report(const EstimateCommandOptions& o, const plan::Hardware& hw,
                  const plan::Workload& w, const plan::Estimate& est, const Tiers& tiers,
                  const std::vector<plan::DeepSpeedEstimate>& ds);

}  // namespace pstar::cmd::estimate_parts
