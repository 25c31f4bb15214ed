// Attribute and item access, slicing, Python's str/dict/list methods, and the
// global functions.
#include <unicode/unistr.h>

#include <algorithm>
#include <ctime>

#include "shard/data/jinja/budget.h"
#include "shard/data/jinja/builtins.h"

namespace shard::jinja {
namespace {

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string ArgString(const Value& v, const char* what) {
  if (!v.is_string()) Fail(std::string(what) + " must be a string, not " + v.TypeName());
  return v.s();
}

int64_t ArgInt(const Value& v, int64_t fallback) {
  if (v.undefined() || v.none()) return fallback;
  if (!v.is_int()) Fail(std::string("expected an integer argument, not ") + v.TypeName());
  return v.i();
}

// Adds one item to a list being built, within the size of one value.
void Push(Array* out, Value v, const char* what) {
  CheckValueSize(MulSize(out->size() + 1, sizeof(Value)), what);
  out->push_back(std::move(v));
}

Value Split(const std::string& s, const Value& sep_v, int64_t maxsplit) {
  ChargeBytes(s.size());
  Array out;
  if (sep_v.undefined() || sep_v.none()) {  // runs of whitespace, no empty items
    size_t k = 0;
    while (k < s.size()) {
      while (k < s.size() && IsWs(s[k])) ++k;
      if (k >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest = s.substr(k);
        while (!rest.empty() && IsWs(rest.back())) rest.pop_back();
        Push(&out, Value::Str(rest), "split");
        break;
      }
      size_t e = k;
      while (e < s.size() && !IsWs(s[e])) ++e;
      Push(&out, Value::Str(s.substr(k, e - k)), "split");
      k = e;
    }
    return Value::List(std::move(out));
  }
  const std::string sep = ArgString(sep_v, "split's separator");
  if (sep.empty()) Fail("split: empty separator");
  size_t k = 0;
  while (true) {
    size_t f = s.find(sep, k);
    if (f == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      Push(&out, Value::Str(s.substr(k)), "split");
      break;
    }
    Push(&out, Value::Str(s.substr(k, f - k)), "split");
    k = f + sep.size();
  }
  return Value::List(std::move(out));
}

bool PrefixTest(const std::string& s, const Value& arg, bool start) {
  auto one = [&](const Value& p) {
    const std::string x = ArgString(p, start ? "startswith's argument" : "endswith's argument");
    if (x.size() > s.size()) return false;
    return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (arg.is_list()) return std::any_of(arg.list().begin(), arg.list().end(), one);
  return one(arg);
}

// str.format with {} and {N} fields and {{ }} escapes (no format specs).
std::string Format(const std::string& f, const CallArgs& a) {
  std::string out;
  size_t next = 0;
  for (size_t k = 0; k < f.size(); ++k) {
    if (f[k] == '{' && k + 1 < f.size() && f[k + 1] == '{') { out += '{'; ++k; continue; }
    if (f[k] == '}' && k + 1 < f.size() && f[k + 1] == '}') { out += '}'; ++k; continue; }
    if (f[k] != '{') { out += f[k]; continue; }
    const size_t close = f.find('}', k);
    if (close == std::string::npos) Fail("format: unmatched '{'");
    const std::string field = f.substr(k + 1, close - k - 1);
    if (field.find_first_of(":!") != std::string::npos)
      Fail("format: conversions and format specs ({" + field + "}) are not supported");
    Value v;
    if (field.empty()) {
      v = next < a.pos.size() ? a.pos[next++] : Value();
    } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
      // An index past the arguments (however many digits) names no argument.
      size_t index = 0;
      for (char c : field) index = index > a.pos.size() ? index : index * 10 + static_cast<size_t>(c - '0');
      v = index < a.pos.size() ? a.pos[index] : Value();
    } else {
      v = a.Get(SIZE_MAX, field);
    }
    if (v.undefined()) Fail("format: no argument for {" + field + "}");
    out += v.Str();
    CheckValueSize(out.size(), "format");
    k = close;
  }
  return out;
}

Value StringMethod(const std::string& s, const std::string& name) {
  static const char* kNames[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "upper", "lower",
                                 "title", "capitalize", "replace", "format", "join", "find", "count", "isdigit",
                                 "isspace", "splitlines"};
  if (std::none_of(std::begin(kNames), std::end(kNames), [&](const char* n) { return name == n; })) return Value();
  return Value::Callable(name, [s, name](CallArgs& a) -> Value {
    if (name == "startswith" || name == "endswith") return Value::Bool(PrefixTest(s, a.Get(0, "prefix"), name == "startswith"));
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value c = a.Get(0, "chars");
      const std::string chars = c.undefined() || c.none() ? "" : ArgString(c, "strip's argument");
      return Value::Str(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "split") return Split(s, a.Get(0, "sep"), ArgInt(a.Get(1, "maxsplit"), -1));
    if (name == "splitlines") return Split(s, Value::Str("\n"), -1);
    if (name == "upper") return Value::Str(PyUpper(s));
    if (name == "lower") return Value::Str(PyLower(s));
    if (name == "title") return Value::Str(PyTitle(s));
    if (name == "capitalize") return Value::Str(PyCapitalize(s));
    if (name == "replace")
      return Value::Str(PyReplace(s, ArgString(a.Get(0, "old"), "replace's old"), ArgString(a.Get(1, "new"), "replace's new"),
                                  ArgInt(a.Get(2, "count"), -1)));
    if (name == "format") return Value::Str(Format(s, a));
    if (name == "join") {
      std::string r;
      Array items = a.Get(0, "iterable").Iterate();
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) r += s;
        r += items[k].Str();
        CheckValueSize(r.size(), "join");
      }
      return Value::Str(r);
    }
    if (name == "find") {
      ChargeBytes(s.size());
      const size_t f = s.find(ArgString(a.Get(0, "sub"), "find's argument"));
      return Value::Int(f == std::string::npos ? -1 : static_cast<int64_t>(CodePointCount(std::string_view(s).substr(0, f))));
    }
    if (name == "count") {
      const std::string sub = ArgString(a.Get(0, "sub"), "count's argument");
      // Python: the empty string occurs before each code point and at the end.
      if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(s)) + 1);
      ChargeBytes(s.size());
      int64_t n = 0;
      for (size_t f = s.find(sub); f != std::string::npos; f = s.find(sub, f + sub.size())) ++n;
      return Value::Int(n);
    }
    if (name == "isdigit") return Value::Bool(!s.empty() && std::all_of(s.begin(), s.end(), ::isdigit));
    return Value::Bool(!s.empty() && std::all_of(s.begin(), s.end(), IsWs));  // isspace
  });
}

Value DictMethod(const Value& d, const std::string& name) {
  if (name == "get")
    return Value::Callable(name, [d](CallArgs& a) {
      const Value k = a.Get(0, "key");
      const Value* v = k.is_string() ? d.Find(k.s()) : nullptr;
      if (v) return *v;
      const Value dflt = a.Get(1, "default");
      return dflt.undefined() ? Value::None() : dflt;
    });
  if (name == "items" || name == "keys" || name == "values")
    return Value::Callable(name, [d, name](CallArgs&) {
      Array out;
      for (const auto& [k, v] : d.dict()) {
        if (name == "items") out.push_back(Value::List({Value::Str(k), v}));
        else out.push_back(name == "keys" ? Value::Str(k) : v);
      }
      return Value::List(std::move(out));
    });
  return Value();
}

// Python's slice.indices(n) for a given start or stop: from the end when
// negative, then clamped to [0, n] (step > 0) or [-1, n - 1] (step < 0).
int64_t SliceBound(const Value& v, int64_t n, bool neg_step) {
  const int64_t i = ArgInt(v, 0);
  if (i < 0) return i < -n ? (neg_step ? -1 : 0) : i + n;
  return i >= n ? (neg_step ? n - 1 : n) : i;
}

}  // namespace

std::string PyStrip(const std::string& s, const std::string& chars, bool left, bool right) {
  auto strip_it = [&](char c) { return chars.empty() ? IsWs(c) : chars.find(c) != std::string::npos; };
  size_t b = 0, e = s.size();
  if (left) while (b < e && strip_it(s[b])) ++b;
  if (right) while (e > b && strip_it(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string PyUpper(const std::string& s) {
  std::string out;
  icu::UnicodeString::fromUTF8(s).toUpper().toUTF8String(out);
  return out;
}

std::string PyLower(const std::string& s) {
  std::string out;
  icu::UnicodeString::fromUTF8(s).toLower().toUTF8String(out);
  return out;
}

// Python's str.title: a letter after a non-letter starts a word (ASCII letters;
// other bytes pass through).
std::string PyTitle(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const bool letter = std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (letter) c = static_cast<char>(prev_letter ? std::tolower(c) : std::toupper(c));
    prev_letter = letter;
  }
  return out;
}

std::string PyCapitalize(const std::string& s) {
  std::string out = PyLower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string PyReplace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  ChargeBytes(s.size());
  std::string out;
  if (from.empty()) {  // Python: `to` before every code point and at the end ('ab'.replace('', '-') is '-a-b-')
    const std::vector<std::string> cps = CodePoints(s);
    const uint64_t n = count < 0 ? cps.size() + 1 : std::min<uint64_t>(cps.size() + 1, static_cast<uint64_t>(count));
    const uint64_t growth = MulSize(n, to.size());
    CheckValueSize(growth == UINT64_MAX ? growth : s.size() + growth, "replace");
    for (size_t i = 0; i < cps.size(); ++i) {
      if (i < n) out += to;
      out += cps[i];
    }
    if (cps.size() < n) out += to;
    return out;
  }
  size_t k = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t f = s.find(from, k);
    if (f == std::string::npos) break;
    out.append(s, k, f - k);
    out += to;
    CheckValueSize(out.size(), "replace");
    k = f + from.size();
  }
  CheckValueSize(static_cast<uint64_t>(out.size()) + (s.size() - k), "replace");
  return out + s.substr(k);
}

Value GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_string()) return StringMethod(obj.s(), name);
  if (obj.is_dict()) {
    if (!obj.is_namespace()) {
      Value m = DictMethod(obj, name);
      if (!m.undefined()) return m;
    }
    const Value* v = obj.Find(name);
    return v ? *v : Value();
  }
  if (obj.is_list() && name == "append")
    return Value::Callable(name, [obj](CallArgs& a) {
      obj.Append(a.Get(0, "item"));
      return Value::None();
    });
  return Value();
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (!key.is_string()) return Value();
    const Value* v = obj.Find(key.s());
    return v ? *v : Value();
  }
  if (obj.is_list() || obj.is_string()) {
    if (!key.is_int()) Fail(std::string("indices must be integers, not ") + key.TypeName());
    const auto n = static_cast<int64_t>(obj.is_list() ? obj.list().size() : CodePointCount(obj.s()));
    int64_t k = key.i();
    if (k < 0) k = k < -n ? -1 : k + n;
    if (k < 0 || k >= n) return Value();
    if (obj.is_list()) return obj.list()[static_cast<size_t>(k)];
    const std::string_view s(obj.s());
    const size_t b = CodePointOffset(s, static_cast<size_t>(k));
    return Value::Str(std::string(s.substr(b, CodePointOffset(s.substr(b), 1))));
  }
  return Value();
}

Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  if (!obj.is_list() && !obj.is_string()) Fail(std::string("cannot slice a value of type ") + obj.TypeName());
  const Array items = obj.Iterate();
  const auto n = static_cast<int64_t>(items.size());
  const int64_t step = ArgInt(step_v, 1);
  if (step == 0) Fail("slice step cannot be zero");
  const bool neg = step < 0;
  const int64_t b = start.undefined() || start.none() ? (neg ? n - 1 : 0) : SliceBound(start, n, neg);
  const int64_t e = stop.undefined() || stop.none() ? (neg ? -1 : n) : SliceBound(stop, n, neg);
  // The items b, b + step, ... before e, counted without ever forming an index
  // past them (a step near 2^63 would overflow).
  const __int128 span = neg ? static_cast<__int128>(b) - e : static_cast<__int128>(e) - b;
  const __int128 stride = neg ? -static_cast<__int128>(step) : static_cast<__int128>(step);
  const int64_t count = span <= 0 ? 0 : static_cast<int64_t>((span - 1) / stride + 1);
  Array out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    out.push_back(items[static_cast<size_t>(b + static_cast<int64_t>(static_cast<__int128>(i) * step))]);
  if (obj.is_list()) return Value::List(std::move(out));
  std::string s;
  for (const auto& c : out) s += c.s();
  return Value::Str(std::move(s));
}

Object Globals(const std::string& now) {
  Object g;
  g.emplace_back("range", Value::Callable("range", [](CallArgs& a) {
    int64_t start = 0, stop = 0, step = 1;
    if (a.pos.size() == 1) stop = ArgInt(a.pos[0], 0);
    else if (a.pos.size() >= 2) start = ArgInt(a.pos[0], 0), stop = ArgInt(a.pos[1], 0), step = a.pos.size() > 2 ? ArgInt(a.pos[2], 1) : 1;
    else Fail("range() needs 1 to 3 arguments");
    if (step == 0) Fail("range() step cannot be zero");
    // How many items, counted in 128 bits so no bound or step overflows.
    const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    const __int128 stride = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
    const __int128 count = span <= 0 ? 0 : (span - 1) / stride + 1;
    CheckValueSize(count > (__int128{1} << 62) ? UINT64_MAX : MulSize(static_cast<uint64_t>(count), sizeof(Value)),
                   "range()");
    Array out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i)
      out.push_back(Value::Int(static_cast<int64_t>(start + static_cast<__int128>(i) * step)));
    return Value::List(std::move(out));
  }));
  g.emplace_back("namespace", Value::Callable("namespace", [](CallArgs& a) {
    Value ns = Value::Dict({}, /*is_namespace=*/true);
    if (!a.pos.empty() && a.pos[0].is_dict())
      for (const auto& [k, v] : a.pos[0].dict()) ns.Set(k, v);
    for (auto& [k, v] : a.kw) ns.Set(k, v);
    return ns;
  }));
  g.emplace_back("dict", Value::Callable("dict", [](CallArgs& a) {
    Value d = Value::Dict();
    for (auto& [k, v] : a.kw) d.Set(k, v);
    return d;
  }));
  g.emplace_back("raise_exception", Value::Callable("raise_exception", [](CallArgs& a) -> Value {
    Fail("the template raised an error: " + a.Get(0, "message").Str());
  }));
  g.emplace_back("strftime_now", Value::Callable("strftime_now", [now](CallArgs& a) {
    std::tm tm{};
    if (now.empty()) {
      const std::time_t t = std::time(nullptr);
      gmtime_r(&t, &tm);
    } else if (!strptime(now.c_str(), "%Y-%m-%d %H:%M:%S", &tm)) {
      Fail("strftime_now: the fixed date '" + now + "' is not YYYY-MM-DD HH:MM:SS");
    }
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), ArgString(a.Get(0, "format"), "strftime_now's format").c_str(), &tm);
    return Value::Str(std::string(buf, n));
  }));
  return g;
}

}  // namespace shard::jinja
