// One number as text through a printf conversion, for messages and keys.
#pragma once

#include <cstdio>
#include <string>

namespace shard {

// `fmt` holds exactly one conversion for a double ("%g", "%.3f", "%.1f s");
// the result is cut at 63 characters.
inline std::string FormatNumber(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// A number echoed back in an error: at most 6 significant digits, so a typo
// such as 1e300 reads "1e+300" (std::to_string prints all 301 digits).
inline std::string BoundedNumber(double v) { return FormatNumber("%.6g", v); }

}  // namespace shard
