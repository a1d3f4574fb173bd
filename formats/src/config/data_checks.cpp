// Checks across the data keys (config/data_checks.h); docs/config.md#data and docs/data.md say
// what each source needs.
#include "config/data_checks.h"

#include <cstdio>

#include "config/messages.h"
#include "pstar/base/strings.h"

namespace pstar::config::detail {
namespace {

// "data.path and data.text are both set", "data.path, data.text and data.jsonl are all set".
std::string both_or_all(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) out += i + 1 == keys.size() ? " and " : ", ";
    out += keys[i];
  }
  return out + (keys.size() == 2 ? " are both set" : " are all set");
}

// Held-out data (data.eval, data.eval_fraction) and when it is evaluated.
void check_eval(const Context& ctx, const TrainConfig& c) {
  const EvalDataConfig& eval = c.data.eval;
  if (eval.set() && c.data.eval_fraction) {
    ctx.fail_about({"data.eval", "data.eval_fraction"},
                   str_cat("data.eval and data.eval_fraction (", number_text(*c.data.eval_fraction),
                           ") are both set; hold out data one way: a second source in data.eval, "
                           "or the last fraction of the training source in data.eval_fraction"));
  }
  std::vector<std::string> sources;
  if (!eval.path.empty()) sources.push_back("data.eval.path");
  if (!eval.text.empty()) sources.push_back("data.eval.text");
  if (!eval.jsonl.empty()) sources.push_back("data.eval.jsonl");
  if (sources.size() > 1) {
    ctx.fail_about(sources, both_or_all(sources) +
                                "; set exactly one of them (data.eval.path for binary token ids, "
                                "data.eval.text for a UTF-8 text file, data.eval.jsonl for JSON "
                                "Lines records)");
  }
  if (!eval.text.empty() && c.data.text.empty()) {
    ctx.fail_about({"data.eval.text", "data.path", "data.jsonl"},
                   str_cat("data.eval.text (", eval.text,
                           ") needs training text in data.text, so that both are tokenized the "
                           "same way; with data.path give the held-out tokens in data.eval.path, "
                           "with data.jsonl held-out records in data.eval.jsonl"));
  }
  if (!eval.jsonl.empty() && c.data.jsonl.empty()) {
    ctx.fail_about({"data.eval.jsonl", "data.path", "data.text"},
                   str_cat("data.eval.jsonl (", eval.jsonl,
                           ") needs training records in data.jsonl, so that both are rendered and "
                           "masked the same way; with data.path or data.text give held-out data "
                           "in data.eval.path or data.eval.text"));
  }
  if (!eval.path.empty() && !c.data.jsonl.empty()) {
    ctx.fail_about({"data.eval.path", "data.jsonl"},
                   str_cat("data.eval.path (", eval.path,
                           ") holds token windows, but data.jsonl trains on records; give "
                           "held-out records in data.eval.jsonl, or hold out the last records "
                           "with data.eval_fraction"));
  }
  if (c.training.eval_interval > 0 && !c.data.has_eval() && c.training.eval_samples.empty()) {
    ctx.fail_about({"training.eval_interval", "data.eval", "data.eval_fraction"},
                   str_cat("training.eval_interval is ", c.training.eval_interval,
                           " but there is no held-out data and no training.eval_samples; set "
                           "data.eval (a second source) or data.eval_fraction (e.g. 0.05), or "
                           "training.eval_interval 0"));
  }
}

}  // namespace

bool is_iso_date(const std::string& date) {
  if (date.size() != 10 || date[4] != '-' || date[7] != '-') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9}) {
    if (date[i] < '0' || date[i] > '9') return false;
  }
  const int year = std::stoi(date.substr(0, 4));
  const int month = std::stoi(date.substr(5, 2));
  const int day = std::stoi(date.substr(8, 2));
  if (year < 1 || month < 1 || month > 12 || day < 1) return false;
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return day <= kDays[month - 1] + (month == 2 && leap ? 1 : 0);
}

void check_data(const Context& ctx, const TrainConfig& c) {
  const DataConfig& d = c.data;
  std::vector<std::string> sources;
  if (!d.path.empty()) sources.push_back("data.path");
  if (!d.text.empty()) sources.push_back("data.text");
  if (!d.jsonl.empty()) sources.push_back("data.jsonl");
  if (sources.size() > 1) {
    ctx.fail_about(sources, both_or_all(sources) +
                                "; set exactly one of them (data.path for binary token ids, "
                                "data.text for a UTF-8 text file, data.jsonl for JSON Lines "
                                "records)");
  }
  if (sources.empty()) {
    ctx.fail_about({"data.path", "data.text", "data.jsonl"},
                   "no training data: set data.path (a flat binary file of token ids), "
                   "data.text (a UTF-8 text file, tokenized as bytes) or data.jsonl (JSON Lines "
                   "records: conversations, prompt/completion pairs or texts)");
  }
  if (!d.tokenizer.empty() && !d.path.empty()) {
    ctx.fail_about({"data.tokenizer", "data.path"},
                   "data.tokenizer is set without data.text or data.jsonl; the tokenizer turns "
                   "text into tokens at start-up (a data.path file already holds token ids)");
  }
  if (!d.jsonl.empty() && d.tokenizer.empty()) {
    ctx.fail_about({"data.jsonl", "data.tokenizer"},
                   str_cat("data.jsonl (", d.jsonl,
                           ") needs data.tokenizer: records are tokenized at start-up by the "
                           "model's own tokenizer (its tokenizer.json, or the model's folder)"));
  }
  if (d.jsonl.empty()) {
    // A key that only records use, set to anything but its default (to_json_text writes every key,
    // so the defaults must read back for any source).
    const DataConfig defaults;
    std::string key;
    if (d.chat_template != defaults.chat_template) key = "data.chat_template";
    if (d.chat_date != defaults.chat_date) key = "data.chat_date";
    if (d.chat_template_kwargs != defaults.chat_template_kwargs) key = "data.chat_template_kwargs";
    if (d.loss_on != defaults.loss_on) key = "data.loss_on";
    if (d.packing != defaults.packing) key = "data.packing";
    if (d.truncate != defaults.truncate) key = "data.truncate";
    if (d.skip_bad_records != defaults.skip_bad_records) key = "data.skip_bad_records";
    if (!key.empty()) {
      ctx.fail_about({key, "data.jsonl"},
                     str_cat(key,
                             " is set but data.jsonl is not; it applies only to JSON Lines "
                             "records (data.jsonl)"));
    }
  }
  if (!d.chat_date.empty() && !is_iso_date(d.chat_date)) {
    ctx.fail("data.chat_date", str_cat("expected \"\" or a date written YYYY-MM-DD, such as "
                                       "\"2024-07-26\", found \"",
                                       d.chat_date, "\""));
  }
  if (!d.chat_template_kwargs.empty()) {
    // The variables the renderer sets itself (text/src/chat_template.cpp, kOwnVariables).
    const Json kwargs = Json::parse(d.chat_template_kwargs);
    for (const char* own : {"messages", "add_generation_prompt", "bos_token", "eos_token",
                            "raise_exception", "namespace", "range", "strftime_now"}) {
      if (kwargs.contains(own)) {
        ctx.fail(str_cat("data.chat_template_kwargs.", own),
                 "a variable pstar sets itself when it renders a conversation; give only the "
                 "template's own options (such as Qwen3's enable_thinking)");
      }
    }
  }
  check_eval(ctx, c);
}

}  // namespace pstar::config::detail
