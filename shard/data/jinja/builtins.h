// Jinja's filters, tests and the Python methods templates call on strings,
// dicts and lists (the subset real chat templates use), plus the global
// functions (range, namespace, raise_exception, strftime_now).
//
// Each throws JinjaError naming the filter/test/method when it is unknown or
// its arguments are wrong; the interpreter adds the line.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "shard/data/jinja/value.h"

namespace shard::jinja {

Value ApplyFilter(const std::string& name, const Value& v, CallArgs& args);
bool ApplyTest(const std::string& name, const Value& v, CallArgs& args);
// obj.name: a dict item, or a bound method of a string, dict or list;
// Undefined when there is neither (as Jinja).
Value GetAttr(const Value& obj, const std::string& name);
// obj[key] for lists, strings (by code point) and dicts; Undefined when absent.
Value GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] with Python's rules (null Values: omitted).
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python's str methods both filters and methods use. chars empty: whitespace.
std::string PyStrip(const std::string& s, const std::string& chars, bool left, bool right);
std::string PyUpper(const std::string& s);
std::string PyLower(const std::string& s);
std::string PyTitle(const std::string& s);
std::string PyCapitalize(const std::string& s);
std::string PyReplace(const std::string& s, const std::string& from, const std::string& to, int64_t count);

// `now` is "YYYY-MM-DD HH:MM:SS" (UTC) used by strftime_now; empty: the real clock.
Object Globals(const std::string& now);

}  // namespace shard::jinja
