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

class SentencePieceTokenizer : public FileTokenizer {
 public:
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path);
  ~SentencePieceTokenizer() override;

  std::string kind() const override { return "sentencepiece"; }
  using Tokenizer::Encode;
  void Encode(std::string_view text, std::vector<int32_t>* ids) const override;
  std::string Decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> TokenId(std::string_view token) const override;

 private:
  SentencePieceTokenizer();
  std::unique_ptr<SpmProcessor> sp_;  // from the on-demand module (sentencepiece_module.h)
};

}  // namespace shard
