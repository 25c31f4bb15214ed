#include "shard/data/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

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
Value Value::Str(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::List(Array items) {
  Value v;
  v.kind_ = Kind::kArray;
  v.arr_ = std::make_shared<Array>(std::move(items));
  return v;
}
Value Value::Dict(Object items, bool is_namespace) {
  Value v;
  v.kind_ = Kind::kObject;
  v.namespace_ = is_namespace;
  v.obj_ = std::make_shared<Object>(std::move(items));
  return v;
}
Value Value::Callable(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_name_ = std::move(name);
  v.fn_ = std::make_shared<Function>(std::move(fn));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return None();
    case nlohmann::ordered_json::value_t::boolean: return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Int(static_cast<int64_t>(j.get<uint64_t>()));
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
  for (auto& [k, v] : *obj_)
    if (k == key) return &v;
  return nullptr;
}

void Value::Set(const std::string& key, Value v) const {
  if (Value* slot = Find(key)) {
    *slot = std::move(v);
    return;
  }
  obj_->emplace_back(key, std::move(v));
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

namespace {

// Python's repr(float): shortest round-trip digits, always with a '.' or exponent.
std::string FloatText(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), f);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string QuoteRepr(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == q) {
      out += '\\';
      out += q;
    }
    else out += c;
  }
  return out + q;
}

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

void DumpJson(const Value& v, int indent, int depth, std::string_view item_sep, std::string_view key_sep,
              std::string* out) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.b() ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.i()); return;
    case Value::Kind::kFloat: *out += FloatText(v.AsDouble()); return;
    case Value::Kind::kString: JsonString(v.s(), out); return;
    case Value::Kind::kArray: {
      if (v.list().empty()) { *out += "[]"; return; }
      *out += '[';
      for (size_t k = 0; k < v.list().size(); ++k) {
        if (k) *out += item_sep;
        newline(depth + 1);
        DumpJson(v.list()[k], indent, depth + 1, item_sep, key_sep, out);
      }
      newline(depth);
      *out += ']';
      return;
    }
    case Value::Kind::kObject: {
      if (v.dict().empty()) { *out += "{}"; return; }
      *out += '{';
      for (size_t k = 0; k < v.dict().size(); ++k) {
        if (k) *out += item_sep;
        newline(depth + 1);
        JsonString(v.dict()[k].first, out);
        *out += key_sep;
        DumpJson(v.dict()[k].second, indent, depth + 1, item_sep, key_sep, out);
      }
      newline(depth);
      *out += '}';
      return;
    }
    default: Fail(std::string("tojson: a value of type ") + v.TypeName() + " is not JSON serializable");
  }
}

}  // namespace

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return *s_;
    default: return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return FloatText(f_);
    case Kind::kString: return QuoteRepr(*s_);
    case Kind::kArray: {
      std::string s = "[";
      for (size_t k = 0; k < arr_->size(); ++k) {
        if (k) s += ", ";
        s += (*arr_)[k].Repr();
      }
      return s + "]";
    }
    case Kind::kObject: {
      if (namespace_) return "<Namespace>";
      std::string s = "{";
      for (size_t k = 0; k < obj_->size(); ++k) {
        if (k) s += ", ";
        s += QuoteRepr((*obj_)[k].first);
        s += ": ";
        s += (*obj_)[k].second.Repr();
      }
      return s + "}";
    }
    case Kind::kCallable: return "<function " + fn_name_ + ">";
  }
  return "";
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

nlohmann::ordered_json Value::ToJson() const {
  return nlohmann::ordered_json::parse(ToJsonText(*this, -1, ",", ":"));
}

std::vector<std::string> CodePoints(std::string_view s) {
  std::vector<std::string> out;
  for (size_t k = 0; k < s.size();) {
    const auto c = static_cast<unsigned char>(s[k]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, s.size() - k);
    out.emplace_back(s.substr(k, n));
    k += n;
  }
  return out;
}

Array Value::Iterate() const {
  switch (kind_) {
    case Kind::kArray: return *arr_;
    case Kind::kObject: {
      Array keys;
      for (const auto& [k, v] : *obj_) keys.push_back(Str(k));
      return keys;
    }
    case Kind::kString: {
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
  if (a.is_number() && b.is_number()) return a.AsDouble() == b.AsDouble();
  if (a.is_bool() && b.is_number()) return (a.b() ? 1.0 : 0.0) == b.AsDouble();
  if (b.is_bool() && a.is_number()) return Equal(b, a);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return a.b() == b.b();
    case Value::Kind::kString: return a.s() == b.s();
    case Value::Kind::kArray: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t k = 0; k < a.list().size(); ++k)
        if (!Equal(a.list()[k], b.list()[k])) return false;
      return true;
    }
    case Value::Kind::kObject: {
      if (a.dict().size() != b.dict().size()) return false;
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
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) return a.AsDouble() < b.AsDouble();
  if (a.is_string() && b.is_string()) return a.s() < b.s();
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list().size(), b.list().size());
    for (size_t k = 0; k < n; ++k) {
      if (Less(a.list()[k], b.list()[k], line)) return true;
      if (Less(b.list()[k], a.list()[k], line)) return false;
    }
    return a.list().size() < b.list().size();
  }
  Fail(std::string("cannot compare ") + a.TypeName() + " with " + b.TypeName(), line);
}

std::string ToJsonText(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep) {
  std::string out;
  DumpJson(v, indent, 0, item_sep, key_sep, &out);
  return out;
}

}  // namespace shard::jinja
