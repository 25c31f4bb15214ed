#include "shard/data/sft_jsonl.h"

#include <nlohmann/json.hpp>

namespace shard {
namespace {
using json = nlohmann::json;

std::string TypeName(const json& v) { return v.type_name(); }
}  // namespace

StatusOr<std::vector<Message>> ParseSftRow(std::string_view line) {
  json row = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (row.is_discarded()) {
    // Parse again for the message (the discarded value carries none).
    try {
      json unused = json::parse(line.begin(), line.end());
      (void)unused;
    } catch (const json::exception& e) {
      // parse_error, or out_of_range for a number too large for a double
      // (1e999): either way the row is refused, never thrown past here.
      std::string what = e.what();
      size_t k = what.find("parse error");
      if (k == std::string::npos) k = what.find("number overflow");
      return InvalidArgument("not valid JSON: " + (k == std::string::npos ? what : what.substr(k)));
    }
    return InvalidArgument("not valid JSON");
  }
  if (!row.is_object()) return InvalidArgument("a row must be a JSON object, not " + TypeName(row));
  std::vector<Message> out;
  if (row.contains("messages")) {
    const json& ms = row["messages"];
    if (!ms.is_array()) return InvalidArgument("\"messages\" must be an array, not " + TypeName(ms));
    if (ms.empty()) return InvalidArgument("\"messages\" is empty");
    for (size_t i = 0; i < ms.size(); ++i) {
      const json& m = ms[i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) return InvalidArgument(where + " must be an object, not " + TypeName(m));
      if (!m.contains("role") || !m["role"].is_string()) return InvalidArgument(where + " has no string \"role\"");
      if (!m.contains("content") || !m["content"].is_string())
        return InvalidArgument(where + " has no string \"content\"");
      auto role = ParseRole(m["role"].get<std::string>());
      if (!role.ok()) return role.status().WithContext(where);
      out.push_back({*role, m["content"].get<std::string>()});
    }
    return out;
  }
  if (row.contains("prompt") || row.contains("response")) {
    for (const char* k : {"prompt", "response"})
      if (!row.contains(k) || !row[k].is_string()) return InvalidArgument(std::string("no string \"") + k + "\"");
    if (row.contains("system")) {
      if (!row["system"].is_string()) return InvalidArgument("\"system\" must be a string");
      out.push_back({Role::kSystem, row["system"].get<std::string>()});
    }
    out.push_back({Role::kUser, row["prompt"].get<std::string>()});
    out.push_back({Role::kAssistant, row["response"].get<std::string>()});
    return out;
  }
  return InvalidArgument("a row needs \"messages\" or \"prompt\" and \"response\"");
}

}  // namespace shard
