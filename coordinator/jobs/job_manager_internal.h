// Small helpers shared by the JobManager's source files (not an API).
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include "shard/common/format_number.h"

namespace shardd::internal {

inline std::string Fmt(double v, const char* f = "%.4f") { return shard::FormatNumber(f, v); }

// Why a read-only JobManager (JobManagerOptions::read_only) refuses a change.
inline constexpr const char* kReadOnly =
    "this is a read-only view of the state dir (no coordinator is running): start shardd";

// Resolves p against base unless it is absolute.
inline std::string Resolve(const std::string& base, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute()) return p;
  return (std::filesystem::path(base) / p).lexically_normal().string();
}

}  // namespace shardd::internal
