// HF tokenizer.json with a BPE model: byte-level BPE as Llama-3 and Qwen use it,
// and SentencePiece-style BPE with byte fallback (Llama-2, Mistral).
//
// Encoding follows HF tokenizers: added tokens (special or not) are split out
// of the text first, leftmost-longest; each remaining section is normalized
// (NFC, Prepend, Replace), pre-tokenized (Split with a known regex, ByteLevel,
// Metaspace without splitting) and run through the BPE model. Components that
// are not implemented are refused at load time with their name.
//
// Thread-safety: immutable after Load; all methods are const.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shard/data/bpe_model.h"
#include "shard/data/pretokenizer.h"
#include "shard/data/tokenizer.h"

namespace shard {

// Bounds on tokenizer.json ids (they size the id → piece tables): below 2^24
// (the largest vocab_size a model config may have), and at most 65536 past
// the number of entries (real vocabularies are dense).
inline constexpr int64_t kMaxTokenId = int64_t{1} << 24;
inline constexpr int64_t kMaxIdGap = int64_t{1} << 16;
// Bounds on the text pipeline a tokenizer.json describes (real ones: Sequences
// one level deep, text at most 3-fold longer plus a few bytes), so encoding can
// neither recurse without end at load nor multiply a text past memory.
inline constexpr int kMaxSequenceDepth = 8;
inline constexpr int64_t kMaxTextGrowth = 64;
inline constexpr int64_t kMaxTextPrefix = 4096;

class HfTokenizer : public FileTokenizer {
 public:
  // tokenizer_config_json may be empty (no bos/eos names then, except the usual ones).
  static StatusOr<std::unique_ptr<HfTokenizer>> Parse(const std::string& tokenizer_json,
                                                      const std::string& tokenizer_config_json,
                                                      const std::string& origin);
  static StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& path);

  std::string kind() const override { return "hf-bpe"; }
  using Tokenizer::Encode;
  void Encode(std::string_view text, std::vector<int32_t>* ids) const override;
  std::string Decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> TokenId(std::string_view token) const override;

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool special = false, lstrip = false, rstrip = false, normalized = false;
  };
  // Leftmost-longest matcher over a set of added tokens.
  struct Splitter {
    std::vector<std::vector<const AddedToken*>> by_first;  // [first byte] -> longest first
    bool empty = true;
    void Build(const std::vector<const AddedToken*>& tokens);
    // The first match at or after `from`: its offset and token, or npos.
    size_t Find(std::string_view s, size_t from, const AddedToken** tok) const;
  };
  struct NormStep {
    enum Kind { kNfc, kPrepend, kReplace } kind;
    std::string a, b;
  };
  struct PreStep {
    enum Kind { kSplit, kByteLevel, kMetaspace } kind = kSplit;
    SplitPattern pattern = SplitPattern::kGpt2;  // kSplit, or kByteLevel with use_regex
    bool use_regex = false;
    bool add_prefix_space = false;
    std::string replacement;                     // kMetaspace
    std::string prepend_scheme = "always";       // kMetaspace: always | first | never
  };

  HfTokenizer() = default;
  Status ParseNormalizer(const void* json, int depth);
  Status ParsePreTokenizer(const void* json, int depth);
  // Refuses a pipeline that can grow text past kMaxTextGrowth / kMaxTextPrefix.
  Status CheckGrowth() const;
  // The steps of Parse, each given tokenizer.json's root (or the decoder).
  Status BuildModel(const void* json, const std::string& origin);        // model_, vocab_size_
  Status ParseAddedTokens(const void* json, const std::string& origin);  // added_, the splitters
  Status ScanDecoder(const void* json, int depth, const std::string& origin);
  Status ResolveBosEos(const std::string& tokenizer_config_json, const std::string& origin);
  // Encodes one section of text that holds no unnormalized added token.
  void EncodeSection(std::string_view section, bool first_section, std::vector<int32_t>* ids) const;

  std::unique_ptr<BpeModel> model_;
  std::vector<AddedToken> added_;
  StringMap<int32_t> added_ids_;
  Splitter raw_splitter_, normalized_splitter_;
  std::vector<NormStep> norm_;
  std::vector<PreStep> pre_;
  bool strip_decoded_prefix_ = false;
};

}  // namespace shard
