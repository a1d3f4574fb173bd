// The checks across the data keys (private to formats/src/config*): which training source is set
// (exactly one of data.path, data.text, data.jsonl), what each needs (data.tokenizer), keys that
// only records use, and held-out data (data.eval, data.eval_fraction, training.eval_interval).
#pragma once

#include <string>
#include <vector>

#include "config/context.h"
#include "pstar/formats/config.h"

namespace pstar::config::detail {

// Whether `date` is a calendar date written YYYY-MM-DD (years 1 to 9999).
bool is_iso_date(const std::string& date);

void check_data(const Context& ctx, const TrainConfig& c);

}  // namespace pstar::config::detail
