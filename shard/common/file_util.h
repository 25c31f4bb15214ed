// Small file helpers with Status errors that name the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shard/common/status.h"

namespace shard {

StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `data` to `path` so that a crash leaves either the old file or the new
// one, never a mix: temp file in the same directory, fsync, rename, fsync dir.
Status WriteFileAtomic(const std::string& path, const void* data, size_t size);
inline Status WriteFileAtomic(const std::string& path, const std::string& data) {
  return WriteFileAtomic(path, data.data(), data.size());
}

// fsyncs a directory so a rename inside it is durable.
Status FsyncDir(const std::string& dir);

// A read-only memory mapping of a whole file. Not copyable; movable.
// Thread-safe for concurrent reads.
class MappedFile {
 public:
  static StatusOr<MappedFile> Open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace shard
