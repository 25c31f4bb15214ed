// SentencePiece .model files (Llama-2 and friends) through libsentencepiece:
// Encode is sp.encode(text) exactly, byte fallback included.
//
// Thread-safety: SentencePieceProcessor's encode/decode are const and
// thread-safe once loaded; so is this class.
#pragma once

#include <memory>
#include <string>

#include "shard/data/sentencepiece_module.h"
#include "shard/data/tokenizer.h"

namespace shard {

class SentencePieceTokenizer : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path);
  ~SentencePieceTokenizer() override;

  std::string kind() const override { return "sentencepiece"; }
  using Tokenizer::Encode;
  void Encode(std::string_view text, std::vector<int32_t>* ids) const override;
  std::string Decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> TokenId(std::string_view token) const override;
  std::optional<int32_t> bos_id() const override { return bos_; }
  std::optional<int32_t> eos_id() const override { return eos_; }
  int64_t vocab_size() const override { return vocab_size_; }
  uint64_t hash() const override { return hash_; }
  bool adds_dummy_prefix() const override { return dummy_prefix_; }

 private:
  SentencePieceTokenizer();
  std::unique_ptr<SpmProcessor> sp_;  // from the on-demand module (sentencepiece_module.h)
  std::optional<int32_t> bos_, eos_;
  int64_t vocab_size_ = 0;
  uint64_t hash_ = 0;
  bool dummy_prefix_ = false;
};

}  // namespace shard
