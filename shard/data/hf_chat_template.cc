#include "shard/data/hf_chat_template.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/data/reply_turns.h"

namespace shard {
namespace {
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

fs::path TokenizerFolder(const std::string& tokenizer) {
  std::error_code ec;
  fs::path p(tokenizer);
  return fs::is_directory(p, ec) ? p : p.parent_path();
}

// A special token in tokenizer_config.json: "<s>", {"content": "<s>", ...} or null.
std::optional<std::string> TokenText(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// The template source from tokenizer_config.json (or chat_template.jinja); "" when none.
StatusOr<std::string> FindSource(const fs::path& folder, const std::string& name, std::string* origin) {
  const fs::path cfg = folder / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(cfg, ec)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(cfg.string()));
    ojson c = ojson::parse(text, nullptr, false);
    if (c.is_discarded() || !c.is_object()) return InvalidArgument(cfg.string() + " is not a JSON object");
    *origin = cfg.string();
    if (c.contains("chat_template")) {
      const ojson& t = c["chat_template"];
      if (t.is_string()) {
        if (!name.empty() && name != "default")
          return NotFound(cfg.string() + " has a single chat_template, not one named '" + name + "'");
        return t.get<std::string>();
      }
      if (t.is_array()) {
        const std::string want = name.empty() ? "default" : name;
        std::string names;
        for (const ojson& e : t) {
          if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
              !e["template"].is_string())
            return InvalidArgument(cfg.string() + ": chat_template entries need a string \"name\" and \"template\"");
          names += (names.empty() ? "" : ", ") + e["name"].get<std::string>();
          if (e["name"] == want) {
            *origin += " (chat_template '" + want + "')";
            return e["template"].get<std::string>();
          }
        }
        return NotFound(cfg.string() + " has no chat_template named '" + want + "' (it has: " + names + ")");
      }
      if (!t.is_null()) return InvalidArgument(cfg.string() + ": chat_template must be a string or a list");
    }
  }
  const fs::path jinja = folder / "chat_template.jinja";
  if (fs::exists(jinja, ec)) {
    *origin = jinja.string();
    return ReadFileToString(jinja.string());
  }
  return std::string();
}

ojson SpecialTokens(const fs::path& folder) {
  ojson out = ojson::object();
  const fs::path cfg = folder / "tokenizer_config.json";
  auto text = ReadFileToString(cfg.string());
  if (!text.ok()) return out;
  ojson c = ojson::parse(*text, nullptr, false);
  if (!c.is_object()) return out;
  for (const char* k : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (c.contains(k))
      if (auto t = TokenText(c[k])) out[k] = *t;
  if (c.contains("additional_special_tokens") && c["additional_special_tokens"].is_array()) {
    ojson extra = ojson::array();
    for (const ojson& e : c["additional_special_tokens"])
      if (auto t = TokenText(e)) extra.push_back(*t);
    out["additional_special_tokens"] = extra;
  }
  return out;
}

std::string Trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// The trained span of a reply, from its (trimmed) content at `pos` to the end
// of the end-of-turn text that `alone` (the conversation rendered through this
// reply) puts after it, as far as the whole rendering repeats that text.
std::pair<size_t, size_t> ReplySpanAt(const std::string& full, const std::string& content, const std::string& alone,
                                      size_t pos) {
  size_t end = pos + content.size();
  const size_t in_alone = alone.rfind(content);
  if (in_alone != std::string::npos) {
    const std::string_view tail = std::string_view(alone).substr(in_alone + content.size());
    size_t k = 0;
    while (k < tail.size() && end + k < full.size() && full[end + k] == tail[k]) ++k;
    end += k;
  }
  return {pos, end};
}

}  // namespace

ojson MessagesToJson(const std::vector<Message>& messages) {
  ojson ms = ojson::array();
  for (const Message& m : messages) ms.push_back({{"role", RoleName(m.role)}, {"content", m.content}});
  return ms;
}

StatusOr<std::shared_ptr<const HfChatTemplate>> HfChatTemplate::Load(const std::string& tokenizer, const std::string& name) {
  const fs::path folder = TokenizerFolder(tokenizer);
  std::string origin;
  ASSIGN_OR_RETURN(std::string source, FindSource(folder, name, &origin));
  if (source.empty())
    return NotFound("the tokenizer folder " + folder.string() +
                    " has no chat_template (tokenizer_config.json or chat_template.jinja); name a template "
                    "(plain, llama2, llama3, chatml)");
  return FromSource(source, SpecialTokens(folder), origin);
}

StatusOr<std::shared_ptr<const HfChatTemplate>> HfChatTemplate::FromSource(const std::string& source,
                                                                           ojson special_tokens, std::string origin) {
  auto t = jinja::Template::Compile(source);
  if (!t.ok()) return t.status().WithContext(origin);
  auto h = std::make_shared<HfChatTemplate>();
  h->source_ = source;
  h->origin_ = std::move(origin);
  h->special_tokens_ = std::move(special_tokens);
  h->template_ = std::move(*t);
  h->has_generation_ = source.find("generation") != std::string::npos &&
                       source.find("endgeneration") != std::string::npos;
  return std::shared_ptr<const HfChatTemplate>(std::move(h));
}

StatusOr<bool> HfChatTemplate::HasTemplate(const std::string& tokenizer) {
  if (tokenizer.empty() || tokenizer == "byte") return false;
  std::string origin;
  ASSIGN_OR_RETURN(std::string source, FindSource(TokenizerFolder(tokenizer), "", &origin));
  return !source.empty();
}

bool HfChatTemplate::Available(const std::string& tokenizer) {
  auto has = HasTemplate(tokenizer);
  return has.ok() && *has;
}

StatusOr<jinja::Rendered> HfChatTemplate::Render(const ojson& messages, bool add_generation_prompt,
                                                 const ojson& extra) const {
  ojson vars = {{"messages", messages}, {"add_generation_prompt", add_generation_prompt}};
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) vars[it.key()] = it.value();
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  auto r = template_.Render(vars);
  if (!r.ok()) return r.status().WithContext(origin_);
  return r;
}

StatusOr<HfChatTemplate::Spans> HfChatTemplate::AssistantSpans(const std::vector<Message>& messages) const {
  const ojson all = MessagesToJson(messages);
  ASSIGN_OR_RETURN(jinja::Rendered full, Render(all, false));
  Spans out;
  out.text = full.text;
  if (!full.generation.empty()) {
    out.trained = full.generation;
    return out;
  }
  // Each reply's span from prefix renderings where they line up; the others
  // (a template that renders earlier replies differently once later messages
  // follow: Qwen3 drops their <think> blocks) from the whole rendering.
  std::vector<std::pair<size_t, size_t>> span(messages.size());
  std::vector<size_t> rewritten;
  std::vector<std::string> alone(messages.size());  // rendered through the reply, for its end-of-turn text
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != Role::kAssistant) continue;
    const ojson before(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(i));
    const ojson through(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    ASSIGN_OR_RETURN(jinja::Rendered prompt, Render(before, true));
    ASSIGN_OR_RETURN(jinja::Rendered reply, Render(through, false));
    if (StartsWith(full.text, prompt.text) && StartsWith(full.text, reply.text) && reply.text.size() >= prompt.text.size()) {
      span[i] = {prompt.text.size(), reply.text.size()};
    } else {
      rewritten.push_back(i);
      alone[i] = std::move(reply.text);
    }
  }
  if (!rewritten.empty()) {
    // Train what the whole rendering holds, found inside the reply's own turn.
    const auto turns = LocateReplyTurns(full.text, all, rewritten, [this](const ojson& ms) -> StatusOr<std::string> {
      ASSIGN_OR_RETURN(jinja::Rendered r, Render(ms, false));
      return std::move(r.text);
    });
    for (size_t k = 0; k < rewritten.size(); ++k) {
      const size_t i = rewritten[k];
      ASSIGN_OR_RETURN(span[i], ReplySpanInTurn(full.text, messages[i].content, i, turns[k], alone[i]));
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != Role::kAssistant) continue;
    if (!out.trained.empty() && span[i].first < out.trained.back().second)
      return FailedPrecondition(origin_ + ": the reply spans of messages overlap at message " + std::to_string(i + 1) +
                                "; use train_on: all or a template with {% generation %} blocks");
    if (span[i].second > span[i].first) out.trained.push_back(span[i]);
  }
  return out;
}

StatusOr<std::pair<size_t, size_t>> HfChatTemplate::ReplySpanInTurn(const std::string& full, const std::string& text,
                                                                    size_t i,
                                                                    std::optional<std::pair<size_t, size_t>> turn,
                                                                    const std::string& alone) const {
  const std::string where = origin_ + ": message " + std::to_string(i + 1) + " (an assistant reply)";
  const std::string hint = "; use train_on: all, a template with {% generation %} blocks, or a named template";
  if (!turn)
    return FailedPrecondition(where + ": the chat template renders it differently once later messages follow, and "
                              "where its turn lies cannot be told from the rendering" + hint);
  const auto [begin, end] = *turn;
  const std::string content = Trimmed(text);
  const size_t pos = content.empty() ? std::string::npos : full.find(content, begin);
  if (pos == std::string::npos || pos + content.size() > end)
    return FailedPrecondition(where + ": the chat template rewrites it once later messages follow (its text is not in "
                              "its own turn: \"" + full.substr(begin, std::min<size_t>(end - begin, 80)) + "\")" + hint);
  return ReplySpanAt(full, content, alone, pos);
}

// HF tokenizers turn special-token text into ids themselves; a SentencePiece
// model does not, so the template's special tokens (BOS/EOS text) are cut out
// and put in by id there.
void HfChatTemplate::EncodeWithSpecials(std::string_view text, const Tokenizer& tok, std::vector<int32_t>* ids) const {
  if (tok.kind() != "sentencepiece") {
    tok.Encode(text, ids);
    return;
  }
  while (!text.empty()) {
    size_t best = std::string_view::npos, len = 0;
    std::optional<int32_t> id;
    for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) {
      if (!it.value().is_string() || it.value().get<std::string>().empty()) continue;
      const std::string s = it.value().get<std::string>();
      const size_t f = text.find(s);
      if (f == std::string_view::npos || f > best) continue;
      std::optional<int32_t> sid = it.key() == "bos_token" ? tok.bos_id() : it.key() == "eos_token" ? tok.eos_id()
                                                                                                   : tok.TokenId(s);
      if (!sid) continue;
      best = f, len = s.size(), id = sid;
    }
    if (best == std::string_view::npos) {
      tok.Encode(text, ids);
      return;
    }
    if (best > 0) tok.Encode(text.substr(0, best), ids);
    ids->push_back(*id);
    text.remove_prefix(best + len);
  }
}

Status HfChatTemplate::Apply(const std::vector<Message>& messages, const Tokenizer& tok, TrainOn train_on,
                             TokenizedSample* out) const {
  out->tokens.clear();
  out->mask.clear();
  if (messages.empty()) return InvalidArgument("the conversation has no messages");
  Spans spans;
  if (train_on == TrainOn::kAll) {
    ASSIGN_OR_RETURN(jinja::Rendered r, Render(MessagesToJson(messages), false));
    spans.text = std::move(r.text);
    spans.trained.emplace_back(0, spans.text.size());
  } else {
    bool reply = false;
    for (const auto& m : messages) reply |= m.role == Role::kAssistant;
    if (!reply) return InvalidArgument("no assistant message to train on (or set train_on: all)");
    ASSIGN_OR_RETURN(spans, AssistantSpans(messages));
  }
  // Cut the text at span edges; each piece is encoded alone with its mask bit.
  size_t pos = 0;
  auto emit = [&](size_t end, uint8_t bit) {
    if (end <= pos) return;
    const size_t before = out->tokens.size();
    EncodeWithSpecials(std::string_view(spans.text).substr(pos, end - pos), tok, &out->tokens);
    out->mask.resize(out->tokens.size(), bit);
    std::fill(out->mask.begin() + static_cast<std::ptrdiff_t>(before), out->mask.end(), bit);
    pos = end;
  };
  for (const auto& [b, e] : spans.trained) {
    emit(std::max(b, pos), 0);
    emit(e, 1);
  }
  emit(spans.text.size(), 0);
  if (out->tokens.size() < 2) return InvalidArgument("the conversation encodes to fewer than 2 tokens");
  if (out->targets() == 0) return InvalidArgument("the conversation has no token to train on (empty assistant replies)");
  return OkStatus();
}

std::string HfChatTemplate::Fingerprint() const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "jinja:%016llx", static_cast<unsigned long long>(Xxh64(source_.data(), source_.size())));
  return buf;
}

}  // namespace shard
