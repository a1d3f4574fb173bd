// Reading the normalizer and the pre-tokenizer of a tokenizer.json (load_pipeline.h).
#include "load_pipeline.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "pstar/base/error.h"

namespace pstar::text {
namespace {

std::string type_of(const Json& object, const std::string& what, const std::string& origin) {
  PSTAR_CHECK(object.is_object(), FormatError, origin, ": ", what, " must be an object, not ",
              object.type_name());
  const Json& type = field(object, "type", what, origin);
  PSTAR_CHECK(type.is_string(), FormatError, origin, ": ", what, ".type must be a string");
  return type.get<std::string>();
}

SplitBehavior parse_behavior(const Json& v, const std::string& what, const std::string& origin) {
  const std::string name = v.is_string() ? v.get<std::string>() : v.dump();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  PSTAR_THROW(FormatError, origin, ": ", what, ".behavior '", name,
              "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
              "Contiguous");
}

}  // namespace

const Json& field(const Json& object, const char* key, const std::string& what,
                  const std::string& origin) {
  const auto it = object.find(key);
  PSTAR_CHECK(it != object.end(), FormatError, origin, ": ", what, " has no \"", key, "\"");
  return *it;
}

bool optional_bool(const Json& object, const char* key, bool fallback, const std::string& what,
                   const std::string& origin) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  PSTAR_CHECK(it->is_boolean(), FormatError, origin, ": ", what, ".", key,
              " must be true or false, not ", it->dump());
  return it->get<bool>();
}

void read_normalizer(const Json& n, const std::string& what, const std::string& origin,
                     TokenizerImpl& impl) {
  if (n.is_null()) return;
  const std::string type = type_of(n, what, origin);
  if (type == "NFC") {
    impl.normalizers.push_back({Normalizer::Kind::kNfc, "", ""});
  } else if (type == "Replace") {
    const Json& pattern = field(n, "pattern", what, origin);
    PSTAR_CHECK(pattern.is_object() && pattern.size() == 1 && pattern.contains("String") &&
                    pattern["String"].is_string() && !pattern["String"].get<std::string>().empty(),
                FormatError, origin, ": ", what, ".pattern is ", pattern.dump(),
                "; pstar supports a Replace of a non-empty {\"String\": ...} only (not a Regex)");
    const Json& content = field(n, "content", what, origin);
    PSTAR_CHECK(content.is_string(), FormatError, origin, ": ", what, ".content must be a string");
    impl.normalizers.push_back({Normalizer::Kind::kReplace, pattern["String"].get<std::string>(),
                                content.get<std::string>()});
  } else if (type == "Sequence") {
    const Json& list = field(n, "normalizers", what, origin);
    PSTAR_CHECK(list.is_array(), FormatError, origin, ": ", what, ".normalizers must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      read_normalizer(list[i], str_cat(what, ".normalizers[", i, "]"), origin, impl);
    }
  } else {
    PSTAR_THROW(FormatError, origin, ": ", what, " has type '", type,
                "', which pstar does not support (it supports no normalizer, NFC, Replace of a "
                "string, or a Sequence of those)");
  }
}

void read_pre_tokenizer(const Json& p, const std::string& what, const std::string& origin,
                        TokenizerImpl& impl) {
  if (p.is_null()) return;
  const std::string type = type_of(p, what, origin);
  auto& pre = impl.pre;
  if (type == "Sequence") {
    const Json& list = field(p, "pretokenizers", what, origin);
    PSTAR_CHECK(list.is_array(), FormatError, origin, ": ", what,
                ".pretokenizers must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      read_pre_tokenizer(list[i], str_cat(what, ".pretokenizers[", i, "]"), origin, impl);
    }
    return;
  }
  const bool after_byte_level = std::any_of(pre.begin(), pre.end(), [](const PreTokenizer& t) {
    return t.kind == PreTokenizer::Kind::kByteLevel;
  });
  PSTAR_CHECK(!after_byte_level, FormatError, origin, ": ", what, " (type '", type,
              "') comes after a ByteLevel pre-tokenizer, which pstar does not support (it would "
              "see the byte-level alphabet instead of the text)");
  PreTokenizer t;
  if (type == "Split") {
    t.kind = PreTokenizer::Kind::kSplit;
    const Json& pattern = field(p, "pattern", what, origin);
    const bool is_regex = pattern.is_object() && pattern.contains("Regex");
    const bool is_string = pattern.is_object() && pattern.contains("String");
    PSTAR_CHECK((is_regex || is_string) && pattern.size() == 1 && pattern.begin()->is_string(),
                FormatError, origin, ": ", what,
                ".pattern must be {\"Regex\": \"...\"} or {\"String\": \"...\"}, not ",
                pattern.dump());
    t.regex = std::make_unique<Regex>(pattern.begin()->get<std::string>(), is_string,
                                      what + ".pattern." + (is_regex ? "Regex" : "String"));
    t.behavior = parse_behavior(field(p, "behavior", what, origin), what, origin);
    t.invert = optional_bool(p, "invert", false, what, origin);
  } else if (type == "ByteLevel") {
    t.kind = PreTokenizer::Kind::kByteLevel;
    // Hugging Face's defaults: add_prefix_space and use_regex true. trim_offsets changes
    // offsets only, not ids.
    t.add_prefix_space = optional_bool(p, "add_prefix_space", true, what, origin);
    optional_bool(p, "trim_offsets", true, what, origin);
    if (optional_bool(p, "use_regex", true, what, origin)) {
      t.regex = std::make_unique<Regex>(kGpt2Regex, false, what + " (GPT-2's regex)");
    }
  } else {
    PSTAR_THROW(FormatError, origin, ": ", what, " has type '", type,
                "', which pstar does not support (it supports Split, ByteLevel and Sequence)");
  }
  pre.push_back(std::move(t));
}

// Whether a pre-tokenizer (or one of a Sequence) is ByteLevel: the model is then byte-level BPE
// (Note [code-point BPE]).
bool has_byte_level(const Json& p) {
  if (!p.is_object()) return false;
  if (p.value("type", "") == "ByteLevel") return true;
  const auto list = p.find("pretokenizers");
  if (list == p.end() || !list->is_array()) return false;
  return std::any_of(list->begin(), list->end(), [](const Json& q) { return has_byte_level(q); });
}

}  // namespace pstar::text
