// One preference pair from a JSONL row, in TRL's two explicit-prompt formats
// (other keys are ignored):
//
//   standard        {"prompt": str, "chosen": str, "rejected": str} (optionally
//                   "system", as prompt_response rows have)
//   conversational  {"prompt": [messages], "chosen": [{"role": "assistant", ...}],
//                   "rejected": [{"role": "assistant", ...}]}
//
// and its rendering: each reply after the prompt, through the job's chat
// template and tokenizer exactly as an SFT row of that prompt and reply
// renders (byte + plain: <s> prompt reply </s>), with only that reply — its
// text and end-of-turn token — as targets (earlier assistant turns of a
// conversational prompt are context).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "shard/common/status.h"
#include "shard/data/chat_format.h"
#include "shard/data/chat_template.h"
#include "shard/spec/data_config.h"

namespace shard {

struct PreferenceRow {
  std::vector<Message> prompt;  // the conversation before the reply (ends with a user turn)
  Message chosen, rejected;     // assistant replies
};

// INVALID_ARGUMENT says what is wrong (the caller adds FILE:LINE): not JSON,
// a missing or mistyped key, a reply list that is not one assistant message,
// TRL's implicit-prompt rows (no "prompt").
StatusOr<PreferenceRow> ParsePreferenceRow(std::string_view line);

struct TokenizedPair {
  TokenizedSample chosen, rejected;
};

// Renders both replies (see above).
Status RenderPreferencePair(const PreferenceRow& row, const ChatFormat& format, const Tokenizer& tok,
                            TokenizedPair* out);

// A pair longer than seq_len + 1 tokens (either reply) is fitted as one:
// truncate cuts each over-long reply to seq_len + 1 tokens, drop leaves the
// pair out; either way a pair where a reply keeps no target is left out.
// Returns false when the pair is left out.
bool FitPair(TokenizedPair* pair, int64_t seq_len, Overlong overlong);

}  // namespace shard
