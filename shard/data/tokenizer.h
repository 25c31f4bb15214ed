// Tokenizers behind one interface: byte-level (built in), HF tokenizer.json BPE
// (Llama-3, Qwen, and SentencePiece-style Llama-2/Mistral files) and
// SentencePiece .model files (via libsentencepiece).
//
// Encode(text) returns what the reference implementation returns for the text
// without added BOS/EOS (HF: encode(text, add_special_tokens=False), which still
// turns added/special token strings in the text into their ids; SentencePiece:
// sp.encode(text), which never does). Templates put special tokens in by id.
//
// Thread-safety: every method is const and safe to call from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shard/common/status.h"

namespace shard {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "byte", "hf-bpe" or "sentencepiece".
  virtual std::string kind() const = 0;
  // Appends the ids of `text` to *ids.
  virtual void Encode(std::string_view text, std::vector<int32_t>* ids) const = 0;
  std::vector<int32_t> Encode(std::string_view text) const {
    std::vector<int32_t> ids;
    Encode(text, &ids);
    return ids;
  }
  virtual std::string Decode(std::span<const int32_t> ids) const = 0;

  // The id of a special/added token or vocabulary piece spelled exactly `token`
  // ("<|eot_id|>", "<s>"); nullopt when the tokenizer has none.
  virtual std::optional<int32_t> TokenId(std::string_view token) const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // One more than the largest id Encode or TokenId can return.
  virtual int64_t vocab_size() const = 0;
  // Identifies the tokenizer's files (xxh64 of their bytes and the kind): a
  // prepared dataset records it, and a changed tokenizer invalidates it.
  virtual uint64_t hash() const = 0;
  // True when Encode("x") marks the start of the text as a word start
  // (SentencePiece's dummy prefix, HF's Prepend("▁")): a template then leaves
  // out the space it would otherwise write before a reply.
  virtual bool adds_dummy_prefix() const { return false; }
};

// A tokenizer loaded from files (HF tokenizer.json, SentencePiece .model): the
// special ids, size, hash and dummy-prefix flag are fields its loader sets.
class FileTokenizer : public Tokenizer {
 public:
  std::optional<int32_t> bos_id() const override { return bos_; }
  std::optional<int32_t> eos_id() const override { return eos_; }
  int64_t vocab_size() const override { return vocab_size_; }
  uint64_t hash() const override { return hash_; }
  bool adds_dummy_prefix() const override { return dummy_prefix_; }

 protected:
  std::optional<int32_t> bos_, eos_;
  int64_t vocab_size_ = 0;
  uint64_t hash_ = 0;
  bool dummy_prefix_ = false;
};

// spec: "byte"; a tokenizer.json file; a SentencePiece .model file; or a
// folder holding tokenizer.json (preferred) or tokenizer.model. For
// tokenizer.json, a tokenizer_config.json beside it supplies bos/eos names.
StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& spec);

}  // namespace shard
