#include "shard/data/jinja/arithmetic.h"

#include <cmath>

namespace shard::jinja {
namespace {

[[noreturn]] void Overflow(const std::string& op, int64_t p, int64_t q) {
  Fail("integer overflow: " + std::to_string(p) + " " + op + " " + std::to_string(q) +
       " does not fit in 64 bits (template integers are int64)");
}

int64_t Power(int64_t base, int64_t exp) {
  int64_t result = 1, b = base;
  for (int64_t e = exp; e > 0; e >>= 1) {
    if ((e & 1) && __builtin_mul_overflow(result, b, &result)) Overflow("**", base, exp);
    if (e > 1 && __builtin_mul_overflow(b, b, &b)) Overflow("**", base, exp);
  }
  return result;
}

Value IntArithmetic(const std::string& op, int64_t p, int64_t q) {
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(p, q, &r)) Overflow(op, p, q);
    return Value::Int(r);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(p, q, &r)) Overflow(op, p, q);
    return Value::Int(r);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(p, q, &r)) Overflow(op, p, q);
    return Value::Int(r);
  }
  if (op == "//" || op == "%") {
    if (q == 0) Fail("integer division or modulo by zero");
    // INT64_MIN // -1 overflows (and traps in hardware); INT64_MIN % -1 is 0.
    if (q == -1) {
      if (op == "%") return Value::Int(0);
      if (p == INT64_MIN) Overflow(op, p, q);
      return Value::Int(-p);
    }
    int64_t quot = p / q, rem = p % q;
    if (rem != 0 && ((rem < 0) != (q < 0))) {
      --quot;
      rem += q;
    }
    return Value::Int(op == "//" ? quot : rem);
  }
  if (op == "**") {
    if (q < 0) return Value::Float(std::pow(static_cast<double>(p), static_cast<double>(q)));
    return Value::Int(Power(p, q));
  }
  Fail("unknown operator " + op);
}

}  // namespace

Value Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (!(a.is_number() || a.is_bool()) || !(b.is_number() || b.is_bool()))
    Fail("unsupported operand types for " + op + ": " + a.TypeName() + " and " + b.TypeName());
  const bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
  if (ints && op != "/") {
    auto as_int = [](const Value& v) { return v.is_bool() ? int64_t{v.b()} : v.i(); };
    return IntArithmetic(op, as_int(a), as_int(b));
  }
  const double x = a.AsDouble(), y = b.AsDouble();
  if ((op == "/" || op == "//" || op == "%") && y == 0) Fail("division by zero");
  if (op == "/") return Value::Float(x / y);
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "//") return Value::Float(std::floor(x / y));
  if (op == "%") {
    const double m = std::fmod(x, y);
    return Value::Float(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
  }
  if (op == "**") return Value::Float(std::pow(x, y));
  Fail("unknown operator " + op);
}

Value Negate(const Value& v) {
  if (v.is_int()) {
    if (v.i() == INT64_MIN) Fail("integer overflow: -(" + std::to_string(v.i()) + ") does not fit in 64 bits");
    return Value::Int(-v.i());
  }
  if (v.is_bool()) return Value::Int(v.b() ? -1 : 0);
  return Value::Float(-v.AsDouble());
}

Value Abs(const Value& v) {
  if (v.is_int()) return v.i() < 0 ? Negate(v) : v;
  if (v.is_bool()) return Value::Int(v.b() ? 1 : 0);
  return Value::Float(std::fabs(v.AsDouble()));
}

int64_t FloatToInt(double f) {
  // Every double in [-2^63, 2^63) truncates into int64 (both ends are exact doubles); nan compares false.
  if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
    Fail("cannot convert the float " + std::to_string(f) + " to a 64-bit integer");
  return static_cast<int64_t>(f);
}

}  // namespace shard::jinja
