#include "shard/data/token_windows.h"

#include <cstring>

namespace shard {

StatusOr<TokenWindows> TokenWindows::Open(const std::string& path, int64_t seq_len, int64_t vocab_size) {
  if (seq_len <= 0) return InvalidArgument("token file " + path + ": seq_len must be > 0");
  ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  if (file.size() % 4 != 0)
    return DataLoss("token file " + path + ": size " + std::to_string(file.size()) +
                    " is not a multiple of 4 (expected raw little-endian uint32 tokens)");
  TokenWindows w;
  w.num_tokens_ = static_cast<int64_t>(file.size() / 4);
  w.seq_len_ = seq_len;
  if (w.num_tokens_ < seq_len + 1)
    return InvalidArgument("token file " + path + " holds " + std::to_string(w.num_tokens_) +
                           " tokens, fewer than one window of seq_len+1 = " + std::to_string(seq_len + 1));
  w.num_windows_ = (w.num_tokens_ - 1) / seq_len;
  w.data_ = reinterpret_cast<const uint32_t*>(file.data());
  for (int64_t i = 0; i < w.num_tokens_; ++i) {
    if (w.data_[i] >= static_cast<uint64_t>(vocab_size))
      return InvalidArgument("token file " + path + ": token " + std::to_string(w.data_[i]) + " at index " +
                             std::to_string(i) + " is outside the model's vocabulary of " +
                             std::to_string(vocab_size));
  }
  w.file_ = std::move(file);
  w.data_ = reinterpret_cast<const uint32_t*>(w.file_.data());
  return w;
}

void TokenWindows::Window(int64_t i, int32_t* tokens, int32_t* targets, int32_t* positions) const {
  const uint32_t* p = data_ + i * seq_len_;
  for (int64_t t = 0; t < seq_len_; ++t) {
    tokens[t] = static_cast<int32_t>(p[t]);
    targets[t] = static_cast<int32_t>(p[t + 1]);
    positions[t] = static_cast<int32_t>(t);
  }
}

}  // namespace shard
