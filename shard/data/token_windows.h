// A memory-mapped raw uint32 token file read as training windows.
// Window i holds tokens [i*seq_len, i*seq_len + seq_len + 1): inputs are the
// first seq_len, targets the last seq_len (all positions are targets).
#pragma once

#include <cstdint>
#include <string>

#include "shard/common/file_util.h"
#include "shard/common/status.h"

namespace shard {

class TokenWindows {
 public:
  // Checks the file size is a multiple of 4, that it holds at least one window,
  // and that every token is < vocab_size (naming the first bad offset).
  static StatusOr<TokenWindows> Open(const std::string& path, int64_t seq_len, int64_t vocab_size);

  int64_t num_windows() const { return num_windows_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t seq_len() const { return seq_len_; }
  // Writes window i's inputs, targets and positions (seq_len each).
  void Window(int64_t i, int32_t* tokens, int32_t* targets, int32_t* positions) const;

 private:
  MappedFile file_;
  const uint32_t* data_ = nullptr;
  int64_t num_tokens_ = 0;
  int64_t seq_len_ = 0;
  int64_t num_windows_ = 0;
};

}  // namespace shard
