// The prepared SFT dataset on disk, and its memory-mapped reader.
//
//   PREFIX.tokens  uint32 little-endian token ids, all samples back to back
//   PREFIX.mask    uint8 per token: 1 = the token is a training target
//   PREFIX.index   uint64 little-endian offsets, num_samples + 1 of them
//                  (sample i is tokens [index[i], index[i+1]))
//   PREFIX.json    the header: format "shardd-sft", version, tokenizer (kind,
//                  xxh64 hash, vocab size), template, train_on, seq_len, counts,
//                  source file (path, size, xxh64), bad-row counts, and
//                  the xxh64 of each of its own three files ("files")
//
// The writer writes temp files, fsyncs and renames them, and writes the header
// last (after removing any old one): a header names complete files. Open checks
// the header, the file sizes against its counts, the index bounds, (unless
// told not to) every mask byte and token id, and each file's xxh64 against the
// header (a flipped token inside the vocabulary is caught only by this).
//
// Thread-safety: PreparedWriter is single-threaded; a PreparedDataset is
// immutable and safe for concurrent reads.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/common/status.h"
#include "shard/data/chat_template.h"
#include "shard/data/packing.h"

namespace shard {

inline constexpr int kPreparedFormatVersion = 1;

struct PreparedHeader {
  int version = kPreparedFormatVersion;
  std::string tokenizer_kind;
  uint64_t tokenizer_hash = 0;
  int64_t vocab_size = 0;
  std::string tokenizer_spec;  // as given (informational)
  std::string chat_template;
  std::string train_on;
  int64_t seq_len = 0;          // the seq_len it was prepared for (informational: packing takes its own)
  int64_t num_samples = 0;
  int64_t num_tokens = 0;
  int64_t num_target_tokens = 0;  // mask bits after each sample's first token
  int64_t max_token_id = -1;
  int64_t longer_than_seq_len = 0;  // samples of more than seq_len + 1 tokens
  std::string source_path;
  int64_t source_bytes = 0;
  uint64_t source_hash = 0;  // xxh64 of the JSONL file
  int64_t rows_read = 0;         // non-blank lines
  int64_t bad_rows_skipped = 0;
  // xxh64 of PREFIX.tokens, .mask and .index. has_file_hashes is false for a
  // header written before they were recorded: nothing to verify then.
  bool has_file_hashes = false;
  uint64_t tokens_hash = 0, mask_hash = 0, index_hash = 0;
  // Preference pairs (preference_jsonl.h): sample 2i is pair i's chosen reply,
  // 2i+1 its rejected one, both already fitted to seq_len + 1 tokens by
  // `overlong` ("pairs" in the JSON; absent = SFT samples).
  bool pairs = false;
  std::string overlong;            // pairs: truncate | drop, as applied
  int64_t overlong_pairs_dropped = 0;
  int64_t identical_pairs = 0;     // pairs: chosen renders as rejected (trains nothing); kept
  int64_t num_pairs() const { return pairs ? num_samples / 2 : 0; }

  std::string ToJson() const;
  static StatusOr<PreparedHeader> FromJson(const std::string& text, const std::string& origin);
};

// File names of a prepared dataset.
struct PreparedPaths {
  std::string tokens, mask, index, header;
  explicit PreparedPaths(const std::string& prefix)
      : tokens(prefix + ".tokens"), mask(prefix + ".mask"), index(prefix + ".index"), header(prefix + ".json") {}
};

class PreparedWriter {
 public:
  static StatusOr<std::unique_ptr<PreparedWriter>> Create(const std::string& prefix);
  ~PreparedWriter();  // removes the temp files unless Finish succeeded

  Status Add(const TokenizedSample& s);
  // Fills the counts into `h`, commits the files and writes the header.
  Status Finish(PreparedHeader h);

 private:
  explicit PreparedWriter(const std::string& prefix) : paths_(prefix) {}
  Status Write(std::FILE* f, Xxh64Stream* hash, const void* p, size_t n, const std::string& path);
  PreparedPaths paths_;
  Xxh64Stream tokens_hash_, mask_hash_, index_hash_;
  std::FILE* tokens_ = nullptr;
  std::FILE* mask_ = nullptr;
  std::FILE* index_ = nullptr;
  int64_t samples_ = 0, tokens_n_ = 0, targets_ = 0, max_id_ = -1;
  bool finished_ = false;
};

class PreparedDataset {
 public:
  struct OpenOptions {
    bool verify_contents = true;   // scan every mask byte and token id
    bool verify_checksums = true;  // each file's xxh64 against the header (if it has them)
  };
  static StatusOr<PreparedDataset> Open(const std::string& prefix, const OpenOptions& options);
  static StatusOr<PreparedDataset> Open(const std::string& prefix) { return Open(prefix, OpenOptions()); }

  const PreparedHeader& header() const { return header_; }
  int64_t num_samples() const { return header_.num_samples; }
  int64_t length(int64_t i) const { return static_cast<int64_t>(index_[i + 1] - index_[i]); }
  SampleView sample(int64_t i) const {
    return {tokens_ + index_[i], mask_ + index_[i], length(i)};
  }
  // FAILED_PRECONDITION when a token id does not fit the model's vocabulary.
  Status CheckVocab(int64_t model_vocab_size) const;

 private:
  PreparedHeader header_;
  std::string prefix_;
  MappedFile tokens_file_, mask_file_, index_file_;
  const uint32_t* tokens_ = nullptr;
  const uint8_t* mask_ = nullptr;
  const uint64_t* index_ = nullptr;
};

}  // namespace shard
