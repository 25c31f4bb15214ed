#include "shard/data/jinja/interpreter.h"

#include <iterator>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "shard/data/jinja/arithmetic.h"
#include "shard/data/jinja/budget.h"
#include "shard/data/jinja/builtins.h"

namespace shard::jinja {
namespace {

using Frame = std::unordered_map<std::string, Value>;
enum class Flow { kNormal, kBreak, kContinue };

// What one turn of a for loop costs in steps: it builds a frame and a `loop`
// dict of nine entries, about as much work as ten plain steps (a turn charged
// as one step let a loop with a short body run ten times longer per step than
// anything else; the fuzzer found it at 5.7 us/step under ASan).
constexpr int64_t kLoopTurnSteps = 10;
// A macro call builds a frame of its arguments and an output buffer.
constexpr int64_t kCallFrameSteps = 5;

// A standard exception thrown inside the render (an allocation that failed, a
// library's range check) as the engine's error, so it gets the line too.
[[noreturn]] void Convert(const std::exception& e, int line) {
  if (dynamic_cast<const std::bad_alloc*>(&e)) Fail("out of memory while rendering", line);
  Fail(std::string("internal error while rendering: ") + e.what(), line);
}

class Interpreter {
 public:
  Interpreter(Object context, const Limits& limits) : limits_(limits) {
    frames_.emplace_back();
    for (auto& [k, v] : context) frames_[0][k] = std::move(v);
  }

 private:
  // Appends rendered text to the current output (the result, or the buffer of
  // a block set or macro call), within the output and value budgets; the text
  // counts as live memory until TakeBuffer hands a buffer over as a value.
  void Emit(const std::string& text) {
    const uint64_t size = out_->size() + static_cast<uint64_t>(text.size());
    if (out_ != root_) CheckValueSize(size, "the text of a block set or macro call");
    else if (size > static_cast<uint64_t>(limits_.max_output_bytes))
      Fail("the rendered text grew past its budget of " + std::to_string(limits_.max_output_bytes >> 20) + " MiB");
    if (RenderBudget* b = CurrentBudget()) {
      b->Steps(static_cast<int64_t>(text.size() / 256));
      b->Alloc(static_cast<int64_t>(text.size()));
    }
    *out_ += text;
  }
  static Value TakeBuffer(std::string buf) {
    if (RenderBudget* b = CurrentBudget()) b->Free(static_cast<int64_t>(buf.size()));
    return Value::Str(std::move(buf));
  }

  Value Lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value();
  }

  Flow Exec(const Body& body) {
    for (const auto& n : body) {
      Flow f = ExecNode(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow ExecNode(const Node& n) {
    try {
      DepthGuard depth;
      ChargeSteps(1);
      switch (n.kind) {
        case NodeKind::kText: Emit(n.text); return Flow::kNormal;
        case NodeKind::kOutput: Emit(Eval(*n.exprs[0]).Str()); return Flow::kNormal;
        case NodeKind::kIf:
          for (size_t k = 0; k < n.exprs.size(); ++k)
            if (Eval(*n.exprs[k]).Truthy()) return Exec(n.bodies[k]);
          return n.bodies.size() > n.exprs.size() ? Exec(n.bodies.back()) : Flow::kNormal;
        case NodeKind::kFor: For(n); return Flow::kNormal;
        case NodeKind::kSet: Set(n); return Flow::kNormal;
        case NodeKind::kMacro: DefineMacro(n); return Flow::kNormal;
        case NodeKind::kGeneration: {
          const size_t begin = out_->size();
          Flow f = Exec(n.bodies[0]);
          if (out_ == root_) spans_->emplace_back(begin, out_->size());
          return f;
        }
        case NodeKind::kBreak: return Flow::kBreak;
        case NodeKind::kContinue: return Flow::kContinue;
      }
    } catch (JinjaError& e) {
      if (e.line == 0) e.line = n.line;
      throw;
    } catch (const std::exception& e) {
      Convert(e, n.line);
    }
    return Flow::kNormal;
  }

  void Bind(const std::vector<std::string>& names, const Value& v, int line) {
    if (names.size() == 1) {
      frames_.back()[names[0]] = v;
      return;
    }
    Array items = v.Iterate();
    if (items.size() != names.size())
      Fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(names.size()) + " names",
           line);
    for (size_t k = 0; k < names.size(); ++k) frames_.back()[names[k]] = items[k];
  }

  void For(const Node& n) {
    Value seq = Eval(*n.exprs[0]);
    if (seq.undefined() || seq.none()) seq = Value::List();
    Array items = seq.Iterate();
    if (n.exprs.size() > 1) {  // `for x in xs if cond` filters before loop.* is computed
      Array kept;
      frames_.emplace_back();
      for (auto& it : items) {
        Bind(n.names, it, n.line);
        if (Eval(*n.exprs[1]).Truthy()) kept.push_back(it);
      }
      frames_.pop_back();
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.bodies.size() > 1) Exec(n.bodies[1]);
      return;
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      ChargeSteps(kLoopTurnSteps);
      frames_.emplace_back();
      Object loop = {{"index", Value::Int(k + 1)},
                     {"index0", Value::Int(k)},
                     {"revindex", Value::Int(len - k)},
                     {"revindex0", Value::Int(len - k - 1)},
                     {"first", Value::Bool(k == 0)},
                     {"last", Value::Bool(k == len - 1)},
                     {"length", Value::Int(len)},
                     {"previtem", k > 0 ? items[k - 1] : Value()},
                     {"nextitem", k + 1 < len ? items[k + 1] : Value()}};
      frames_.back()["loop"] = Value::Dict(std::move(loop));
      Bind(n.names, items[k], n.line);
      Flow f = Exec(n.bodies[0]);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
  }

  void Set(const Node& n) {
    Value v;
    if (n.bodies.empty()) {
      v = Eval(*n.exprs[0]);
    } else {
      std::string buf;
      std::string* saved = out_;
      out_ = &buf;
      Exec(n.bodies[0]);
      out_ = saved;
      v = TakeBuffer(std::move(buf));
    }
    const std::string& target = n.names[0];
    const size_t dot = target.find('.');
    if (dot == std::string::npos) {
      Bind(n.names, v, n.line);
      return;
    }
    Value ns = Lookup(target.substr(0, dot));
    if (!ns.is_namespace()) Fail("cannot set attribute '" + target + "': '" + target.substr(0, dot) +
                                 "' is not a namespace()", n.line);
    ns.Set(target.substr(dot + 1), std::move(v));
  }

  void DefineMacro(const Node& n) {
    const Node* node = &n;
    std::vector<Value> defaults;
    for (const auto& d : n.exprs) defaults.push_back(d ? Eval(*d) : Value());
    frames_.back()[n.text] = Value::Callable(n.text, [this, node, defaults](CallArgs& args) {
      if (args.pos.size() > node->names.size())
        Fail("macro " + node->text + " takes " + std::to_string(node->names.size()) + " arguments, got " +
             std::to_string(args.pos.size()));
      Frame frame;
      for (size_t k = 0; k < node->names.size(); ++k)
        frame[node->names[k]] = k < args.pos.size() ? args.pos[k] : defaults[k];
      for (auto& [key, v] : args.kw) {
        bool known = false;
        for (const auto& p : node->names) known |= p == key;
        if (!known) Fail("macro " + node->text + " has no argument '" + key + "'");
        frame[key] = v;
      }
      // A macro sees the template's top-level names and its own arguments.
      // The caller's frames are moved aside, not copied: a call inside loops
      // or a recursion would otherwise copy every enclosing frame per call.
      ChargeSteps(kCallFrameSteps);
      std::vector<Frame> saved(std::make_move_iterator(frames_.begin() + 1), std::make_move_iterator(frames_.end()));
      frames_.resize(1);
      frames_.push_back(std::move(frame));
      std::string buf;
      std::string* saved_out = out_;
      out_ = &buf;
      Exec(node->bodies[0]);
      out_ = saved_out;
      frames_.resize(1);
      frames_.insert(frames_.end(), std::make_move_iterator(saved.begin()), std::make_move_iterator(saved.end()));
      return TakeBuffer(std::move(buf));
    });
  }

  CallArgs EvalArgs(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t k = first; k < e.args.size(); ++k) a.pos.push_back(Eval(*e.args[k]));
    for (const auto& [name, x] : e.kw) a.kw.emplace_back(name, Eval(*x));
    return a;
  }

  Value Eval(const Expr& e) {
    try {
      DepthGuard depth;
      ChargeSteps(1);
      return EvalInner(e);
    } catch (JinjaError& err) {
      if (err.line == 0) err.line = e.line;
      throw;
    } catch (const std::exception& ex) {
      Convert(ex, e.line);
    }
  }

  Value EvalInner(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.value;
      case ExprKind::kName: return Lookup(e.name);
      case ExprKind::kList: {
        Array a;
        for (const auto& x : e.args) a.push_back(Eval(*x));
        return Value::List(std::move(a));
      }
      case ExprKind::kDict: {
        Value d = Value::Dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = Eval(*e.args[k]);
          if (!key.is_string()) Fail(std::string("dict keys must be strings here, not ") + key.TypeName());
          d.Set(key.s(), Eval(*e.args[k + 1]));
        }
        return d;
      }
      case ExprKind::kAttr: return GetAttr(Eval(*e.args[0]), e.name);
      case ExprKind::kIndex: return GetItem(Eval(*e.args[0]), Eval(*e.args[1]));
      case ExprKind::kSlice: {
        auto opt = [&](size_t k) { return e.args[k] ? Eval(*e.args[k]) : Value(); };
        return Slice(Eval(*e.args[0]), opt(1), opt(2), opt(3));
      }
      case ExprKind::kCall: {
        Value f = Eval(*e.args[0]);
        CallArgs a = EvalArgs(e, 1);
        if (!f.is_callable()) {
          std::string what = e.args[0]->kind == ExprKind::kName ? "'" + e.args[0]->name + "'"
                             : e.args[0]->kind == ExprKind::kAttr ? "method '" + e.args[0]->name + "'"
                                                                  : "the expression";
          Fail(what + " is not a function that this renderer knows (" + f.TypeName() + ")");
        }
        return f.Call(a);
      }
      case ExprKind::kFilter: {
        Value v = Eval(*e.args[0]);
        CallArgs a = EvalArgs(e, 1);
        return ApplyFilter(e.name, v, a);
      }
      case ExprKind::kTest: {
        Value v = Eval(*e.args[0]);
        CallArgs a = EvalArgs(e, 1);
        return Value::Bool(ApplyTest(e.name, v, a) != e.negate);
      }
      case ExprKind::kUnary: {
        Value v = Eval(*e.args[0]);
        if (e.name == "not") return Value::Bool(!v.Truthy());
        if (e.name == "-") return Negate(v);
        if (v.is_bool()) return Value::Int(v.b() ? 1 : 0);
        if (!v.is_number()) Fail(std::string("bad operand type for unary +: ") + v.TypeName());
        return v;
      }
      case ExprKind::kBinary: return BinaryOp(e);
      case ExprKind::kCond:
        if (Eval(*e.args[0]).Truthy()) return Eval(*e.args[1]);
        return e.args[2] ? Eval(*e.args[2]) : Value();
    }
    return Value();
  }

  Value BinaryOp(const Expr& e) {
    const std::string& op = e.name;
    Value a = Eval(*e.args[0]);
    if (op == "and") return a.Truthy() ? Eval(*e.args[1]) : a;
    if (op == "or") return a.Truthy() ? a : Eval(*e.args[1]);
    Value b = Eval(*e.args[1]);
    if (op == "==") return Value::Bool(Equal(a, b));
    if (op == "!=") return Value::Bool(!Equal(a, b));
    if (op == "<") return Value::Bool(Less(a, b, e.line));
    if (op == ">") return Value::Bool(Less(b, a, e.line));
    if (op == "<=") return Value::Bool(!Less(b, a, e.line));
    if (op == ">=") return Value::Bool(!Less(a, b, e.line));
    if (op == "in" || op == "not in") {
      CallArgs args;
      args.pos.push_back(b);
      return Value::Bool(ApplyTest("in", a, args) == (op == "in"));
    }
    if (op == "~") return Concat(a.Str(), b.Str());
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Concat(a.s(), b.s());
      if (a.is_list() && b.is_list()) {
        CheckValueSize(MulSize(a.list().size() + b.list().size(), sizeof(Value)), "list + list");
        Array c = a.list();
        c.insert(c.end(), b.list().begin(), b.list().end());
        return Value::List(std::move(c));
      }
    }
    if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
      const std::string& s = a.is_string() ? a.s() : b.s();
      const int64_t n = a.is_int() ? a.i() : b.i();
      if (n <= 0 || s.empty()) return Value::Str("");
      CheckValueSize(MulSize(s.size(), static_cast<uint64_t>(n)), "string * integer");
      std::string r;
      r.reserve(s.size() * static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) r += s;
      return Value::Str(std::move(r));
    }
    return Arithmetic(op, a, b);
  }

  static Value Concat(const std::string& a, const std::string& b) {
    CheckValueSize(static_cast<uint64_t>(a.size()) + b.size(), "joining strings");
    return Value::Str(a + b);
  }

  const Limits& limits_;
  std::vector<Frame> frames_;
  std::string* out_ = nullptr;
  std::string* root_ = nullptr;
  std::vector<std::pair<size_t, size_t>>* spans_ = nullptr;

 public:
  Rendered RunRoot(const Body& body) {
    Rendered r;
    out_ = &r.text;
    root_ = &r.text;
    spans_ = &r.generation;
    Exec(body);
    return r;
  }
};

}  // namespace

Rendered Execute(const Body& body, Object context, const Limits& limits) {
  return Interpreter(std::move(context), limits).RunRoot(body);
}

}  // namespace shard::jinja
