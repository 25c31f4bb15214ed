// How values print: Python's str()/repr() for {{ v }}, and json.dumps for
// tojson. Both walk nested values with a depth guard and a size check as the
// text grows; a list or dict met again inside itself prints as [...] / {...}
// (as Python's repr does) and fails tojson (as json.dumps does).
#include <charconv>
#include <cmath>
#include <cstdio>

#include "shard/data/jinja/budget.h"
#include "shard/data/jinja/value.h"

namespace shard::jinja {
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

void QuoteRepr(const std::string& s, std::string* out) {
  CheckValueSize(out->size() + 2 * static_cast<uint64_t>(s.size()), "printing a value");
  ChargeBytes(s.size());
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  *out += q;
  for (char c : s) {
    if (c == '\\') *out += "\\\\";
    else if (c == '\n') *out += "\\n";
    else if (c == '\r') *out += "\\r";
    else if (c == '\t') *out += "\\t";
    else if (c == q) {
      *out += '\\';
      *out += q;
    }
    else *out += c;
  }
  *out += q;
}

void JsonString(const std::string& s, std::string* out) {
  CheckValueSize(out->size() + 6 * static_cast<uint64_t>(s.size()) + 2, "tojson");
  ChargeBytes(s.size());
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

// The lists and dicts being printed, outermost first: one met again is a cycle.
using Active = std::vector<const void*>;

bool Contains(const Active& active, const void* p) {
  for (const void* a : active)
    if (a == p) return true;
  return false;
}

struct JsonStyle {
  int64_t indent;  // < 0: one line
  std::string_view item_sep, key_sep;
};

void DumpJson(const Value& v, const JsonStyle& st, int64_t depth, Active* active, std::string* out) {
  DepthGuard guard;
  ChargeSteps(1);
  auto newline = [&](int64_t d) {
    if (st.indent < 0) return;
    const uint64_t pad = MulSize(static_cast<uint64_t>(st.indent), static_cast<uint64_t>(d));
    CheckValueSize(pad == UINT64_MAX ? pad : out->size() + 1 + pad, "tojson(indent=...)");
    ChargeBytes(pad);
    *out += '\n';
    out->append(pad, ' ');
  };
  auto enter = [&](const void* p) {
    if (Contains(*active, p)) Fail("tojson: circular reference detected (a list or dict that holds itself)");
    active->push_back(p);
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.b() ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.i()); return;
    case Value::Kind::kFloat: *out += FloatText(v.AsDouble()); return;
    case Value::Kind::kString: JsonString(v.s(), out); return;
    case Value::Kind::kArray: {
      if (v.list().empty()) { *out += "[]"; return; }
      enter(&v.list());
      *out += '[';
      for (size_t k = 0; k < v.list().size(); ++k) {
        if (k) *out += st.item_sep;
        newline(depth + 1);
        DumpJson(v.list()[k], st, depth + 1, active, out);
      }
      newline(depth);
      *out += ']';
      active->pop_back();
      return;
    }
    case Value::Kind::kObject: {
      if (v.dict().empty()) { *out += "{}"; return; }
      enter(&v.dict());
      *out += '{';
      for (size_t k = 0; k < v.dict().size(); ++k) {
        if (k) *out += st.item_sep;
        newline(depth + 1);
        JsonString(v.dict()[k].first, out);
        *out += st.key_sep;
        DumpJson(v.dict()[k].second, st, depth + 1, active, out);
      }
      newline(depth);
      *out += '}';
      active->pop_back();
      return;
    }
    default: Fail(std::string("tojson: a value of type ") + v.TypeName() + " is not JSON serializable");
  }
}

void AppendRepr(const Value& v, Active* active, std::string* out) {
  DepthGuard guard;
  ChargeSteps(1);
  switch (v.kind()) {
    case Value::Kind::kUndefined: return;
    case Value::Kind::kNone: *out += "None"; return;
    case Value::Kind::kBool: *out += v.b() ? "True" : "False"; return;
    case Value::Kind::kInt: *out += std::to_string(v.i()); return;
    case Value::Kind::kFloat: *out += FloatText(v.AsDouble()); return;
    case Value::Kind::kString: QuoteRepr(v.s(), out); return;
    case Value::Kind::kArray: {
      if (Contains(*active, &v.list())) {
        *out += "[...]";
        return;
      }
      active->push_back(&v.list());
      *out += '[';
      for (size_t k = 0; k < v.list().size(); ++k) {
        if (k) *out += ", ";
        AppendRepr(v.list()[k], active, out);
        CheckValueSize(out->size(), "printing a list");
      }
      *out += ']';
      active->pop_back();
      return;
    }
    case Value::Kind::kObject: {
      if (v.is_namespace()) {
        *out += "<Namespace>";
        return;
      }
      if (Contains(*active, &v.dict())) {
        *out += "{...}";
        return;
      }
      active->push_back(&v.dict());
      *out += '{';
      for (size_t k = 0; k < v.dict().size(); ++k) {
        if (k) *out += ", ";
        QuoteRepr(v.dict()[k].first, out);
        *out += ": ";
        AppendRepr(v.dict()[k].second, active, out);
        CheckValueSize(out->size(), "printing a dict");
      }
      *out += '}';
      active->pop_back();
      return;
    }
    case Value::Kind::kCallable: *out += "<function " + v.fn_name() + ">"; return;
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
  std::string out;
  Active active;
  AppendRepr(*this, &active, &out);
  return out;
}

nlohmann::ordered_json Value::ToJson() const {
  return nlohmann::ordered_json::parse(ToJsonText(*this, -1, ",", ":"));
}

std::string ToJsonText(const Value& v, int64_t indent, std::string_view item_sep, std::string_view key_sep) {
  std::string out;
  Active active;
  DumpJson(v, {indent, item_sep, key_sep}, 0, &active, &out);
  return out;
}

}  // namespace shard::jinja
