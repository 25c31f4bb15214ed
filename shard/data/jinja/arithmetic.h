// Python's arithmetic on the template's numbers: int64 integers, checked (an
// overflow is an error, where Python would switch to a big integer: `2 ** 64`,
// `9223372036854775807 * 2`), floats as doubles, bools as 0/1; floor division
// and modulo round toward negative infinity; `**` with a negative integer
// exponent gives a float.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "shard/data/jinja/value.h"

namespace shard::jinja {

// a op b for op in + - * / // % ** (numbers and bools only; fails otherwise).
Value Arithmetic(const std::string& op, const Value& a, const Value& b);
// -v and +v.
Value Negate(const Value& v);
// abs(v).
Value Abs(const Value& v);
// int(f) for a float (fails for nan, inf and floats past int64).
int64_t FloatToInt(double f);

}  // namespace shard::jinja
