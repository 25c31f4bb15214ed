#include "shard/data/sft_jsonl.h"

#include <nlohmann/json.hpp>

#include "shard/common/json_depth.h"

namespace shard {
namespace {
using json = nlohmann::json;

std::string TypeName(const json& v) { return v.type_name(); }

}  // namespace

StatusOr<json> ParseJsonlObject(std::string_view line) {
  RETURN_IF_ERROR(CheckJsonDepth(line, ""));
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
  return row;
}

StatusOr<std::vector<Message>> ParseMessageList(const json& ms, const std::string& key) {
  if (!ms.is_array()) return InvalidArgument("\"" + key + "\" must be an array, not " + TypeName(ms));
  if (ms.empty()) return InvalidArgument("\"" + key + "\" is empty");
  std::vector<Message> out;
  for (size_t i = 0; i < ms.size(); ++i) {
    const json& m = ms[i];
    const std::string where = key + "[" + std::to_string(i) + "]";
    if (!m.is_object()) return InvalidArgument(where + " must be an object, not " + TypeName(m));
    if (!m.contains("role") || !m["role"].is_string()) return InvalidArgument(where + " has no string \"role\"");
    if (!m.contains("content") || !m["content"].is_string()) return InvalidArgument(where + " has no string \"content\"");
    auto role = ParseRole(m["role"].get<std::string>());
    if (!role.ok()) return role.status().WithContext(where);
    out.push_back({*role, m["content"].get<std::string>()});
  }
  return out;
}

namespace {

StatusOr<SftFormat> Detect(const json& row) {
  // Before prompt_response: TRL's pairs have a "prompt" too.
  if (row.contains("chosen") || row.contains("rejected")) return SftFormat::kPreference;
  if (row.contains("messages")) return SftFormat::kMessages;
  if (row.contains("conversations")) return SftFormat::kShareGpt;
  if (row.contains("instruction") || row.contains("output")) return SftFormat::kAlpaca;
  if (row.contains("prompt") || row.contains("response")) return SftFormat::kPromptResponse;
  return InvalidArgument("a row needs \"messages\" or \"prompt\" and \"response\" (or alpaca's \"instruction\" and "
                         "\"output\", or sharegpt's \"conversations\")");
}

Status OptionalSystem(const json& row, std::vector<Message>* out) {
  if (!row.contains("system")) return OkStatus();
  if (!row["system"].is_string()) return InvalidArgument("\"system\" must be a string");
  out->push_back({Role::kSystem, row["system"].get<std::string>()});
  return OkStatus();
}

StatusOr<std::vector<Message>> Messages(const json& row) { return ParseMessageList(row["messages"], "messages"); }

StatusOr<std::vector<Message>> PromptResponse(const json& row) {
  for (const char* k : {"prompt", "response"})
    if (!row.contains(k) || !row[k].is_string()) return InvalidArgument(std::string("no string \"") + k + "\"");
  std::vector<Message> out;
  RETURN_IF_ERROR(OptionalSystem(row, &out));
  out.push_back({Role::kUser, row["prompt"].get<std::string>()});
  out.push_back({Role::kAssistant, row["response"].get<std::string>()});
  return out;
}

StatusOr<std::vector<Message>> Alpaca(const json& row) {
  for (const char* k : {"instruction", "output"})
    if (!row.contains(k) || !row[k].is_string()) return InvalidArgument(std::string("no string \"") + k + "\" (alpaca)");
  std::string user = row["instruction"].get<std::string>();
  if (row.contains("input") && !row["input"].is_null()) {
    if (!row["input"].is_string()) return InvalidArgument("\"input\" must be a string (alpaca)");
    const std::string input = row["input"].get<std::string>();
    if (!input.empty()) user += "\n\n" + input;
  }
  std::vector<Message> out;
  RETURN_IF_ERROR(OptionalSystem(row, &out));
  out.push_back({Role::kUser, std::move(user)});
  out.push_back({Role::kAssistant, row["output"].get<std::string>()});
  return out;
}

StatusOr<std::vector<Message>> ShareGpt(const json& row) {
  const json& cs = row["conversations"];
  if (!cs.is_array()) return InvalidArgument("\"conversations\" must be an array, not " + TypeName(cs));
  if (cs.empty()) return InvalidArgument("\"conversations\" is empty");
  std::vector<Message> out;
  for (size_t i = 0; i < cs.size(); ++i) {
    const json& m = cs[i];
    const std::string where = "conversations[" + std::to_string(i) + "]";
    if (!m.is_object()) return InvalidArgument(where + " must be an object, not " + TypeName(m));
    if (!m.contains("from") || !m["from"].is_string()) return InvalidArgument(where + " has no string \"from\"");
    if (!m.contains("value") || !m["value"].is_string()) return InvalidArgument(where + " has no string \"value\"");
    const std::string from = m["from"].get<std::string>();
    Role role;
    if (from == "human" || from == "user") role = Role::kUser;
    else if (from == "gpt" || from == "assistant") role = Role::kAssistant;
    else if (from == "system") role = Role::kSystem;
    else return InvalidArgument(where + ": \"from\" '" + from + "' is not human, gpt or system");
    out.push_back({role, m["value"].get<std::string>()});
  }
  return out;
}

}  // namespace

StatusOr<SftFormat> DetectSftFormat(std::string_view line) {
  ASSIGN_OR_RETURN(json row, ParseJsonlObject(line));
  return Detect(row);
}

StatusOr<std::vector<Message>> ParseSftRow(std::string_view line, SftFormat format, SftFormat also) {
  ASSIGN_OR_RETURN(json row, ParseJsonlObject(line));
  ASSIGN_OR_RETURN(SftFormat found, Detect(row));
  if (format != SftFormat::kAuto && found != format && (also == SftFormat::kAuto || found != also))
    return InvalidArgument(std::string("this row is in the ") + SftFormatName(found) + " format, but the file is " +
                           SftFormatName(format) + " (data.format, or the file's first row with format auto); "
                           "one file holds one format");
  switch (found) {
    case SftFormat::kMessages: return Messages(row);
    case SftFormat::kPromptResponse: return PromptResponse(row);
    case SftFormat::kAlpaca: return Alpaca(row);
    case SftFormat::kShareGpt: return ShareGpt(row);
    case SftFormat::kPreference:
      return InvalidArgument("a preference pair (\"chosen\" and \"rejected\") is not one SFT conversation; pairs "
                             "train under a job's preference: section");
    case SftFormat::kAuto: break;
  }
  return Internal("unreachable");
}

}  // namespace shard
