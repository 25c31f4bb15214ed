// The values a chat template computes with: Python/Jinja semantics (None,
// bools, ints, floats, strings, lists, insertion-ordered dicts, namespaces,
// callables) plus Jinja's Undefined, which is falsy, renders as "" and fails
// only when used as a number or called.
//
// Lists and dicts are shared by reference (like Python's), which is what makes
// namespace() attributes and list.append() visible across scopes. Values built
// during a render are charged to its budget (budget.h): their bytes while they
// live, and steps for building them; containers free iteratively.
//
// Inside shard/data/jinja a JinjaError (an exception) carries a message and the
// template line; template.cc turns it into a Status, so none leaves the module.
//
// Thread-safety: a Value is not synchronised; a render owns all its values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace shard::jinja {

struct JinjaError {
  std::string message;
  int line = 0;  // 0: not known yet (the interpreter fills it in)
};
[[noreturn]] void Fail(std::string message, int line = 0);

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, like a Python dict
struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kCallable };

  Value() = default;  // Undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value Str(std::string s);
  static Value List(Array items = {});
  static Value Dict(Object items = {}, bool is_namespace = false);
  static Value Callable(std::string name, Function fn);
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool undefined() const { return kind_ == Kind::kUndefined; }
  bool none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kArray; }
  bool is_dict() const { return kind_ == Kind::kObject; }
  bool is_namespace() const { return kind_ == Kind::kObject && namespace_; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool b() const { return b_; }
  int64_t i() const { return i_; }
  double AsDouble() const;  // numbers and bools; fails otherwise
  const std::string& s() const { return *s_; }
  Array& list() const { return *arr_; }
  Object& dict() const { return *obj_; }
  const std::string& fn_name() const { return fn_name_; }
  Value Call(CallArgs& args) const;

  // Dict lookup by key; nullptr when absent.
  Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value v) const;
  // list.append(v), charged to the render's budget.
  void Append(Value v) const;

  bool Truthy() const;
  // What {{ v }} prints (Python's str(): True, None, ['a', 1], {'k': 'v'};
  // a list inside itself prints as [...], as Python does).
  std::string Str() const;
  std::string Repr() const;
  const char* TypeName() const;
  nlohmann::ordered_json ToJson() const;  // fails on callables, undefined and cycles

  // The items a for loop or filter iterates: list items, dict keys, string
  // characters (UTF-8 code points); fails on anything else.
  Array Iterate() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool namespace_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<Array> arr_;
  std::shared_ptr<Object> obj_;
  std::shared_ptr<Function> fn_;
  std::string fn_name_;
};

// The arguments of a call: positional, then keyword (name=value).
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Argument `index` (or keyword `name`); Undefined when neither was given.
  Value Get(size_t index, std::string_view name) const;
};

// Python == and < (numbers across int/float, strings, lists elementwise).
bool Equal(const Value& a, const Value& b);
bool Less(const Value& a, const Value& b, int line);

// Python json.dumps(v, ensure_ascii=False, indent=indent, separators=...): HF's tojson.
// indent < 0: one line. A value that holds itself fails ("circular reference").
std::string ToJsonText(const Value& v, int64_t indent, std::string_view item_sep, std::string_view key_sep);

// UTF-8 helpers: the code points of s, each as its own string; how many there
// are; the byte offset where code point `n` starts (s.size() past the end).
std::vector<std::string> CodePoints(std::string_view s);
size_t CodePointCount(std::string_view s);
size_t CodePointOffset(std::string_view s, size_t n);

}  // namespace shard::jinja
