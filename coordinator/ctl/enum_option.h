// A shardctl option over one of the job file's closed sets, read through the
// same table the job file uses (shard/spec/enum_names.h), so a flag and its
// key accept the same spellings and refuse the rest with the same list.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <map>
#include <string>

#include "shard/spec/enum_names.h"

namespace shardctl {

template <typename E, size_t N>
CLI::Option* AddEnumOption(CLI::App* app, const std::string& name, E* out, const shard::EnumName<E> (&table)[N],
                           const std::string& help) {
  // A validator that names the choices the way the job file does; the
  // callback then only stores what the validator accepted.
  CLI::Validator one_of(
      [&table](std::string& text) -> std::string {
        auto v = shard::ParseEnum(table, text);
        return v.ok() ? std::string() : v.status().message();
      },
      shard::EnumChoices(table));
  return app
      ->add_option_function<std::string>(
          name, [out, &table](const std::string& text) { *out = *shard::ParseEnum(table, text); }, help)
      ->check(one_of)
      ->type_name("NAME")
      ->default_str(shard::EnumToName(table, *out));
}

}  // namespace shardctl
