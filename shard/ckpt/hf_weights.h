// A Hugging Face model folder's weights: either one `model.safetensors` or
// `model-00001-of-0000N.safetensors` ... plus `model.safetensors.index.json`
// ({"metadata": {"total_size": bytes}, "weight_map": {tensor: file}}), the names
// transformers' save_pretrained uses. HfWeights reads either layout by tensor
// name; HfWeightsWriter produces them from fp32 tensors one at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shard/ckpt/safetensors.h"
#include "shard/common/status.h"
#include "shard/tensor/dtype.h"

namespace shard {

inline constexpr const char* kHfSingleFileName = "model.safetensors";
inline constexpr const char* kHfIndexFileName = "model.safetensors.index.json";

// "model-00002-of-00005.safetensors" for index 1 of 5 (index is 0-based, the
// name 1-based, both 5-digit as transformers writes them); "model.safetensors"
// when count is 1.
std::string HfShardFileName(int index, int count);

// Assigns tensors, in order, to files of at most max_file_bytes of tensor data
// (headers excluded, as transformers' max_shard_size counts only tensor storage):
// a tensor that would overflow the current file starts the next one, and a
// tensor larger than the limit gets a file of its own. Returns the file index of
// each tensor; indices are non-decreasing, so files keep declaration order.
// Requires max_file_bytes > 0.
std::vector<int> PlanHfShards(const std::vector<uint64_t>& tensor_bytes, uint64_t max_file_bytes);

// A validated, opened HF weight folder. Read-only; thread-safe for concurrent
// reads (see SafetensorsFile). Movable.
class HfWeights {
 public:
  // Prefers model.safetensors when both layouts are present, as transformers'
  // from_pretrained does (a warning says the index is ignored). Opens and
  // validates every file the index references; a tensor
  // the index maps to a file that lacks it is DATA_LOSS naming both. NOT_FOUND
  // when `dir` holds neither model.safetensors.index.json nor model.safetensors.
  static StatusOr<HfWeights> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // Every tensor, sorted by name.
  std::vector<std::string> TensorNames() const;
  // nullptr when no file holds `name`.
  const TensorInfo* Find(const std::string& name) const;
  // The file path holding `name`, or nullptr.
  const std::string* FileOf(const std::string& name) const;
  size_t num_files() const { return files_.size(); }

  // As SafetensorsFile::ReadF32 / ReadF32Range, on whichever file holds `name`.
  Status ReadF32(const std::string& name, const std::vector<int64_t>& expected_shape, float* dst) const;
  Status ReadF32Range(const std::string& name, int64_t elem_begin, int64_t elem_count, float* dst) const;

 private:
  HfWeights() = default;
  StatusOr<const SafetensorsFile*> FileFor(const std::string& name) const;

  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> tensor_file_;  // tensor name -> index into files_
};

// Writes an HF weight folder. Create() creates `dir` if missing and removes any
// existing model.safetensors / model.safetensors.index.json first: the entry file
// is written last, so an export that dies half-way leaves a folder HfWeights
// refuses (NOT_FOUND) instead of an old index pointing at a mix of old and new
// shards. Write() in declaration order; Finish() publishes. Only one shard file is
// open at a time and each tensor is converted in bounded chunks, so memory stays
// bounded by one tensor. Each file carries {"format": "pt"} metadata, which
// transformers requires of safetensors files that have metadata at all.
// Not thread-safe; movable.
class HfWeightsWriter {
 public:
  // INVALID_ARGUMENT for max_file_bytes <= 0 or a bad declaration (see
  // SafetensorsWriter::Create).
  static StatusOr<HfWeightsWriter> Create(const std::string& dir, std::vector<TensorDecl> tensors,
                                          DType file_dtype, int64_t max_file_bytes);

  Status Write(const std::string& name, const float* data);
  Status Finish();

  // The files Finish() will have written (without the index), in order.
  std::vector<std::string> FileNames() const;

 private:
  HfWeightsWriter() = default;
  Status OpenShard(int shard);

  std::string dir_;
  std::vector<TensorDecl> decls_;
  std::vector<int> shard_of_;  // per declared tensor
  int num_shards_ = 1;
  DType dtype_ = DType::kF32;
  uint64_t total_bytes_ = 0;
  size_t next_ = 0;
  int open_shard_ = -1;
  std::optional<SafetensorsWriter> current_;
  bool finished_ = false;
};

}  // namespace shard
