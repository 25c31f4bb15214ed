// Jinja filters and tests (the chat-template subset; HF's tojson).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "shard/data/jinja/arithmetic.h"
#include "shard/data/jinja/budget.h"
#include "shard/data/jinja/builtins.h"

namespace shard::jinja {
namespace {

const std::string& Need(const Value& v, const char* filter) {
  if (!v.is_string()) Fail(std::string("filter ") + filter + " expects a string, got " + v.TypeName());
  return v.s();
}

int64_t Length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(CodePointCount(v.s()));
  if (v.is_list()) return static_cast<int64_t>(v.list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict().size());
  if (v.undefined()) return 0;
  Fail(std::string("length of a value of type ") + v.TypeName());
}

// The value of attribute path "a.b" (or an integer index) of v.
Value Attribute(const Value& v, const Value& attr) {
  if (attr.is_int()) return GetItem(v, attr);
  if (!attr.is_string()) Fail("attribute must be a string");
  Value cur = v;
  size_t k = 0;
  const std::string& path = attr.s();
  while (true) {
    const size_t dot = path.find('.', k);
    cur = GetItem(cur, Value::Str(path.substr(k, dot == std::string::npos ? std::string::npos : dot - k)));
    if (dot == std::string::npos) return cur;
    k = dot + 1;
  }
}

// The arguments after position `skip` (for select's test args).
CallArgs Rest(const CallArgs& a, size_t skip) {
  CallArgs r;
  for (size_t k = skip; k < a.pos.size(); ++k) r.pos.push_back(a.pos[k]);
  return r;
}

Value SelectFilter(const std::string& name, const Value& v, CallArgs& a) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_if = name == "select" || name == "selectattr";
  Array out;
  const size_t test_pos = by_attr ? 1 : 0;
  const Value test = a.Get(test_pos, "");
  CallArgs targs = Rest(a, test_pos + 1);
  for (const Value& item : v.Iterate()) {
    const Value x = by_attr ? Attribute(item, a.Get(0, "attribute")) : item;
    bool ok;
    if (test.undefined()) ok = x.Truthy();
    else ok = ApplyTest(Need(test, name.c_str()), x, targs);
    if (ok == keep_if) out.push_back(item);
  }
  return Value::List(std::move(out));
}

Value ToJsonFilter(const Value& v, CallArgs& a) {
  const Value indent = a.Get(0, "indent");
  if (!indent.undefined() && !indent.none() && !indent.is_int())
    Fail(std::string("tojson: indent must be an integer, not ") + indent.TypeName());
  // json.dumps: any integer indent breaks lines ("" * -1 is no indentation).
  const int64_t width = indent.is_int() ? std::max<int64_t>(0, indent.i()) : -1;
  std::string item_sep = width >= 0 ? "," : ", ", key_sep = ": ";
  const Value seps = a.Get(99, "separators");
  if (seps.is_list() && seps.list().size() == 2) {
    item_sep = Need(seps.list()[0], "tojson separators");
    key_sep = Need(seps.list()[1], "tojson separators");
  }
  if (a.Get(99, "sort_keys").Truthy()) Fail("tojson(sort_keys=true) is not supported");
  return Value::Str(ToJsonText(v, width, item_sep, key_sep));
}

Value SortFilter(const Value& v, CallArgs& a) {
  Array items = v.Iterate();
  const bool reverse = a.Get(0, "reverse").Truthy();
  const Value attr = a.Get(2, "attribute");
  auto key = [&](const Value& x) { return attr.undefined() ? x : Attribute(x, attr); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) { return Less(key(x), key(y), 0); });
  if (reverse) std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

Value IndentFilter(const Value& v, CallArgs& a) {
  const Value w = a.Get(0, "width");
  if (!w.undefined() && !w.is_string() && !w.is_int())
    Fail(std::string("filter indent: width must be an integer or a string, not ") + w.TypeName());
  const std::string& s = Need(v, "indent");
  // Python's " " * width: nothing for a width below 1.
  const int64_t spaces = w.is_int() ? std::max<int64_t>(0, w.i()) : 4;
  const uint64_t pad_size = w.is_string() ? w.s().size() : static_cast<uint64_t>(spaces);
  const uint64_t lines = 1 + static_cast<uint64_t>(std::count(s.begin(), s.end(), '\n'));
  const uint64_t growth = MulSize(pad_size, lines);
  CheckValueSize(growth == UINT64_MAX ? growth : s.size() + growth, "filter indent");
  const std::string pad = w.is_string() ? w.s() : std::string(static_cast<size_t>(pad_size), ' ');
  const bool first = a.Get(1, "first").Truthy();
  const bool blank = a.Get(2, "blank").Truthy();
  std::string out;
  size_t k = 0;
  bool line_start = first;
  while (k <= s.size()) {
    size_t e = s.find('\n', k);
    const std::string line = s.substr(k, e == std::string::npos ? std::string::npos : e - k);
    if (line_start && (blank || !line.empty())) out += pad;
    out += line;
    if (e == std::string::npos) break;
    out += '\n';
    k = e + 1;
    line_start = true;
  }
  return Value::Str(out);
}

Value JoinFilter(const Value& v, CallArgs& a) {
  const Value sep = a.Get(0, "d");
  const Value attr = a.Get(1, "attribute");
  std::string out;
  Array items = v.Iterate();
  for (size_t k = 0; k < items.size(); ++k) {
    if (k && sep.is_string()) out += sep.s();
    out += (attr.undefined() ? items[k] : Attribute(items[k], attr)).Str();
    CheckValueSize(out.size(), "filter join");
  }
  return Value::Str(out);
}

Value ItemsFilter(const Value& v) {
  if (v.undefined()) return Value::List();
  if (!v.is_dict()) Fail(std::string("filter items expects a dict, got ") + v.TypeName());
  Array out;
  for (const auto& [k, x] : v.dict()) out.push_back(Value::List({Value::Str(k), x}));
  return Value::List(std::move(out));
}

Value IntFilter(const Value& v, CallArgs& a) {
  if (v.is_int()) return v;
  if (v.is_bool()) return Value::Int(v.b() ? 1 : 0);
  if (v.is_number()) return Value::Int(FloatToInt(v.AsDouble()));
  if (v.is_string()) {
    char* end = nullptr;
    const std::string s = PyStrip(v.s(), "", true, true);
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size()) {
      if (errno == ERANGE) Fail("filter int: " + s + " does not fit in 64 bits");
      return Value::Int(i);
    }
  }
  const Value d = a.Get(0, "default");
  return d.undefined() ? Value::Int(0) : d;
}

Value FloatFilter(const Value& v, CallArgs& a) {
  if (v.is_number() || v.is_bool()) return Value::Float(v.AsDouble());
  if (v.is_string()) {
    char* end = nullptr;
    const double f = std::strtod(v.s().c_str(), &end);
    if (!v.s().empty() && end == v.s().c_str() + v.s().size()) return Value::Float(f);
  }
  const Value d = a.Get(0, "default");
  return d.undefined() ? Value::Float(0) : d;
}

Value ReverseFilter(const Value& v) {
  if (v.is_string()) return Slice(v, Value(), Value(), Value::Int(-1));
  Array items = v.Iterate();
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

Value UniqueFilter(const Value& v) {
  Array out;
  for (const Value& x : v.Iterate())
    if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return Equal(x, y); })) out.push_back(x);
  return Value::List(std::move(out));
}

// map(attribute=...) or map('filter', args...): the filter applied to each item.
Value MapFilter(const Value& v, CallArgs& a) {
  Array out;
  const Value attr = a.Get(99, "attribute");
  const Value dflt = a.Get(99, "default");
  CallArgs fargs = Rest(a, 1);
  for (const Value& x : v.Iterate()) {
    if (!attr.undefined()) {
      Value y = Attribute(x, attr);
      out.push_back(y.undefined() && !dflt.undefined() ? dflt : y);
    } else {
      out.push_back(ApplyFilter(Need(a.Get(0, ""), "map"), x, fargs));
    }
  }
  return Value::List(std::move(out));
}

Value DictsortFilter(const Value& v) {
  if (!v.is_dict()) Fail("filter dictsort expects a dict");
  Object items = v.dict();
  std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  Array out;
  for (auto& [k, x] : items) out.push_back(Value::List({Value::Str(k), x}));
  return Value::List(std::move(out));
}

}  // namespace

Value ApplyFilter(const std::string& name, const Value& v, CallArgs& a) {
  if (name == "trim") {
    const Value c = a.Get(0, "chars");
    return Value::Str(PyStrip(Need(v, "trim"), c.is_string() ? c.s() : "", true, true));
  }
  if (name == "tojson") return ToJsonFilter(v, a);
  if (name == "length" || name == "count") return Value::Int(Length(v));
  if (name == "default" || name == "d") {
    const bool use = v.undefined() || (a.Get(1, "boolean").Truthy() && !v.Truthy());
    if (!use) return v;
    const Value d = a.Get(0, "default_value");
    return d.undefined() ? Value::Str("") : d;
  }
  if (name == "join") return JoinFilter(v, a);
  if (name == "items") return ItemsFilter(v);
  if (name == "upper") return Value::Str(PyUpper(Need(v, "upper")));
  if (name == "lower") return Value::Str(PyLower(Need(v, "lower")));
  if (name == "capitalize") return Value::Str(PyCapitalize(Need(v, "capitalize")));
  if (name == "title") return Value::Str(PyTitle(Need(v, "title")));
  if (name == "replace") {
    const Value n = a.Get(2, "count");
    return Value::Str(PyReplace(Need(v, "replace"), Need(a.Get(0, "old"), "replace"), Need(a.Get(1, "new"), "replace"),
                                n.is_int() ? n.i() : -1));
  }
  if (name == "first" || name == "last") {
    Array items = v.Iterate();
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::List(v.Iterate());
  if (name == "string") return Value::Str(v.Str());
  if (name == "safe" || name == "e" || name == "escape") {
    if (name != "safe") Fail("filter " + name + " (HTML escaping) is not supported");
    return v;
  }
  if (name == "int") return IntFilter(v, a);
  if (name == "float") return FloatFilter(v, a);
  if (name == "abs") return Abs(v);
  if (name == "reverse") return ReverseFilter(v);
  if (name == "sort") return SortFilter(v, a);
  if (name == "unique") return UniqueFilter(v);
  if (name == "map") return MapFilter(v, a);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") return SelectFilter(name, v, a);
  if (name == "indent") return IndentFilter(v, a);
  if (name == "dictsort") return DictsortFilter(v);
  Fail("unsupported filter '" + name + "' (outside the chat-template subset of Jinja)");
}

bool ApplyTest(const std::string& name, const Value& v, CallArgs& a) {
  using K = Value::Kind;
  const Value arg = a.Get(0, "");
  if (name == "defined") return !v.undefined();
  if (name == "undefined") return v.undefined();
  if (name == "none") return v.none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.b();
  if (name == "false") return v.is_bool() && !v.b();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.is_callable();
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return Equal(v, arg);
  if (name == "ne" || name == "!=") return !Equal(v, arg);
  if (name == "lt" || name == "lessthan" || name == "<") return Less(v, arg, 0);
  if (name == "gt" || name == "greaterthan" || name == ">") return Less(arg, v, 0);
  if (name == "le" || name == "<=") return !Less(arg, v, 0);
  if (name == "ge" || name == ">=") return !Less(v, arg, 0);
  if (name == "odd" || name == "even") {
    if (!v.is_int()) Fail("test " + name + " expects an integer");
    return (v.i() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby")  // (% -1 is left out: INT64_MIN % -1 traps)
    return v.is_int() && arg.is_int() && arg.i() != 0 && (arg.i() == -1 || v.i() % arg.i() == 0);
  if (name == "lower") return v.is_string() && PyLower(v.s()) == v.s();
  if (name == "upper") return v.is_string() && PyUpper(v.s()) == v.s();
  if (name == "in") {
    if (arg.is_string()) {
      if (!v.is_string()) Fail(std::string("'in <string>' requires a string on the left, not ") + v.TypeName());
      ChargeBytes(arg.s().size());
      return arg.s().find(v.s()) != std::string::npos;
    }
    if (arg.is_list()) return std::any_of(arg.list().begin(), arg.list().end(), [&](const Value& x) { return Equal(v, x); });
    if (arg.is_dict()) return v.is_string() && arg.Find(v.s()) != nullptr;
    if (arg.undefined() || arg.none()) return false;
    Fail(std::string("'in' needs a string, list or dict on the right, not ") + arg.TypeName());
  }
  Fail("unsupported test '" + name + "' (outside the chat-template subset of Jinja)");
}

}  // namespace shard::jinja
