// Reading a JSON file that must hold one object (config.json,
// generation_config.json, adapter_config.json, ...): what is wrong is named —
// the parser's own reason and place for text that is not JSON (a number
// too large such as 1e400 is a parse error, not "not a JSON object"), the
// value's type for JSON that is not an object. Header-only; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "shard/common/status.h"

namespace shard {

// `source` names the file in the error. Json: nlohmann::json or ordered_json.
template <typename Json = nlohmann::json>
StatusOr<Json> ParseJsonObject(const std::string& text, const std::string& source) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // "[json.exception.out_of_range.406] number overflow parsing '1e400'": the reason without the tag.
    std::string why = e.what();
    if (!why.empty() && why[0] == '[' && why.find("] ") != std::string::npos) why = why.substr(why.find("] ") + 2);
    return InvalidArgument(source + ": not valid JSON: " + why);
  }
  if (!j.is_object()) return InvalidArgument(source + ": not a JSON object (a " + std::string(j.type_name()) + ")");
  return j;
}

}  // namespace shard
