#include "coordinator/ctl/chat_template_command.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "shard/common/file_util.h"
#include "shard/common/json_depth.h"
#include "shard/data/chat_format.h"

namespace shardctl {
namespace {
using ojson = nlohmann::ordered_json;

// The messages and any extra template variables (tools, enable_thinking, ...).
shard::Status ReadMessages(const std::string& path, ojson* messages, ojson* extra) {
  ASSIGN_OR_RETURN(std::string text, shard::ReadFileToString(path));
  RETURN_IF_ERROR(shard::CheckJsonDepth(text, "--messages " + path));
  ojson j = ojson::parse(text, nullptr, false);
  if (j.is_discarded()) return shard::InvalidArgument("--messages " + path + ": not valid JSON");
  *extra = ojson::object();
  if (j.is_array()) {
    *messages = std::move(j);
    return shard::OkStatus();
  }
  if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array())
    return shard::InvalidArgument("--messages " + path +
                                  ": expected a JSON array of messages or an object with a \"messages\" array");
  *messages = j["messages"];
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "messages") (*extra)[it.key()] = it.value();
  return shard::OkStatus();
}

}  // namespace

shard::StatusOr<std::string> RenderChatTemplateText(const ChatTemplateOptions& o) {
  ojson messages, extra;
  RETURN_IF_ERROR(ReadMessages(o.messages, &messages, &extra));
  ASSIGN_OR_RETURN(shard::ChatFormat f, shard::ResolveChatFormat(o.chat_template, o.tokenizer));
  if (f.hf) {
    ASSIGN_OR_RETURN(auto r, f.hf->Render(messages, o.add_generation_prompt, extra));
    return r.text;
  }
  if (o.add_generation_prompt)
    return shard::InvalidArgument(std::string("--add-generation-prompt needs the model's own chat template; the ") +
                                  shard::ChatTemplateName(*f.named) + " template has no generation prompt");
  std::vector<shard::Message> ms;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      return shard::InvalidArgument("--messages " + o.messages + ": messages[" + std::to_string(i) +
                                    "] needs string \"role\" and \"content\"");
    auto role = shard::ParseRole(m["role"].get<std::string>());
    if (!role.ok()) return role.status().WithContext("--messages " + o.messages + ": messages[" + std::to_string(i) + "]");
    ms.push_back({*role, m["content"].get<std::string>()});
  }
  ASSIGN_OR_RETURN(auto tok, shard::LoadTokenizer(o.tokenizer));
  return shard::RenderChatTemplate(*f.named, ms, *tok);
}

shard::Status RunChatTemplate(const ChatTemplateOptions& o) {
  ASSIGN_OR_RETURN(std::string text, RenderChatTemplateText(o));
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return shard::OkStatus();
}

}  // namespace shardctl
