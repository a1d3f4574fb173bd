#include "builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "pstar/base/error.h"

namespace pstar::text::jinja {
namespace {

[[noreturn]] void fail(const CallArgs& args, const std::string& what) {
  PSTAR_THROW(FormatError, args.where, ": ", what);
}

// The code point starting at s[i] and its length in bytes (invalid bytes count as one U+FFFD).
std::pair<uint32_t, size_t> decode(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {c, 1};
  const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (n == 1 || i + n > s.size()) return {0xFFFD, 1};
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return {cp, n};
}

// The start of the code point that ends at s[end - 1].
size_t previous_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80 && end - i < 4) --i;
  return i;
}

// Python's str.isspace().
bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string ascii_upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t at = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t hit = s.find(from, at);
    if (hit == std::string::npos) break;
    out += s.substr(at, hit - at) + to;
    at = hit + from.size();
  }
  return out + s.substr(at);
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;  // ensure_ascii=False: the bytes as they are
        }
    }
  }
  out += '"';
}

void json_value(const Value& v, int indent, int level, std::string& out) {
  const std::string item_sep = indent < 0 ? ", " : ",";
  auto newline = [&](int depth) {
    if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent * depth), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      PSTAR_THROW(FormatError, "tojson: an undefined value cannot be written as JSON");
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      const double d = v.as_number();
      out += std::isnan(d)   ? "NaN"
             : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                             : format_float(d);
      return;
    }
    case Value::Kind::kString:
      json_string(v.as_str().text, out);
      return;
    case Value::Kind::kList: {
      const List& l = v.as_list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_value(l[i], indent, level + 1, out);
      }
      newline(level);
      out += "]";
      return;
    }
    case Value::Kind::kDict: {
      const Dict& d = v.as_dict();
      if (d.items.empty()) {
        out += "{}";
        return;
      }
      out += "{";
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_string(d.items[i].first, out);
        out += ": ";
        json_value(d.items[i].second, indent, level + 1, out);
      }
      newline(level);
      out += "}";
      return;
    }
    case Value::Kind::kCallable:
      PSTAR_THROW(FormatError, "tojson: a function cannot be written as JSON");
  }
}

List iterate(const Value& v, const CallArgs& args, const char* what) {
  if (v.is_list()) return v.as_list();
  if (v.is_dict()) {
    List keys;
    for (const auto& kv : v.as_dict().items) keys.push_back(Value::string(kv.first));
    return keys;
  }
  if (v.is_string()) {
    List chars;
    const std::string& s = v.as_str().text;
    for (size_t i = 0; i < s.size();) {
      const size_t n = decode(s, i).second;
      chars.push_back(Value::string(v.as_str().slice(i, i + n)));
      i += n;
    }
    return chars;
  }
  if (v.is_undefined() || v.is_none()) return {};
  fail(args, std::string(what) + ": a " + v.type_name() + " cannot be iterated");
}

const Value kNoArg;

int64_t int_arg(const CallArgs& args, size_t i, const char* name, int64_t fallback) {
  const Value& v = args.get(i, name, kNoArg);
  if (v.is_undefined() || v.is_none()) return fallback;
  if (v.kind() != Value::Kind::kInt) fail(args, std::string(name) + " must be an integer");
  return v.as_int();
}

std::string str_arg(const CallArgs& args, size_t i, const char* name) {
  const Value& v = args.get(i, name, kNoArg);
  if (!v.is_string()) fail(args, std::string("argument ") + name + " must be a string");
  return v.as_str().text;
}

Value string_method(const Value& self, const std::string& name) {
  const Str s = self.as_str();
  auto bind = [&](Builtin fn) { return Value::callable(std::move(fn), name); };
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return bind([s, start](CallArgs& a) {
      const std::string p = str_arg(a, 0, "prefix");
      const std::string& t = s.text;
      const bool hit =
          t.size() >= p.size() && (start ? t.compare(0, p.size(), p) == 0
                                         : t.compare(t.size() - p.size(), p.size(), p) == 0);
      return Value::boolean(hit);
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bind([s, left, right](CallArgs& a) {
      // Python's str.strip(chars): None strips whitespace; a string strips any of its characters.
      const Value& chars = a.get(0, "chars", kNoArg);
      if (chars.is_undefined() || chars.is_none()) return Value::string(strip(s, left, right));
      if (!chars.is_string())
        fail(a, std::string("chars must be a string or None, not a ") + chars.type_name());
      return Value::string(strip(s, left, right, &chars.as_str().text));
    });
  }
  if (name == "upper" || name == "lower") {
    const bool up = name == "upper";
    return bind([s, up](CallArgs&) {
      return Value::string(up ? ascii_upper(s.text) : ascii_lower(s.text));
    });
  }
  if (name == "replace") {
    return bind([s](CallArgs& a) {
      return Value::string(replace_all(s.text, str_arg(a, 0, "old"), str_arg(a, 1, "new"),
                                       int_arg(a, 2, "count", -1)));
    });
  }
  if (name == "split") {
    return bind([s](CallArgs& a) {
      const Value& sep = a.get(0, "sep", kNoArg);
      const int64_t max = int_arg(a, 1, "maxsplit", -1);
      List parts;
      const std::string& t = s.text;
      if (sep.is_undefined() || sep.is_none()) {
        size_t i = 0;
        int64_t n = 0;
        while (true) {
          while (i < t.size() && is_space(decode(t, i).first)) i += decode(t, i).second;
          if (i >= t.size()) break;
          size_t j = i;
          if (max >= 0 && n == max) {
            size_t e = t.size();
            while (e > i && is_space(decode(t, previous_start(t, e)).first))
              e = previous_start(t, e);
            parts.push_back(Value::string(s.slice(i, e)));
            break;
          }
          while (j < t.size() && !is_space(decode(t, j).first)) j += decode(t, j).second;
          parts.push_back(Value::string(s.slice(i, j)));
          ++n;
          i = j;
        }
        return Value::list(std::move(parts));
      }
      const std::string d = str_arg(a, 0, "sep");
      if (d.empty()) fail(a, "split: empty separator");
      size_t at = 0;
      for (int64_t n = 0; max < 0 || n < max; ++n) {
        const size_t hit = t.find(d, at);
        if (hit == std::string::npos) break;
        parts.push_back(Value::string(s.slice(at, hit)));
        at = hit + d.size();
      }
      parts.push_back(Value::string(s.slice(at, t.size())));
      return Value::list(std::move(parts));
    });
  }
  return Value();
}

Value dict_method(const Value& self, const std::string& name) {
  auto bind = [&](Builtin fn) { return Value::callable(std::move(fn), name); };
  if (name == "items" || name == "keys" || name == "values") {
    return bind([self, name](CallArgs&) {
      List out;
      for (const auto& [k, v] : self.as_dict().items) {
        if (name == "items") {
          out.push_back(Value::list({Value::string(k), v}));
        } else {
          out.push_back(name == "keys" ? Value::string(k) : v);
        }
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return bind([self](CallArgs& a) {
      const Value* v = self.as_dict().find(str_arg(a, 0, "key"));
      return v != nullptr ? *v : a.get(1, "default", Value::none());
    });
  }
  return Value();
}

}  // namespace

int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

Str strip(const Str& s, bool left, bool right, const std::string* chars) {
  const std::string& t = s.text;
  // Whether the code point is one to strip: whitespace, or one of `chars` (compared as code
  // points, so that a multi-byte character in `chars` strips only itself).
  auto strips = [&](size_t at, size_t n) {
    if (chars == nullptr) return is_space(decode(t, at).first);
    for (size_t i = 0; i < chars->size();) {
      const size_t m = decode(*chars, i).second;
      if (m == n && chars->compare(i, m, t, at, n) == 0) return true;
      i += m;
    }
    return false;
  };
  size_t b = 0, e = t.size();
  if (left) {
    while (b < e) {
      const size_t n = decode(t, b).second;
      if (!strips(b, n)) break;
      b += n;
    }
  }
  if (right) {
    while (e > b) {
      const size_t p = previous_start(t, e);
      if (!strips(p, e - p)) break;
      e = p;
    }
  }
  return s.slice(b, e);
}

std::string to_json(const Value& value, int indent) {
  std::string out;
  json_value(value, indent, 0, out);
  return out;
}

Value attribute(const Value& value, const std::string& name) {
  if (value.is_dict()) {
    if (const Value* v = value.as_dict().find(name)) return *v;
    return dict_method(value, name);
  }
  if (value.is_string()) return string_method(value, name);
  return Value();
}

Value apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  if (name == "trim") {
    if (!v.is_string()) fail(args, std::string("trim: expected a string, got a ") + v.type_name());
    // Jinja's trim(chars=None), which is Python's strip(chars).
    const Value& chars = args.get(0, "chars", kNoArg);
    if (chars.is_undefined() || chars.is_none())
      return Value::string(strip(v.as_str(), true, true));
    if (!chars.is_string()) fail(args, "trim: chars must be a string");
    return Value::string(strip(v.as_str(), true, true, &chars.as_str().text));
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::integer(code_points(v.as_str().text));
    if (v.is_list()) return Value::integer(static_cast<int64_t>(v.as_list().size()));
    if (v.is_dict()) return Value::integer(static_cast<int64_t>(v.as_dict().items.size()));
    fail(args, std::string("length: a ") + v.type_name() + " has no length");
  }
  if (name == "tojson") {
    const Value& indent = args.get(0, "indent", kNoArg);
    return Value::string(
        to_json(v, indent.kind() == Value::Kind::kInt ? static_cast<int>(indent.as_int()) : -1));
  }
  if (name == "string") return Value::string(v.to_output());
  if (name == "upper" || name == "lower") {
    const std::string t = v.to_output().text;
    return Value::string(name == "upper" ? ascii_upper(t) : ascii_lower(t));
  }
  if (name == "capitalize") {
    std::string t = ascii_lower(v.to_output().text);
    if (!t.empty()) t[0] = ascii_upper(t.substr(0, 1))[0];
    return Value::string(t);
  }
  if (name == "replace") {
    return Value::string(replace_all(v.to_output().text, str_arg(args, 0, "old"),
                                     str_arg(args, 1, "new"), int_arg(args, 2, "count", -1)));
  }
  if (name == "default" || name == "d") {
    const bool boolean = args.get(1, "boolean", Value::boolean(false)).truthy();
    const bool use = v.is_undefined() || (boolean && !v.truthy());
    return use ? args.get(0, "default_value", Value::string("")) : v;
  }
  if (name == "first" || name == "last") {
    const List l = iterate(v, args, name.c_str());
    if (l.empty()) return Value();
    return name == "first" ? l.front() : l.back();
  }
  if (name == "list") return Value::list(iterate(v, args, "list"));
  if (name == "reverse") {
    if (v.is_string()) {
      List chars = iterate(v, args, "reverse");
      std::reverse(chars.begin(), chars.end());
      Str out;
      for (const Value& c : chars) out.append(c.as_str());
      return Value::string(out);
    }
    List l = iterate(v, args, "reverse");
    std::reverse(l.begin(), l.end());
    return Value::list(std::move(l));
  }
  if (name == "join") {
    const Value& sep = args.get(0, "d", Value::string(""));
    Str out;
    bool first = true;
    for (const Value& item : iterate(v, args, "join")) {
      if (!first) out.append(sep.to_output());
      out.append(item.to_output());
      first = false;
    }
    return Value::string(out);
  }
  if (name == "items") {
    if (!v.is_dict()) fail(args, "items: expected a dict");
    CallArgs none;
    return attribute(v, "items").as_callable()(none);
  }
  if (name == "int") {
    if (v.kind() == Value::Kind::kInt) return v;
    if (v.is_number()) return Value::integer(static_cast<int64_t>(v.as_number()));
    if (v.is_string()) return Value::integer(std::strtoll(v.as_str().text.c_str(), nullptr, 10));
    return Value::integer(0);
  }
  if (name == "float") {
    if (v.is_number()) return Value::floating(v.as_number());
    if (v.is_string()) return Value::floating(std::strtod(v.as_str().text.c_str(), nullptr));
    return Value::floating(0.0);
  }
  if (name == "abs") {
    if (v.kind() == Value::Kind::kInt)
      return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_number()) return Value::floating(std::fabs(v.as_number()));
    fail(args, "abs: expected a number");
  }
  if (name == "selectattr" || name == "rejectattr" || name == "map") {
    const std::string attr =
        name == "map" ? str_arg(args, 0, "attribute") : str_arg(args, 0, "attr");
    List out;
    for (const Value& item : iterate(v, args, name.c_str())) {
      const Value field = attribute(item, attr);
      if (name == "map") {
        out.push_back(field);
        continue;
      }
      bool keep = field.truthy();
      if (args.positional.size() > 1) {
        CallArgs test_args;
        test_args.where = args.where;
        for (size_t i = 2; i < args.positional.size(); ++i)
          test_args.positional.push_back(args.positional[i]);
        const Value& test = args.positional[1];
        if (!test.is_string()) fail(args, name + ": the test must be named by a string");
        keep = apply_test(test.as_str().text, field, test_args);
      }
      if (keep == (name == "selectattr")) out.push_back(item);
    }
    return Value::list(std::move(out));
  }
  fail(args, "unknown filter '" + name +
                 "' (pstar's chat templates know trim, length, tojson, "
                 "string, upper, lower, capitalize, replace, default, first, last, list, reverse, "
                 "join, items, int, float, abs, selectattr, rejectattr, map)");
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args) {
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.kind() == K::kCallable;
  if (name == "even" || name == "odd") {
    if (v.kind() != K::kInt) fail(args, name + ": expected an integer");
    return (v.as_int() % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const int64_t d = int_arg(args, 0, "num", 0);
    if (v.kind() != K::kInt || d == 0) fail(args, "divisibleby: expected integers, not zero");
    return v.as_int() % d == 0;
  }
  const Value& other = args.get(0, "other", kNoArg);
  if (name == "eq" || name == "equalto" || name == "sameas") return v.equals(other);
  if (name == "ne") return !v.equals(other);
  if (name == "in") {
    for (const Value& item : iterate(other, args, "in"))
      if (item.equals(v)) return true;
    return other.is_string() && v.is_string() &&
           other.as_str().text.find(v.as_str().text) != std::string::npos;
  }
  if (name == "lt" || name == "gt" || name == "le" || name == "ge") {
    if (!v.is_number() || !other.is_number()) fail(args, name + ": expected numbers");
    const double a = v.as_number(), b = other.as_number();
    return name == "lt" ? a < b : name == "gt" ? a > b : name == "le" ? a <= b : a >= b;
  }
  fail(args, "unknown test '" + name + "'");
}

}  // namespace pstar::text::jinja
