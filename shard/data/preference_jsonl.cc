#include "shard/data/preference_jsonl.h"

#include <tuple>

#include <nlohmann/json.hpp>

#include "shard/data/sft_jsonl.h"

namespace shard {
namespace {
using json = nlohmann::json;

// A reply: a string (standard), or a list holding one assistant message.
StatusOr<Message> Reply(const json& row, const char* key, bool conversational) {
  const json& v = row[key];
  if (!conversational) {
    if (!v.is_string())
      return InvalidArgument(std::string("\"") + key + "\" must be a string like \"prompt\", not " + v.type_name());
    return Message{Role::kAssistant, v.get<std::string>()};
  }
  ASSIGN_OR_RETURN(std::vector<Message> ms, ParseMessageList(v, key));
  if (ms.size() != 1 || ms[0].role != Role::kAssistant)
    return InvalidArgument(std::string("\"") + key + "\" must hold one assistant message (the reply), got " +
                           std::to_string(ms.size()) + " message(s)" +
                           (ms.empty() ? "" : std::string(" starting with ") + RoleName(ms[0].role)));
  return ms[0];
}

// Keeps only the last run of targets: the final reply and its end-of-turn
// token (earlier assistant turns of the prompt are context, not scored).
void KeepLastTargetRun(TokenizedSample* s) {
  size_t end = s->mask.size();
  while (end > 0 && !s->mask[end - 1]) --end;
  size_t begin = end;
  while (begin > 0 && s->mask[begin - 1]) --begin;
  for (size_t i = 0; i < begin; ++i) s->mask[i] = 0;
}

}  // namespace

StatusOr<PreferenceRow> ParsePreferenceRow(std::string_view line) {
  ASSIGN_OR_RETURN(json row, ParseJsonlObject(line));
  for (const char* k : {"chosen", "rejected"})
    if (!row.contains(k)) return InvalidArgument(std::string("a preference row needs \"") + k + "\"");
  if (!row.contains("prompt"))
    return InvalidArgument("a preference row needs \"prompt\" (rows whose prompt is inside \"chosen\" and "
                           "\"rejected\", TRL's implicit prompt, are not read: split the prompt out)");
  PreferenceRow out;
  const json& prompt = row["prompt"];
  const bool conversational = prompt.is_array();
  if (conversational) {
    ASSIGN_OR_RETURN(out.prompt, ParseMessageList(prompt, "prompt"));
    if (out.prompt.back().role == Role::kAssistant)
      return InvalidArgument("\"prompt\" ends with an assistant message; the replies follow the prompt's last turn");
    if (row.contains("system")) return InvalidArgument("\"system\" goes into the \"prompt\" messages of a conversational row");
  } else {
    if (!prompt.is_string())
      return InvalidArgument(std::string("\"prompt\" must be a string or a list of messages, not ") + prompt.type_name());
    if (row.contains("system")) {
      if (!row["system"].is_string()) return InvalidArgument("\"system\" must be a string");
      out.prompt.push_back({Role::kSystem, row["system"].get<std::string>()});
    }
    out.prompt.push_back({Role::kUser, prompt.get<std::string>()});
  }
  ASSIGN_OR_RETURN(out.chosen, Reply(row, "chosen", conversational));
  ASSIGN_OR_RETURN(out.rejected, Reply(row, "rejected", conversational));
  // A pair compares two replies: an empty one is a broken row, not a short answer.
  for (const auto& [reply, key] : {std::pair{&out.chosen, "chosen"}, std::pair{&out.rejected, "rejected"}})
    if (reply->content.find_first_not_of(" \t\r\n") == std::string::npos)
      return InvalidArgument(std::string("\"") + key + "\": the reply is empty (a pair needs two replies to compare)");
  return out;
}

Status RenderPreferencePair(const PreferenceRow& row, const ChatFormat& format, const Tokenizer& tok,
                            TokenizedPair* out) {
  for (auto [reply, sample, name] : {std::tuple{&row.chosen, &out->chosen, "chosen"},
                                     std::tuple{&row.rejected, &out->rejected, "rejected"}}) {
    std::vector<Message> messages = row.prompt;
    messages.push_back(*reply);
    *sample = TokenizedSample{};
    Status st = format.Apply(messages, tok, TrainOn::kAssistant, sample);
    if (!st.ok()) return st.WithContext(name);
    KeepLastTargetRun(sample);
    if (sample->targets() == 0) return InvalidArgument(std::string(name) + ": the reply renders no target token");
  }
  return OkStatus();
}

bool FitPair(TokenizedPair* pair, int64_t seq_len, Overlong overlong) {
  const size_t limit = static_cast<size_t>(seq_len + 1);
  for (TokenizedSample* s : {&pair->chosen, &pair->rejected}) {
    if (s->tokens.size() <= limit) continue;
    if (overlong == Overlong::kDrop) return false;
    s->tokens.resize(limit);
    s->mask.resize(limit);
  }
  return pair->chosen.targets() > 0 && pair->rejected.targets() > 0;
}

}  // namespace shard
