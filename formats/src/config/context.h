// What every config check needs to word its message (private to formats/src/config*): the
// source's name and the --set overrides applied, so that a message says which --set a bad value
// came from.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "config/messages.h"
#include "pstar/base/error.h"
#include "pstar/base/strings.h"

namespace pstar::config::detail {

struct Override {
  std::string key;   // the dotted path it set
  std::string text;  // the whole KEY=VALUE, for messages
};

// What every check needs to word its message: the source name and the overrides applied.
class Context {
 public:
  explicit Context(std::string source) : source_(std::move(source)) {}

  void add_override(Override applied) { overrides_.push_back(std::move(applied)); }

  // Whether the value at `path` was written by an override (the override set it or a parent).
  bool set_by_override(const std::string& path) const {
    return std::any_of(overrides_.begin(), overrides_.end(),
                       [&](const Override& o) { return is_within(path, o.key); });
  }

  // The override that set exactly `path`, if any (the last one wins, as when applying them).
  const Override* exact_override(const std::string& path) const {
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      if (it->key == path) return &*it;
    }
    return nullptr;
  }

  // "<source>: <path>: <message>", plus which --set it came from.
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    fail_about({path}, str_cat(path, ": ", message));
  }

  // "<source>: <message>", plus the --set overrides that touched any of `paths`: those that set a
  // path, one of its parents, or something inside it (e.g. an unknown key they created).
  [[noreturn]] void fail_about(const std::vector<std::string>& paths,
                               const std::string& message) const {
    std::vector<std::string> from;
    for (const Override& o : overrides_) {
      const bool touches = std::any_of(paths.begin(), paths.end(), [&](const std::string& p) {
        return !p.empty() && (is_within(p, o.key) || is_within(o.key, p));
      });
      if (touches && std::find(from.begin(), from.end(), o.text) == from.end()) {
        from.push_back(o.text);
      }
    }
    std::string text = str_cat(source_, ": ", message);
    if (!from.empty()) text += " (from --set " + quoted_list(from, "'") + ")";
    throw ConfigError(text);
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<Override> overrides_;
};

}  // namespace pstar::config::detail
