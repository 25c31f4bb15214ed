// Small file helpers with Status errors that name the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shard/common/status.h"

namespace shard {

// Every reader here reads regular files only: a FIFO, a device (/dev/zero),
// a directory or a socket is refused with one line naming the path, and
// never blocked on (the file is opened O_NONBLOCK, then fstat'ed). A reader
// reads the size fstat gave, no more (a file that grows meanwhile is read to
// that size; one that shrinks is DATA_LOSS). No caller reads /proc or a pipe
// through these; such a caller would need a reader of its own.
struct ReadFileOptions {
  bool follow_links = true;    // false: a symbolic link at the last component is refused (O_NOFOLLOW)
  int64_t expected_size = -1;  // >= 0: a file of any other size is refused (DATA_LOSS) before a byte is read
};
StatusOr<std::string> ReadFileToString(const std::string& path, const ReadFileOptions& options);
inline StatusOr<std::string> ReadFileToString(const std::string& path) { return ReadFileToString(path, {}); }

// Writes `data` to `path` so that a crash leaves either the old file or the new
// one, never a mix: temp file in the same directory, fsync, rename, fsync dir.
Status WriteFileAtomic(const std::string& path, const void* data, size_t size);
inline Status WriteFileAtomic(const std::string& path, const std::string& data) {
  return WriteFileAtomic(path, data.data(), data.size());
}

// The one rule for a name that becomes a path component (a job's name names
// its checkpoint, state and log directories, in shardctl launch, standalone
// workers and the coordinator alike): 1 to max_length letters, digits, '.',
// '_' or '-', and not "." or "..". INVALID_ARGUMENT naming `key` otherwise
// (a name that is too long is said so before its characters are judged).
Status CheckPlainName(const std::string& key, const std::string& name, size_t max_length);

// Opens `rel` (relative, no "..") beneath the directory `root` without
// following a symbolic link at any component (O_NOFOLLOW at each step, via
// openat), so a file or folder swapped for a symlink cannot lead outside
// `root`. `flags` are open(2)'s for the last component (O_NOFOLLOW and
// O_CLOEXEC are added). Returns the fd (the caller closes it). NOT_FOUND when
// a component is missing; PERMISSION_DENIED naming it when it is a symlink.
StatusOr<int> OpenBeneath(const std::string& root, const std::string& rel, int flags, unsigned mode = 0644);

// fsyncs a directory so a rename inside it is durable.
Status FsyncDir(const std::string& dir);

// A read-only memory mapping of a whole regular file (refused otherwise, as
// ReadFileToString, without blocking on a FIFO). Not copyable; movable.
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
