// ChatTemplate: the tokenizer_config.json side of chat templates, and rendering through the Jinja
// interpreter in src/jinja/ (Note [chat templates]).
#include "pstar/text/chat_template.h"

#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "jinja/ast.h"
#include "jinja/builtins.h"
#include "jinja/render.h"
#include "jinja/value.h"
#include "pstar/base/error.h"
#include "pstar/formats/mapped_file.h"

namespace pstar::text {
namespace {

using Json = nlohmann::json;
using jinja::CallArgs;
using jinja::Dict;
using jinja::Str;
using jinja::Value;

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// tokenizer_config.json's special tokens are a string, an AddedToken object or null.
std::string token_text(const Json& config, const char* key, const std::string& where) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  PSTAR_THROW(FormatError, where, ": ", key, " must be a string or {\"content\": ...}, not ",
              it->dump());
}

// strftime over a fixed YYYY-MM-DD date (the time of day is midnight).
Value strftime_on(const std::string& date) {
  return Value::callable(
      [date](CallArgs& args) {
        const Value& fmt = args.get(0, "format", Value());
        PSTAR_CHECK(fmt.is_string(), FormatError, args.where,
                    ": strftime_now takes a format string");
        std::tm tm{};
        int y = 0, m = 0, d = 0;
        PSTAR_CHECK(std::sscanf(date.c_str(), "%4d-%2d-%2d", &y, &m, &d) == 3, ConfigError,
                    "chat date '", date, "' is not YYYY-MM-DD");
        tm.tm_year = y - 1900;
        tm.tm_mon = m - 1;
        tm.tm_mday = d;
        tm.tm_hour = 12;  // mktime fills in the weekday and the day of the year
        std::mktime(&tm);
        tm.tm_hour = 0;
        char buf[256];
        const size_t n = std::strftime(buf, sizeof buf, fmt.as_str().text.c_str(), &tm);
        return Value::string(std::string(buf, n));
      },
      "strftime_now");
}

// A JSON value as the template sees it (Python's json.loads gives apply_chat_template the same).
Value from_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case Json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case Json::value_t::number_unsigned:
      return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case Json::value_t::number_float:
      return Value::floating(j.get<double>());
    case Json::value_t::string:
      return Value::string(j.get<std::string>());
    case Json::value_t::array: {
      jinja::List items;
      for (const Json& item : j) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Dict d;
      for (const auto& item : j.items()) d.set(item.key(), from_json(item.value()));
      return Value::dict(std::move(d));
    }
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return Value();
}

// The variables globals_for() sets itself, which data.chat_template_kwargs may not replace (the
// config parser keeps the same list: formats/src/config/data_checks.cpp).
constexpr const char* kOwnVariables[] = {"messages",  "add_generation_prompt", "bos_token",
                                         "eos_token", "raise_exception",       "namespace",
                                         "range",     "strftime_now"};

Dict globals_for(const std::vector<ChatMessage>& messages, const ChatOptions& options,
                 const std::string& bos, const std::string& eos) {
  jinja::List list;
  for (size_t i = 0; i < messages.size(); ++i) {
    Dict m;
    m.set("role", Value::string(messages[i].role));
    // The content's bytes remember their message (Note [string origins]); so do the reasoning's,
    // which is the assistant's own text as much as its content is.
    m.set("content", Value::string(Str(messages[i].content, static_cast<int32_t>(i))));
    if (messages[i].reasoning_content) {
      m.set("reasoning_content",
            Value::string(Str(*messages[i].reasoning_content, static_cast<int32_t>(i))));
    }
    list.push_back(Value::dict(std::move(m)));
  }
  Dict g;
  g.set("messages", Value::list(std::move(list)));
  g.set("add_generation_prompt", Value::boolean(options.add_generation_prompt));
  g.set("bos_token", Value::string(bos));
  g.set("eos_token", Value::string(eos));
  g.set("raise_exception",
        Value::callable(
            [](CallArgs& args) -> Value {
              const Value& msg = args.get(0, "message", Value::string(""));
              PSTAR_THROW(FormatError, args.where,
                          ": the chat template refused the conversation: ", msg.to_output().text);
            },
            "raise_exception"));
  g.set("namespace", Value::callable(
                         [](CallArgs& args) {
                           Dict ns;
                           ns.is_namespace = true;
                           for (const auto& [k, v] : args.keyword) ns.set(k, v);
                           return Value::dict(std::move(ns));
                         },
                         "namespace"));
  g.set("range", Value::callable(
                     [](CallArgs& args) {
                       int64_t start = 0, stop = 0, step = 1;
                       for (const Value& v : args.positional)
                         PSTAR_CHECK(v.kind() == Value::Kind::kInt, FormatError, args.where,
                                     ": range takes integers");
                       const auto& p = args.positional;
                       if (p.size() == 1) {
                         stop = p[0].as_int();
                       } else if (p.size() >= 2) {
                         start = p[0].as_int();
                         stop = p[1].as_int();
                         if (p.size() > 2) step = p[2].as_int();
                       }
                       PSTAR_CHECK(step != 0, FormatError, args.where, ": range step is zero");
                       jinja::List out;
                       for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
                         out.push_back(Value::integer(i));
                       return Value::list(std::move(out));
                     },
                     "range"));
  if (!options.date.empty()) g.set("strftime_now", strftime_on(options.date));
  if (!options.template_kwargs.empty()) {
    Json kwargs;
    try {
      kwargs = Json::parse(options.template_kwargs);
    } catch (const Json::exception& e) {
      PSTAR_THROW(FormatError, "chat template kwargs are not JSON: ", e.what());
    }
    PSTAR_CHECK(kwargs.is_object(), FormatError, "chat template kwargs must be a JSON object, not ",
                kwargs.type_name());
    for (const auto& item : kwargs.items()) {
      for (const char* own : kOwnVariables)
        PSTAR_CHECK(item.key() != own, FormatError, "chat template kwargs: '", item.key(),
                    "' is a variable pstar sets itself and cannot be given");
      g.set(item.key(), from_json(item.value()));
    }
  }
  return g;
}

}  // namespace

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& origin,
                                 const std::string& bos_token, const std::string& eos_token) {
  ChatTemplate t;
  t.program_ = jinja::parse(source, origin);
  t.origin_ = origin;
  t.source_ = source;
  t.bos_ = bos_token;
  t.eos_ = eos_token;
  return t;
}

ChatTemplate ChatTemplate::load(const std::string& path) {
  std::string file = path;
  if (is_directory(path)) {
    file = path + "/tokenizer_config.json";
  } else if (file.size() < 21 || file.compare(file.size() - 21, 21, "tokenizer_config.json") != 0) {
    const auto slash = file.find_last_of('/');
    file = (slash == std::string::npos ? std::string(".") : file.substr(0, slash)) +
           "/tokenizer_config.json";
  }
  const formats::MappedFile mapped(file);
  const std::string text(reinterpret_cast<const char*>(mapped.data()), mapped.size());
  Json config;
  try {
    config = Json::parse(text);
  } catch (const Json::exception& e) {
    PSTAR_THROW(FormatError, file, ": not JSON (", e.what(), ")");
  }
  PSTAR_CHECK(config.is_object(), FormatError, file, " is not a JSON object");
  const auto it = config.find("chat_template");
  PSTAR_CHECK(it != config.end() && !it->is_null(), FormatError, file,
              " has no chat_template: this tokenizer has no template to render conversations "
              "with (a base model's tokenizer usually has none; use its instruct model's "
              "tokenizer_config.json, or data records of {\"text\": ...})");
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    for (const Json& named : *it)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template"))
        source = named["template"].get<std::string>();
    PSTAR_CHECK(!source.empty(), FormatError, file,
                ": chat_template is a list of named templates without one named \"default\"");
  } else {
    PSTAR_THROW(FormatError, file, ": chat_template must be a string or a list of named templates");
  }
  return parse(source, file + " (chat_template)", token_text(config, "bos_token", file),
               token_text(config, "eos_token", file));
}

RenderedChat ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                  const ChatOptions& options) const {
  const Str out = jinja::render(*program_, globals_for(messages, options, bos_, eos_));
  RenderedChat r;
  r.text = out.text;
  out.for_each_run([&](size_t b, size_t e, int32_t source) {
    if (source != jinja::kTemplate) r.spans.push_back({b, e, source});
  });
  return r;
}

}  // namespace pstar::text
