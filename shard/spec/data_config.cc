#include "shard/spec/data_config.h"

namespace shard {

Status DataConfig::Validate() const {
  if (tokens.empty() == jsonl.empty())
    return InvalidArgument(tokens.empty() ? "data.tokens or data.jsonl is required (a raw uint32 token file, or SFT JSONL)"
                                          : "data.tokens and data.jsonl are both set; a job reads one of them");
  if (seq_len <= 0) return InvalidArgument("data.seq_len must be > 0");
  if (sft() && tokenizer.empty()) return InvalidArgument("data.tokenizer must name a tokenizer (e.g. byte)");
  return OkStatus();
}

}  // namespace shard
