// The BPE model of an HF tokenizer.json: turns one pre-tokenized word into ids
// by applying merges lowest rank first (ties: leftmost), as HF tokenizers does.
//
// Pieces are "model strings": raw bytes for byte-level vocabularies (the
// GPT-2 byte-to-unicode alphabet is undone at load time, so words are plain
// UTF-8 bytes), UTF-8 text with "▁" for SentencePiece-style ones.
//
// Thread-safety: immutable after Create; EncodeWord is safe from many threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shard/common/status.h"

namespace shard {

// Hash and equality that let unordered_map<std::string, T> find a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename T>
using StringMap = std::unordered_map<std::string, T, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  struct Options {
    bool byte_level = false;     // initial symbols are bytes (else UTF-8 characters)
    bool byte_fallback = false;  // a character outside the vocab becomes its <0xXX> byte pieces
    bool ignore_merges = false;  // a word that is itself a piece is emitted whole (Llama-3)
    bool fuse_unk = false;       // consecutive unknown characters become one unk
    std::optional<int32_t> unk;  // id for characters that cannot be encoded
  };

  // vocab: piece -> id; merges in rank order. Every merge's parts and result
  // must be pieces (INVALID_ARGUMENT names the first that is not).
  static StatusOr<BpeModel> Create(StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                                   const Options& options);

  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> PieceId(std::string_view piece) const;
  // The piece of `id`, or nullptr when no piece has that id.
  const std::string* Piece(int32_t id) const;
  int64_t max_id() const { return static_cast<int64_t>(pieces_.size()) - 1; }
  const Options& options() const { return options_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static uint64_t Key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  const Merge* FindMerge(int32_t a, int32_t b) const;
  void InitialSymbols(std::string_view word, std::vector<int32_t>* sym) const;
  void MergeSmall(std::vector<int32_t>* sym) const;
  void MergeHeap(std::vector<int32_t>* sym) const;

  Options options_;
  StringMap<int32_t> vocab_;
  std::vector<std::string> pieces_;  // by id ("" for ids without a piece)
  std::vector<bool> has_piece_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_id_[256];      // byte-level: the piece of each single byte (-1: none)
  int32_t fallback_id_[256];  // byte fallback: the <0xXX> piece of each byte (-1: none)
};

// GPT-2's byte-to-unicode alphabet: the character byte-level vocabularies use
// for byte b, and the inverse (-1 for characters outside the alphabet).
char32_t ByteToUnicode(uint8_t b);
int UnicodeToByte(char32_t c);
// Converts a byte-level vocabulary string to raw bytes; false if it holds a
// character outside the alphabet.
bool ByteLevelToBytes(std::string_view s, std::string* out);

}  // namespace shard
