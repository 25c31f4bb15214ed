// Integers from JSON files shardd did not write (or that were edited by hand):
// nlohmann's get<Int>() converts a float such as 1e300 with a plain cast
// (undefined behaviour) and wraps an out-of-range integer silently. JsonInt<T>
// accepts only an integer exactly representable in T and otherwise throws
// nlohmann's type_error, which every reader already turns into a one-line
// error naming its file.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

namespace shard {

// `key` (optional) names the field in the error.
template <typename T>
T JsonInt(const nlohmann::json& v, const char* key = nullptr) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (std::in_range<T>(i)) return static_cast<T>(i);
  }
  const std::string where = key ? std::string(key) + ": " : "";
  throw nlohmann::json::type_error::create(302,
                                           where + "expected an integer from " +
                                               std::to_string(std::numeric_limits<T>::min()) + " to " +
                                               std::to_string(std::numeric_limits<T>::max()) + ", got " + v.dump(),
                                           nullptr);
}

// An optional integer field of the object `obj`: `fallback` when absent or
// null, else JsonInt. (nlohmann's value(key, fallback) casts like get<Int>().)
template <typename T>
T JsonIntOr(const nlohmann::json& obj, const char* key, T fallback) {
  if (!obj.is_object()) throw nlohmann::json::type_error::create(302, "expected an object, got " + obj.dump(), nullptr);
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  return JsonInt<T>(*it, key);
}

}  // namespace shard
