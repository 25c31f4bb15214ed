// Reading one of the job file's closed sets through its table
// (enum_names.h): an absent key keeps the default, a bad value is refused
// as "FILE: KEY: 'x' is not one of: a, b, c". Shared by every section mapper.
#pragma once

#include <cstddef>
#include <string>

#include "shard/common/status.h"
#include "shard/common/yaml_config.h"
#include "shard/spec/enum_names.h"

namespace shard {

template <typename E, size_t N>
Status GetEnum(YamlMap& m, const std::string& key, const EnumName<E> (&table)[N], E* out) {
  if (!m.Has(key)) return OkStatus();
  std::string text;
  RETURN_IF_ERROR(m.Get(key, &text));
  auto v = ParseEnum(table, text);
  if (!v.ok()) return InvalidArgument(m.Where(key) + ": " + v.status().message());
  *out = *v;
  return OkStatus();
}

}  // namespace shard
