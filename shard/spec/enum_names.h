// One table per closed set of the job file (strategy, precision, launcher,
// ...): the enum value and its spelling, read by the parser, the error
// message ("is not one of: ...") and every printer, so the allowed values are
// written once. Pure; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "shard/common/status.h"

namespace shard {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// "a, b, c": the allowed spellings, for error messages.
template <typename E, size_t N>
std::string EnumChoices(const EnumName<E> (&table)[N]) {
  std::string s;
  for (size_t i = 0; i < N; ++i) s += (i > 0 ? ", " : "") + std::string(table[i].name);
  return s;
}

// INVALID_ARGUMENT "'x' is not one of: a, b, c" (the caller adds the key).
template <typename E, size_t N>
StatusOr<E> ParseEnum(const EnumName<E> (&table)[N], std::string_view text) {
  for (const auto& e : table)
    if (text == e.name) return e.value;
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on
  // "'" + std::string(text) + ... here.
  std::string message = "'";
  message.append(text);
  message += "' is not one of: ";
  message += EnumChoices(table);
  return InvalidArgument(message);
}

template <typename E, size_t N>
const char* EnumToName(const EnumName<E> (&table)[N], E value) {
  for (const auto& e : table)
    if (e.value == value) return e.name;
  return "?";
}

}  // namespace shard
