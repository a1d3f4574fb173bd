#include "render.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "builtins.h"
#include "pstar/base/error.h"

namespace pstar::text::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const Program& program, const Dict& globals) : program_(program) {
    scopes_.push_back(globals);
  }

  Str run() {
    Str out;
    if (exec(program_.body, out) != Flow::kNormal) fail(0, "break or continue outside a loop");
    return out;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    PSTAR_THROW(FormatError, program_.origin, ", line ", line, ": ", what);
  }

  std::string where(int line) const { return program_.origin + ", line " + std::to_string(line); }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const Value* v = it->find(name)) return *v;
    return Value();
  }

  void assign(const std::string& name, Value value) { scopes_.back().set(name, std::move(value)); }

  // ---- statements ----

  Flow exec(const Body& body, Str& out) {
    for (const NodePtr& n : body) {
      const Flow flow = exec(*n, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Node& n, Str& out) {
    switch (n.kind) {
      case Node::Kind::kText:
        out.append(Str(n.text));
        return Flow::kNormal;
      case Node::Kind::kOutput:
        out.append(eval(*n.expr).to_output());
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches)
          if (!cond || eval(*cond).truthy()) return exec(body, out);
        return Flow::kNormal;
      case Node::Kind::kFor:
        return exec_for(n, out);
      case Node::Kind::kSet:
        exec_set(n);
        return Flow::kNormal;
      case Node::Kind::kSetBlock: {
        Str captured;
        if (exec(n.body, captured) != Flow::kNormal)
          fail(n.line, "break or continue in a set block");
        assign(n.targets[0], Value::string(std::move(captured)));
        return Flow::kNormal;
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kGeneration:
        return exec(n.body, out);
    }
    return Flow::kNormal;
  }

  void exec_set(const Node& n) {
    Value value = eval(*n.expr);
    if (!n.attr.empty()) {
      Value target = lookup(n.targets[0]);
      if (!target.is_dict() || !target.as_dict().is_namespace)
        fail(n.line, "only a namespace() takes attributes: '" + n.targets[0] + "' is a " +
                         target.type_name());
      target.mutable_dict().set(n.attr, std::move(value));  // shared: every copy sees it
      return;
    }
    if (n.targets.size() == 1) {
      assign(n.targets[0], std::move(value));
      return;
    }
    if (!value.is_list() || value.as_list().size() != n.targets.size())
      fail(n.line, "cannot unpack a " + std::string(value.type_name()) + " into " +
                       std::to_string(n.targets.size()) + " names");
    for (size_t i = 0; i < n.targets.size(); ++i) assign(n.targets[i], value.as_list()[i]);
  }

  Flow exec_for(const Node& n, Str& out) {
    const Value seq = eval(*n.expr);
    List items;
    if (seq.is_list()) {
      items = seq.as_list();
    } else if (seq.is_dict()) {
      for (const auto& kv : seq.as_dict().items) items.push_back(Value::string(kv.first));
    } else if (seq.is_string()) {
      CallArgs args;
      args.where = where(n.line);
      items = apply_filter("list", seq, args).as_list();
    } else if (!seq.is_undefined() && !seq.is_none()) {
      fail(n.line, std::string("cannot loop over a ") + seq.type_name());
    }
    scopes_.emplace_back();
    auto bind = [&](const Value& item) {
      if (n.targets.size() == 1) {
        assign(n.targets[0], item);
        return;
      }
      if (!item.is_list() || item.as_list().size() != n.targets.size())
        fail(n.line,
             "cannot unpack a loop item into " + std::to_string(n.targets.size()) + " names");
      for (size_t i = 0; i < n.targets.size(); ++i) assign(n.targets[i], item.as_list()[i]);
    };
    if (n.filter) {  // `for x in xs if cond`: loop over the items that pass
      List kept;
      for (const Value& item : items) {
        bind(item);
        if (eval(*n.filter).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto count = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < count; ++i) {
      bind(items[static_cast<size_t>(i)]);
      Dict loop;
      loop.set("index0", Value::integer(i));
      loop.set("index", Value::integer(i + 1));
      loop.set("revindex0", Value::integer(count - 1 - i));
      loop.set("revindex", Value::integer(count - i));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == count - 1));
      loop.set("length", Value::integer(count));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
      loop.set("nextitem", i + 1 < count ? items[static_cast<size_t>(i + 1)] : Value());
      assign("loop", Value::dict(std::move(loop)));
      const Flow flow = exec(n.body, out);
      if (flow == Flow::kBreak) break;
    }
    scopes_.pop_back();
    if (count == 0 && !n.else_body.empty()) return exec(n.else_body, out);
    return Flow::kNormal;
  }

  // ---- expressions ----

  CallArgs args_of(const Expr& e) {
    CallArgs args;
    args.where = where(e.line);
    for (const ExprPtr& a : e.items) args.positional.push_back(eval(*a));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
    return args;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList: {
        List items;
        for (const ExprPtr& item : e.items) items.push_back(eval(*item));
        return Value::list(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i]);
          if (!key.is_string()) fail(e.line, "dict keys must be strings");
          d.set(key.as_str().text, eval(*e.items[i + 1]));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::kAttr: {
        const Value obj = eval(*e.a);
        if (obj.is_undefined())
          fail(e.line, "'" + e.name + "' of an undefined value (test it with 'is defined' first)");
        return attribute(obj, e.name);
      }
      case Expr::Kind::kItem:
        return subscript(e, eval(*e.a), eval(*e.b));
      case Expr::Kind::kSlice:
        return slice(e, eval(*e.a));
      case Expr::Kind::kCall: {
        const Value fn = eval(*e.a);
        if (fn.kind() != Value::Kind::kCallable)
          fail(e.line, std::string("a ") + fn.type_name() + " is not callable");
        CallArgs args = args_of(e);
        return fn.as_callable()(args);
      }
      case Expr::Kind::kFilter: {
        const Value v = eval(*e.a);
        CallArgs args = args_of(e);
        return apply_filter(e.name, v, args);
      }
      case Expr::Kind::kTest: {
        const Value v = eval(*e.a);
        CallArgs args = args_of(e);
        return Value::boolean(apply_test(e.name, v, args) != e.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.a);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.kind() == Value::Kind::kInt)
          return Value::integer(e.name == "-" ? -v.as_int() : v.as_int());
        if (v.is_number()) return Value::floating(e.name == "-" ? -v.as_number() : v.as_number());
        fail(e.line, "unary " + e.name + " of a " + v.type_name());
      }
      case Expr::Kind::kBinary:
        return binary(e);
      case Expr::Kind::kCond:
        return eval(*e.b).truthy() ? eval(*e.a) : (e.c ? eval(*e.c) : Value());
    }
    return Value();
  }

  Value subscript(const Expr& e, const Value& obj, const Value& key) {
    if (obj.is_dict()) {
      if (!key.is_string()) return Value();
      const Value* v = obj.as_dict().find(key.as_str().text);
      return v != nullptr ? *v : Value();
    }
    if ((obj.is_list() || obj.is_string()) && key.kind() == Value::Kind::kInt) {
      CallArgs args;
      args.where = where(e.line);
      const List items = obj.is_list() ? obj.as_list() : apply_filter("list", obj, args).as_list();
      int64_t i = key.as_int();
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value();
      return items[static_cast<size_t>(i)];
    }
    if (obj.is_string() && key.is_string()) return attribute(obj, key.as_str().text);
    if (obj.is_undefined()) fail(e.line, "a subscript of an undefined value");
    return Value();
  }

  Value slice(const Expr& e, const Value& obj) {
    auto bound = [&](const ExprPtr& p) -> std::optional<int64_t> {
      if (!p) return std::nullopt;
      const Value v = eval(*p);
      if (v.is_none()) return std::nullopt;
      if (v.kind() != Value::Kind::kInt) fail(e.line, "slice bounds must be integers");
      return v.as_int();
    };
    const std::optional<int64_t> start = bound(e.b), stop = bound(e.c), step_opt = bound(e.d);
    const int64_t step = step_opt.value_or(1);
    if (step == 0) fail(e.line, "slice step cannot be zero");
    CallArgs args;
    args.where = where(e.line);
    if (!obj.is_list() && !obj.is_string())
      fail(e.line, std::string("cannot slice a ") + obj.type_name());
    const List items = obj.is_list() ? obj.as_list() : apply_filter("list", obj, args).as_list();
    const auto n = static_cast<int64_t>(items.size());
    // Python's slice.indices().
    auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
      if (!v) return fallback;
      int64_t x = *v < 0 ? *v + n : *v;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t lo = clamp(start, step > 0 ? 0 : n - 1);
    const int64_t hi = clamp(stop, step > 0 ? n : -1);
    List out;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
      out.push_back(items[static_cast<size_t>(i)]);
    if (obj.is_list()) return Value::list(std::move(out));
    Str s;
    for (const Value& c : out) s.append(c.as_str());
    return Value::string(std::move(s));
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.a);
      return a.truthy() ? eval(*e.b) : a;
    }
    if (op == "or") {
      Value a = eval(*e.a);
      return a.truthy() ? a : eval(*e.b);
    }
    const Value a = eval(*e.a), b = eval(*e.b);
    if (op == "~") {
      Str s = a.to_output();
      s.append(b.to_output());
      return Value::string(std::move(s));
    }
    if (op == "==") return Value::boolean(a.equals(b));
    if (op == "!=") return Value::boolean(!a.equals(b));
    if (op == "in" || op == "notin") {
      CallArgs args;
      args.where = where(e.line);
      args.positional.push_back(b);
      if (!b.is_list() && !b.is_dict() && !b.is_string() && !b.is_undefined() && !b.is_none())
        fail(e.line, std::string("'in' a ") + b.type_name());
      return Value::boolean(apply_test("in", a, args) == (op == "in"));
    }
    if (op == "+" && a.is_string() && b.is_string()) {
      Str s = a.as_str();
      s.append(b.as_str());
      return Value::string(std::move(s));
    }
    if (op == "+" && a.is_list() && b.is_list()) {
      List l = a.as_list();
      l.insert(l.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(l));
    }
    if (op == "*" && a.is_string() && b.kind() == Value::Kind::kInt) {
      Str s;
      for (int64_t i = 0; i < b.as_int(); ++i) s.append(a.as_str());
      return Value::string(std::move(s));
    }
    if ((op == "<" || op == ">" || op == "<=" || op == ">=") && a.is_string() && b.is_string()) {
      const int c = a.as_str().text.compare(b.as_str().text);
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (!a.is_number() || !b.is_number())
      fail(e.line, "'" + op + "' between a " + a.type_name() + " and a " + b.type_name());
    const bool ints = a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt;
    const double x = a.as_number(), y = b.as_number();
    if (op == "<") return Value::boolean(x < y);
    if (op == ">") return Value::boolean(x > y);
    if (op == "<=") return Value::boolean(x <= y);
    if (op == ">=") return Value::boolean(x >= y);
    if (op == "/") {
      if (y == 0) fail(e.line, "division by zero");
      return Value::floating(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail(e.line, "division by zero");
      const double q = std::floor(x / y);
      if (op == "//") return ints ? Value::integer(static_cast<int64_t>(q)) : Value::floating(q);
      const double r = x - q * y;
      return ints ? Value::integer(static_cast<int64_t>(r)) : Value::floating(r);
    }
    if (op == "**") {
      const double p = std::pow(x, y);
      return ints && y >= 0 ? Value::integer(static_cast<int64_t>(p)) : Value::floating(p);
    }
    if (ints) {
      const int64_t i = a.as_int(), j = b.as_int();
      return Value::integer(op == "+" ? i + j : op == "-" ? i - j : i * j);
    }
    return Value::floating(op == "+" ? x + y : op == "-" ? x - y : x * y);
  }

  const Program& program_;
  std::vector<Dict> scopes_;
};

}  // namespace

Str render(const Program& program, const Dict& globals) { return Renderer(program, globals).run(); }

}  // namespace pstar::text::jinja
