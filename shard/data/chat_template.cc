#include "shard/data/chat_template.h"

namespace shard {
namespace {

// One piece of a rendered conversation: text to encode, or a special token.
struct Piece {
  std::string text;
  std::string special;  // non-empty: a special token (its name, for rendering)
  int32_t id = -1;      // the special token's id
  bool train = false;
  // The text's first character is a space that a dummy-prefix tokenizer
  // (SentencePiece) writes itself: it is rendered but not encoded.
  bool leading_space_is_prefix = false;
};

std::string_view Strip(std::string_view s) {
  constexpr std::string_view ws = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

// Concatenation written out (GCC 12 warns falsely about operator+ chains on strings).
std::string Join(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (auto p : parts) s.append(p);
  return s;
}

struct Renderer {
  const Tokenizer& tok;
  std::vector<Piece> pieces;
  Status status;
  void Text(std::string t, bool train) { pieces.push_back({std::move(t), "", -1, train, false}); }
  void Special(const std::string& name, bool train) {
    auto id = tok.TokenId(name);
    if (!id && status.ok()) status = FailedPrecondition("the tokenizer has no special token " + name);
    pieces.push_back({"", name, id.value_or(-1), train, false});
  }
  // BOS/EOS by id (a SentencePiece control token has no text to look up).
  void SpecialId(std::optional<int32_t> id, const char* fallback_name, bool train) {
    if (!id) return;
    std::string name = tok.Decode(std::vector<int32_t>{*id});
    pieces.push_back({"", name.empty() ? fallback_name : name, *id, train, false});
  }
};

Status Render(ChatTemplate t, const std::vector<Message>& ms, const Tokenizer& tok, Renderer* r) {
  auto is_reply = [](const Message& m) { return m.role == Role::kAssistant; };
  switch (t) {
    case ChatTemplate::kPlain: {
      r->SpecialId(tok.bos_id(), "<s>", false);
      for (const Message& m : ms) {
        r->Text(m.content, is_reply(m));
        if (is_reply(m)) r->SpecialId(tok.eos_id(), "</s>", true);
      }
      return r->status;
    }
    case ChatTemplate::kLlama3:
      r->Special("<|begin_of_text|>", false);
      for (const Message& m : ms) {
        r->Special("<|start_header_id|>", false);
        r->Text(RoleName(m.role), false);
        r->Special("<|end_header_id|>", false);
        r->Text("\n\n", false);
        r->Text(std::string(Strip(m.content)), is_reply(m));
        r->Special("<|eot_id|>", is_reply(m));
      }
      return r->status;
    case ChatTemplate::kChatml:
      for (const Message& m : ms) {
        r->Special("<|im_start|>", false);
        r->Text(Join({RoleName(m.role), "\n"}), false);
        r->Text(m.content, is_reply(m));
        r->Special("<|im_end|>", is_reply(m));
        r->Text("\n", false);
      }
      return r->status;
    case ChatTemplate::kLlama2: {
      size_t i = 0;
      std::string system;
      bool has_system = false;
      if (!ms.empty() && ms[0].role == Role::kSystem) {
        system = ms[0].content;
        has_system = true;
        i = 1;
      }
      if (!tok.bos_id() || !tok.eos_id()) return FailedPrecondition("the llama2 template needs BOS and EOS tokens");
      for (size_t turn = 0; i < ms.size(); ++i, ++turn) {
        const Message& m = ms[i];
        const Role want = turn % 2 == 0 ? Role::kUser : Role::kAssistant;
        if (m.role != want)
          return InvalidArgument(std::string("the llama2 template needs user/assistant turns in alternation "
                                             "(after an optional first system message); message ") +
                                 std::to_string(i + 1) + " is " + RoleName(m.role) + ", expected " + RoleName(want));
        if (m.role == Role::kUser) {
          const std::string content =
              turn == 0 && has_system ? Join({"<<SYS>>\n", system, "\n<</SYS>>\n\n", m.content}) : m.content;
          r->SpecialId(tok.bos_id(), "<s>", false);
          r->Text(Join({"[INST] ", Strip(content), " [/INST]"}), false);
        } else {
          // " reply " after [/INST]; a tokenizer with a dummy prefix writes the first space itself.
          r->Text(Join({" ", Strip(m.content), " "}), true);
          r->pieces.back().leading_space_is_prefix = true;
          r->SpecialId(tok.eos_id(), "</s>", true);
        }
      }
      return OkStatus();
    }
  }
  return Internal("unknown chat template");
}

}  // namespace

StatusOr<Role> ParseRole(std::string_view s) {
  if (s == "system") return Role::kSystem;
  if (s == "user") return Role::kUser;
  if (s == "assistant") return Role::kAssistant;
  return InvalidArgument("role '" + std::string(s) + "' is not system, user or assistant");
}

const char* RoleName(Role r) {
  switch (r) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
  }
  return "?";
}

StatusOr<ChatTemplate> ParseChatTemplate(std::string_view s) {
  if (s == "plain") return ChatTemplate::kPlain;
  if (s == "llama2") return ChatTemplate::kLlama2;
  if (s == "llama3") return ChatTemplate::kLlama3;
  if (s == "chatml") return ChatTemplate::kChatml;
  return InvalidArgument("template '" + std::string(s) + "' is not one of plain, llama2, llama3, chatml");
}

const char* ChatTemplateName(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kPlain: return "plain";
    case ChatTemplate::kLlama2: return "llama2";
    case ChatTemplate::kLlama3: return "llama3";
    case ChatTemplate::kChatml: return "chatml";
  }
  return "?";
}

int64_t TokenizedSample::targets() const {
  int64_t n = 0;
  for (size_t i = 1; i < mask.size(); ++i) n += mask[i];
  return n;
}

Status CheckTemplateTokens(ChatTemplate t, const Tokenizer& tok) {
  std::vector<std::string> need;
  switch (t) {
    case ChatTemplate::kPlain: return OkStatus();
    case ChatTemplate::kLlama3: need = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}; break;
    case ChatTemplate::kChatml: need = {"<|im_start|>", "<|im_end|>"}; break;
    case ChatTemplate::kLlama2:
      if (!tok.bos_id() || !tok.eos_id())
        return InvalidArgument("the llama2 template needs BOS and EOS tokens; this " + tok.kind() + " tokenizer lacks one");
      return OkStatus();
  }
  for (const auto& n : need)
    if (!tok.TokenId(n))
      return InvalidArgument(std::string("the ") + ChatTemplateName(t) + " template needs the special token " + n +
                                ", which this " + tok.kind() + " tokenizer does not have (pick the template that "
                                "matches the model's tokenizer)");
  return OkStatus();
}

Status ApplyChatTemplate(ChatTemplate t, const std::vector<Message>& messages, const Tokenizer& tok, TrainOn train_on,
                         TokenizedSample* out) {
  out->tokens.clear();
  out->mask.clear();
  if (messages.empty()) return InvalidArgument("the conversation has no messages");
  if (train_on == TrainOn::kAssistant) {
    bool reply = false;
    for (const auto& m : messages) reply |= m.role == Role::kAssistant;
    if (!reply) return InvalidArgument("no assistant message to train on (or set train_on: all)");
  }
  Renderer r{tok, {}, OkStatus()};
  RETURN_IF_ERROR(Render(t, messages, tok, &r));
  // Neighbouring text with the same mask is encoded as one piece, as the
  // reference would see it.
  std::vector<Piece> merged;
  for (auto& p : r.pieces) {
    if (p.special.empty() && p.text.empty()) continue;
    if (!merged.empty() && p.special.empty() && merged.back().special.empty() && merged.back().train == p.train &&
        !p.leading_space_is_prefix)
      merged.back().text += p.text;
    else
      merged.push_back(std::move(p));
  }
  for (const Piece& p : merged) {
    const size_t before = out->tokens.size();
    if (!p.special.empty()) {
      out->tokens.push_back(p.id);
    } else if (p.leading_space_is_prefix && tok.adds_dummy_prefix()) {
      tok.Encode(std::string_view(p.text).substr(1), &out->tokens);
    } else {
      tok.Encode(p.text, &out->tokens);
    }
    const uint8_t bit = train_on == TrainOn::kAll || p.train ? 1 : 0;
    out->mask.resize(out->tokens.size(), 0);
    std::fill(out->mask.begin() + static_cast<std::ptrdiff_t>(before), out->mask.end(), bit);
  }
  if (out->tokens.size() < 2) return InvalidArgument("the conversation encodes to fewer than 2 tokens");
  if (out->targets() == 0) return InvalidArgument("the conversation has no token to train on (empty assistant replies)");
  return OkStatus();
}

StatusOr<std::string> RenderChatTemplate(ChatTemplate t, const std::vector<Message>& messages, const Tokenizer& tok) {
  Renderer r{tok, {}, OkStatus()};
  RETURN_IF_ERROR(Render(t, messages, tok, &r));
  std::string s;
  for (const auto& p : r.pieces) s += p.special.empty() ? p.text : p.special;
  return s;
}

}  // namespace shard
