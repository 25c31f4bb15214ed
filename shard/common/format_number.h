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

}  // namespace shard
