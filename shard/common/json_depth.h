// How deeply JSON text nests, found by one scan of its brackets (outside
// strings) before it is parsed. nlohmann's parser and destructor do not
// recurse, but copying, comparing and dumping a parsed value do, and so do
// the readers' own walks of it (a chat template's context, a tokenizer's
// normalizers): a 200,000-deep file would run them off the end of the stack.
// Readers of files a user hands shardd call CheckJsonDepth first.
//
// Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>

#include "shard/common/status.h"

namespace shard {

// Far deeper than any real config, tokenizer or conversation (they nest < 20).
inline constexpr int kMaxJsonDepth = 512;

// INVALID_ARGUMENT "<what>: JSON nested deeper than N levels" (what empty: no
// prefix) when an array or object opens more than max_depth levels deep. Text
// that is not JSON passes (the parser reports it).
inline Status CheckJsonDepth(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return InvalidArgument((what.empty() ? "" : what + ": ") + "JSON nested deeper than " +
                               std::to_string(max_depth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return OkStatus();
}

}  // namespace shard
