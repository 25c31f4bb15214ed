// The built-in byte-level tokenizer: ids 0..255 are the bytes of the UTF-8 text;
// a few special tokens follow, enough for every chat template, so it fits the
// tiny preset's 512-entry vocabulary with room to spare.
#pragma once

#include "shard/data/tokenizer.h"
#include "shard/spec/data_config.h"

namespace shard {

class ByteTokenizer : public Tokenizer {
 public:
  // The special tokens, from id 256 in this order.
  static constexpr std::string_view kSpecials[] = {
      "<s>", "</s>", "<pad>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
      "<|eot_id|>", "<|im_start|>", "<|im_end|>"};
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int32_t kPad = 258;

  std::string kind() const override { return "byte"; }
  using Tokenizer::Encode;
  void Encode(std::string_view text, std::vector<int32_t>* ids) const override;
  std::string Decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> TokenId(std::string_view token) const override;
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::optional<int32_t> eos_id() const override { return kEos; }
  int64_t vocab_size() const override { return 256 + std::size(kSpecials); }
  static_assert(256 + std::size(kSpecials) == kByteTokenizerVocabSize, "shard/spec/data_config.h names this size");
  uint64_t hash() const override;
};

}  // namespace shard
