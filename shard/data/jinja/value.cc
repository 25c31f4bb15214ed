#include "shard/data/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "shard/data/jinja/budget.h"

namespace shard::jinja {

void Fail(std::string message, int line) { throw JinjaError{std::move(message), line}; }

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
namespace {

constexpr int64_t kItemBytes = sizeof(Value);
constexpr int64_t kEntryBytes = sizeof(std::pair<std::string, Value>);

// Charges a value of `bytes` to the render's budget (none outside a render)
// and returns the budget to credit when it is freed.
RenderBudget* Charge(int64_t bytes) {
  RenderBudget* b = CurrentBudget();
  if (b) {
    b->Steps(1 + bytes / 256);
    b->Alloc(bytes);
  }
  return b;
}

// Containers and functions free through FreeIteratively, so dropping a
// 100,000-deep list, or a chain of macros holding macros, never recurses.
template <typename T>
struct IterativeDelete {
  RenderBudget* budget;
  int64_t item_bytes;
  void operator()(T* p) const {
    if (budget) {
      if constexpr (std::is_same_v<T, Function>) budget->Free(item_bytes);
      else budget->Free(item_bytes * static_cast<int64_t>(p->size()));
    }
    FreeIteratively(p, [](void* q) { delete static_cast<T*>(q); });
  }
};

template <typename T>
void ClearContainer(void* p) {
  T drop;
  drop.swap(*static_cast<T*>(p));
}

}  // namespace

Value Value::Str(std::string s) {
  const auto bytes = static_cast<int64_t>(s.size());
  RenderBudget* b = Charge(bytes);
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::shared_ptr<const std::string>(new std::string(std::move(s)), [b, bytes](const std::string* p) {
    if (b) b->Free(bytes);
    delete p;
  });
  return v;
}
Value Value::List(Array items) {
  CheckValueSize(MulSize(items.size(), kItemBytes), "a list");
  RenderBudget* b = Charge(kItemBytes * static_cast<int64_t>(items.size()));
  Value v;
  v.kind_ = Kind::kArray;
  v.arr_ = std::shared_ptr<Array>(new Array(std::move(items)), IterativeDelete<Array>{b, kItemBytes});
  if (b) b->TrackContainer(v.arr_, &ClearContainer<Array>);
  return v;
}
Value Value::Dict(Object items, bool is_namespace) {
  CheckValueSize(MulSize(items.size(), kEntryBytes), "a dict");
  RenderBudget* b = Charge(kEntryBytes * static_cast<int64_t>(items.size()));
  Value v;
  v.kind_ = Kind::kObject;
  v.namespace_ = is_namespace;
  v.obj_ = std::shared_ptr<Object>(new Object(std::move(items)), IterativeDelete<Object>{b, kEntryBytes});
  if (b) b->TrackContainer(v.obj_, &ClearContainer<Object>);
  return v;
}
Value Value::Callable(std::string name, Function fn) {
  RenderBudget* b = Charge(sizeof(Function));
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_name_ = std::move(name);
  v.fn_ = std::shared_ptr<Function>(new Function(std::move(fn)), IterativeDelete<Function>{b, sizeof(Function)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  DepthGuard depth;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return None();
    case nlohmann::ordered_json::value_t::boolean: return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      if (j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        Fail("the integer " + j.dump() + " in the context does not fit in 64 bits");
      return Int(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      for (const auto& e : j) a.push_back(FromJson(e));
      return List(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it) o.emplace_back(it.key(), FromJson(it.value()));
      return Dict(std::move(o));
    }
    default: return Value();
  }
}

double Value::AsDouble() const {
  if (kind_ == Kind::kInt) return static_cast<double>(i_);
  if (kind_ == Kind::kFloat) return f_;
  if (kind_ == Kind::kBool) return b_ ? 1 : 0;
  Fail(std::string("expected a number, got ") + TypeName());
}

Value Value::Call(CallArgs& args) const {
  if (kind_ != Kind::kCallable) Fail(std::string("cannot call a value of type ") + TypeName());
  return (*fn_)(args);
}

Value* Value::Find(std::string_view key) const {
  if (kind_ != Kind::kObject) return nullptr;
  ChargeSteps(static_cast<int64_t>(obj_->size() / 8));
  for (auto& [k, v] : *obj_)
    if (k == key) return &v;
  return nullptr;
}

void Value::Set(const std::string& key, Value v) const {
  if (Value* slot = Find(key)) {
    *slot = std::move(v);
    return;
  }
  CheckValueSize(MulSize(obj_->size() + 1, kEntryBytes), "a dict");
  Charge(kEntryBytes);
  obj_->emplace_back(key, std::move(v));
}

void Value::Append(Value v) const {
  CheckValueSize(MulSize(arr_->size() + 1, kItemBytes), "list.append");
  Charge(kItemBytes);
  arr_->push_back(std::move(v));
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0;
    case Kind::kString: return !s_->empty();
    case Kind::kArray: return !arr_->empty();
    case Kind::kObject: return namespace_ || !obj_->empty();
    case Kind::kCallable: return true;
  }
  return false;
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kArray: return "list";
    case Kind::kObject: return namespace_ ? "namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "?";
}

namespace {
size_t CodePointLength(unsigned char c) { return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1; }
}  // namespace

std::vector<std::string> CodePoints(std::string_view s) {
  std::vector<std::string> out;
  for (size_t k = 0; k < s.size();) {
    const size_t n = std::min(CodePointLength(static_cast<unsigned char>(s[k])), s.size() - k);
    out.emplace_back(s.substr(k, n));
    k += n;
  }
  return out;
}

size_t CodePointCount(std::string_view s) {
  ChargeBytes(s.size());
  size_t count = 0;
  for (size_t k = 0; k < s.size(); ++count) k += std::min(CodePointLength(static_cast<unsigned char>(s[k])), s.size() - k);
  return count;
}

size_t CodePointOffset(std::string_view s, size_t n) {
  ChargeBytes(s.size());
  size_t k = 0;
  for (size_t i = 0; i < n && k < s.size(); ++i) k += std::min(CodePointLength(static_cast<unsigned char>(s[k])), s.size() - k);
  return k;
}

Array Value::Iterate() const {
  switch (kind_) {
    case Kind::kArray:
      CheckValueSize(MulSize(arr_->size(), kItemBytes), "iterating a list");
      ChargeSteps(static_cast<int64_t>(arr_->size()));
      return *arr_;
    case Kind::kObject: {
      CheckValueSize(MulSize(obj_->size(), kItemBytes), "iterating a dict");
      ChargeSteps(static_cast<int64_t>(obj_->size()));
      Array keys;
      for (const auto& [k, v] : *obj_) keys.push_back(Str(k));
      return keys;
    }
    case Kind::kString: {
      CheckValueSize(MulSize(CodePointCount(*s_), kItemBytes), "iterating a string");
      Array chars;
      for (auto& c : CodePoints(*s_)) chars.push_back(Str(std::move(c)));
      return chars;
    }
    default: Fail(std::string("a value of type ") + TypeName() + " is not iterable");
  }
}

Value CallArgs::Get(size_t index, std::string_view name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  return index < pos.size() ? pos[index] : Value();
}

bool Equal(const Value& a, const Value& b) {
  ChargeSteps(1);
  if (a.is_int() && b.is_int()) return a.i() == b.i();
  if (a.is_number() && b.is_number()) return a.AsDouble() == b.AsDouble();
  if (a.is_bool() && b.is_number()) return (a.b() ? 1.0 : 0.0) == b.AsDouble();
  if (b.is_bool() && a.is_number()) return Equal(b, a);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return a.b() == b.b();
    case Value::Kind::kString:
      ChargeBytes(std::min(a.s().size(), b.s().size()));
      return a.s() == b.s();
    case Value::Kind::kArray: {
      if (&a.list() == &b.list()) return true;
      if (a.list().size() != b.list().size()) return false;
      DepthGuard depth;
      for (size_t k = 0; k < a.list().size(); ++k)
        if (!Equal(a.list()[k], b.list()[k])) return false;
      return true;
    }
    case Value::Kind::kObject: {
      if (&a.dict() == &b.dict()) return true;
      if (a.dict().size() != b.dict().size()) return false;
      DepthGuard depth;
      for (const auto& [k, v] : a.dict()) {
        const Value* o = b.Find(k);
        if (!o || !Equal(v, *o)) return false;
      }
      return true;
    }
    default: return false;
  }
}

bool Less(const Value& a, const Value& b, int line) {
  ChargeSteps(1);
  if (a.is_int() && b.is_int()) return a.i() < b.i();
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) return a.AsDouble() < b.AsDouble();
  if (a.is_string() && b.is_string()) {
    ChargeBytes(std::min(a.s().size(), b.s().size()));
    return a.s() < b.s();
  }
  if (a.is_list() && b.is_list()) {
    DepthGuard depth;
    const size_t n = std::min(a.list().size(), b.list().size());
    for (size_t k = 0; k < n; ++k) {
      if (Less(a.list()[k], b.list()[k], line)) return true;
      if (Less(b.list()[k], a.list()[k], line)) return false;
    }
    return a.list().size() < b.list().size();
  }
  Fail(std::string("cannot compare ") + a.TypeName() + " with " + b.TypeName(), line);
}

}  // namespace shard::jinja
