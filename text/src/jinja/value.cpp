#include "value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pstar::text::jinja {

Str::Str(std::string t, int32_t source) : text(std::move(t)) {
  if (source != kTemplate && !text.empty())
    origins.push_back(Origin{static_cast<uint32_t>(text.size()), source});
}

void Str::for_each_run(const std::function<void(size_t, size_t, int32_t)>& fn) const {
  if (origins.empty()) {
    if (!text.empty()) fn(0, text.size(), kTemplate);
    return;
  }
  size_t at = 0;
  for (const Origin& o : origins) {
    fn(at, at + o.length, o.source);
    at += o.length;
  }
}

namespace {

void push_run(std::vector<Origin>& runs, uint32_t length, int32_t source) {
  if (length == 0) return;
  if (!runs.empty() && runs.back().source == source) {
    runs.back().length += length;
  } else {
    runs.push_back(Origin{length, source});
  }
}

}  // namespace

void Str::append(const Str& other) {
  if (other.text.empty()) return;
  if (origins.empty() && other.origins.empty()) {
    text += other.text;
    return;
  }
  if (origins.empty() && !text.empty())
    origins.push_back(Origin{static_cast<uint32_t>(text.size()), kTemplate});
  other.for_each_run([&](size_t b, size_t e, int32_t source) {
    push_run(origins, static_cast<uint32_t>(e - b), source);
  });
  text += other.text;
}

Str Str::slice(size_t begin, size_t end) const {
  Str out;
  end = std::min(end, text.size());
  if (begin >= end) return out;
  out.text = text.substr(begin, end - begin);
  if (origins.empty()) return out;
  bool any_source = false;
  for_each_run([&](size_t b, size_t e, int32_t source) {
    const size_t lo = std::max(b, begin), hi = std::min(e, end);
    if (lo < hi) {
      push_run(out.origins, static_cast<uint32_t>(hi - lo), source);
      any_source = any_source || source != kTemplate;
    }
  });
  if (!any_source) out.origins.clear();
  return out;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  if (Value* v = find(key)) {
    *v = std::move(value);
  } else {
    items.emplace_back(key, std::move(value));
  }
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::floating(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}

Value Value::string(Str s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<Str>(std::move(s));
  return v;
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.l_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.m_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::callable(Builtin fn, std::string name) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.f_ = std::make_shared<Builtin>(std::move(fn));
  v.name_ = std::move(name);
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return d_ != 0.0;
    case Kind::kString:
      return !s_->text.empty();
    case Kind::kList:
      return !l_->empty();
    case Kind::kDict:
      return !m_->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

bool Value::equals(const Value& other) const {
  // Python: True == 1 and 1 == 1.0.
  const bool num_a = is_number() || kind_ == Kind::kBool;
  const bool num_b = other.is_number() || other.kind_ == Kind::kBool;
  if (num_a && num_b) {
    const double a = kind_ == Kind::kBool ? (b_ ? 1.0 : 0.0) : as_number();
    const double b = other.kind_ == Kind::kBool ? (other.b_ ? 1.0 : 0.0) : other.as_number();
    return a == b;
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return s_->text == other.s_->text;
    case Kind::kList: {
      if (l_->size() != other.l_->size()) return false;
      for (size_t i = 0; i < l_->size(); ++i)
        if (!(*l_)[i].equals((*other.l_)[i])) return false;
      return true;
    }
    case Kind::kDict: {
      if (m_->items.size() != other.m_->items.size()) return false;
      for (const auto& [k, v] : m_->items) {
        const Value* w = other.m_->find(k);
        if (w == nullptr || !v.equals(*w)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return f_ == other.f_;
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
      break;  // handled above
  }
  return false;
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest of %.{1..17}g that reads back exactly, as Python's repr.
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string quote(const std::string& s) {
  // Python's repr of a str: single quotes unless the text has one and no double quote.
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    switch (c) {
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
      default:
        if (c == q) out += '\\';
        out += c;
    }
  }
  out += q;
  return out;
}

}  // namespace

std::string Value::repr() const {
  if (kind_ == Kind::kString) return quote(s_->text);
  if (kind_ == Kind::kUndefined) return "";
  return to_output().text;
}

Str Value::to_output() const {
  switch (kind_) {
    case Kind::kUndefined:
      return Str();
    case Kind::kNone:
      return Str("None");
    case Kind::kBool:
      return Str(b_ ? "True" : "False");
    case Kind::kInt:
      return Str(std::to_string(i_));
    case Kind::kFloat:
      return Str(format_float(d_));
    case Kind::kString:
      return *s_;
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < l_->size(); ++i) out += (i ? ", " : "") + (*l_)[i].repr();
      return Str(out + "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < m_->items.size(); ++i)
        out += (i ? ", " : "") + quote(m_->items[i].first) + ": " + m_->items[i].second.repr();
      return Str(out + "}");
    }
    case Kind::kCallable:
      return Str("<function " + name_ + ">");
  }
  return Str();
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "none";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
      return "integer";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

const Value& CallArgs::get(size_t i, std::string_view name, const Value& fallback) const {
  if (i < positional.size()) return positional[i];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return fallback;
}

}  // namespace pstar::text::jinja
