// The values of the chat-template interpreter (Note [chat templates] in
// pstar/text/chat_template.h): Jinja's undefined, none, booleans, integers, floats, strings,
// lists, dicts and callables, with Python's meanings for truth, equality and printing.
//
// Note [string origins]
// A string remembers, byte by byte, which message's content it came from (`Origin::source`, the
// message index, or kTemplate for text the template wrote). Concatenation, slicing and trimming
// keep the origins of the bytes they keep; everything else (tojson, upper, replace, ...) makes
// template text. The rendered conversation thus says which of its bytes are, say, the second
// assistant turn's content, whatever the template did around it: that is what the loss mask is
// taken from.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pstar::text::jinja {

constexpr int32_t kTemplate = -1;

// A run of `length` bytes from one source.
struct Origin {
  uint32_t length = 0;
  int32_t source = kTemplate;
};

// Bytes and their origins (Note [string origins]). `origins` covers `text` exactly; empty
// `origins` means the whole text is the template's.
struct Str {
  std::string text;
  std::vector<Origin> origins;

  Str() = default;
  explicit Str(std::string t, int32_t source = kTemplate);
  void append(const Str& other);
  Str slice(size_t begin, size_t end) const;
  // The source of each byte, run by run (fn(begin, end, source)).
  void for_each_run(const std::function<void(size_t, size_t, int32_t)>& fn) const;
};

class Value;
using List = std::vector<Value>;
// Insertion-ordered, as Python's dicts.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  // namespace(): the one kind of object `{% set ns.attr = ... %}` may change.
  bool is_namespace = false;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value value);
};

struct CallArgs;
using Builtin = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double d);
  static Value string(Str s);
  static Value string(std::string s) { return string(Str(std::move(s))); }
  static Value list(List items);
  static Value dict(Dict d);
  static Value callable(Builtin fn, std::string name);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_number() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : d_; }
  const Str& as_str() const { return *s_; }
  const List& as_list() const { return *l_; }
  List& mutable_list() { return *l_; }
  const Dict& as_dict() const { return *m_; }
  Dict& mutable_dict() { return *m_; }
  const Builtin& as_callable() const { return *f_; }
  const std::string& callable_name() const { return name_; }

  // Python's truth value (undefined is false).
  bool truthy() const;
  // Python's ==, for the kinds templates compare.
  bool equals(const Value& other) const;
  // What {{ value }} prints: Python's str() (None, True, 1.0, ['a'], {'a': 1}); undefined prints
  // nothing. Strings keep their origins.
  Str to_output() const;
  // Python's repr() (strings quoted), used inside lists and dicts.
  std::string repr() const;
  // The name of the kind, for error messages ("string", "list", ...).
  const char* type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<Str> s_;
  std::shared_ptr<List> l_;
  std::shared_ptr<Dict> m_;
  std::shared_ptr<Builtin> f_;
  std::string name_;
};

// A call's arguments: positional, then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // For error messages: the callable's name and the template's name and line.
  std::string where;

  // The i-th positional argument, else the keyword `name`, else `fallback`.
  const Value& get(size_t i, std::string_view name, const Value& fallback) const;
};

// Python's float formatting of str()/repr(): the shortest text that reads back the same value,
// with ".0" on whole numbers.
std::string format_float(double d);

}  // namespace pstar::text::jinja
