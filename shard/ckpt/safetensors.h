// The safetensors format (Hugging Face): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}}, then the raw tensor bytes. Offsets are
// relative to the first byte after the header.
//
// SafetensorsFile reads a file shardd did not write (a download, another tool's
// export), so Open() validates every header field against the file size before
// any tensor byte is touched — as the official reader does, the tensors must
// lie back to back over the whole data section (no two sharing a byte, no
// gap, no tail) — so a corrupt file fails at Open with one line naming the
// path and the problem (both tensors of an overlap), never later as a crash
// inside a read or as one tensor read as another.
// SafetensorsWriter streams one tensor at a time so exporting a model never
// holds more than one tensor in memory.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "shard/common/file_util.h"
#include "shard/common/status.h"
#include "shard/tensor/dtype.h"

namespace shard {

// The largest header the reader accepts: the reference implementation's cap, so a
// corrupt length field cannot make us parse gigabytes as JSON.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One tensor as the header describes it.
struct TensorInfo {
  std::string name;
  std::string dtype_name;      // as spelled in the file: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;  // set for the dtypes shardd converts to fp32: F32, BF16, F16
  std::vector<int64_t> shape;  // [] is a scalar (numel 1)
  int64_t numel = 0;
  uint64_t data_begin = 0;  // byte range in the data section (after the header)
  uint64_t data_end = 0;

  bool supported() const { return dtype.has_value(); }
};

// "[4096, 11008]"; "[]" for a scalar.
std::string ShapeToString(const std::vector<int64_t>& shape);

// The safetensors spelling of a shardd dtype: "F32", "BF16", "F16".
const char* SafetensorsDTypeName(DType t);

// A validated, memory-mapped safetensors file. Read-only; movable, not copyable.
// Thread-safe: every method is const and reads only the immutable mapping, so
// ranks or loader threads may read different tensors concurrently.
class SafetensorsFile {
 public:
  // Maps `path` and validates the header (see the file comment). DATA_LOSS for a
  // truncated or corrupt file, NOT_FOUND when it cannot be opened.
  static StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // In data order (ascending data_begin), the order a sequential reader wants.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when the file has no tensor `name`.
  const TensorInfo* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Converts the whole tensor to fp32 into dst (numel floats). The shape must
  // equal expected_shape exactly: loading a [4096, 11008] weight into a
  // [11008, 4096] slot is a config mismatch, not something to reshape silently.
  // NOT_FOUND for a missing name, INVALID_ARGUMENT for a shape mismatch or a dtype
  // shardd cannot convert.
  Status ReadF32(const std::string& name, const std::vector<int64_t>& expected_shape, float* dst) const;

  // Converts elements [elem_begin, elem_begin + elem_count) of the row-major
  // flattened tensor to fp32 into dst: a sharded load reads only its slice.
  // OUT_OF_RANGE when the range does not lie inside the tensor.
  Status ReadF32Range(const std::string& name, int64_t elem_begin, int64_t elem_count, float* dst) const;

 private:
  SafetensorsFile() = default;
  Status CheckReadable(const std::string& name, const TensorInfo** out) const;

  MappedFile file_;
  const uint8_t* data_ = nullptr;  // first byte after the header, inside file_
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// A tensor to be written: its name and shape (the dtype is the file's).
struct TensorDecl {
  std::string name;
  std::vector<int64_t> shape;
};

// Streams a safetensors file: Create() writes the header for every declared
// tensor (laid out back to back in declaration order), Write() appends each
// tensor in declaration order, Finish() makes the file appear at `path`
// atomically (temp file in the same directory, fsync, rename, fsync directory).
// A writer dropped before Finish() removes its temp file, so a failed export
// leaves nothing that looks like a model. Not thread-safe; movable.
class SafetensorsWriter {
 public:
  // INVALID_ARGUMENT for an empty, duplicate or reserved ("__metadata__") name or a
  // negative dimension; NOT_FOUND when the temp file cannot be created.
  static StatusOr<SafetensorsWriter> Create(const std::string& path, std::vector<TensorDecl> tensors,
                                            DType file_dtype,
                                            std::map<std::string, std::string> metadata = {});
  SafetensorsWriter(SafetensorsWriter&& o) noexcept { *this = std::move(o); }
  SafetensorsWriter& operator=(SafetensorsWriter&& o) noexcept;
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  ~SafetensorsWriter();

  // Converts numel fp32 values to the file dtype and appends them. `name` must be
  // the next declared tensor (FAILED_PRECONDITION otherwise). After any failure the
  // writer is dead: the temp file is gone and every later call returns the error.
  Status Write(const std::string& name, const float* data);
  // FAILED_PRECONDITION if a declared tensor was not written.
  Status Finish();

  const std::string& path() const { return path_; }
  // Bytes of tensor data the finished file holds (excluding the header).
  uint64_t data_bytes() const { return data_bytes_; }

 private:
  SafetensorsWriter() = default;
  Status WriteBytes(const void* p, size_t n);
  Status Fail(Status s);  // closes and removes the temp file, remembers s
  void Abandon();

  std::string path_;
  std::string tmp_path_;
  std::vector<TensorDecl> decls_;
  std::vector<int64_t> numels_;
  DType dtype_ = DType::kF32;
  size_t next_ = 0;
  int fd_ = -1;
  bool finished_ = false;
  Status failed_;
  uint64_t data_bytes_ = 0;
};

}  // namespace shard
