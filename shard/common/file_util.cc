#include "shard/common/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "shard/common/owned_dir.h"

namespace shard {

StatusOr<int> OpenBeneath(const std::string& root, const std::string& rel, int flags, unsigned mode) {
  std::vector<std::string> parts;
  for (size_t start = 0; start <= rel.size();) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    std::string part = rel.substr(start, end - start);
    if (part == "..") return InvalidArgument("path " + rel + " leaves " + root + " ('..')");
    if (!part.empty() && part != ".") parts.push_back(std::move(part));
    start = end + 1;
  }
  if (parts.empty()) return InvalidArgument("no file named beneath " + root);
  int dir = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return NotFound("cannot open " + root + ": " + std::strerror(errno));
  std::string at = root;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    at += "/" + parts[i];
    const int fd = last ? ::openat(dir, parts[i].c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode)
                        : ::openat(dir, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    ::close(dir);
    if (fd < 0) {
      struct stat st;
      if ((err == ELOOP || err == ENOTDIR) && ::lstat(at.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
        return PermissionDenied(at + " is a symbolic link; not followed");
      if (err == ENOENT) return NotFound(at + " does not exist");
      return Internal("cannot open " + at + ": " + std::strerror(err));
    }
    dir = fd;
  }
  return dir;
}

Status CheckPlainName(const std::string& key, const std::string& name, size_t max_length) {
  if (name.size() > max_length)
    return InvalidArgument(key + ": " + std::to_string(name.size()) + " characters is too long; the limit is " +
                           std::to_string(max_length) + " (it becomes a directory name)");
  const bool plain = !name.empty() && name != "." && name != ".." &&
                     std::all_of(name.begin(), name.end(), [](char ch) {
                       return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
                     });
  if (!plain)
    return InvalidArgument(key + ": '" + name + "' must be a plain file name (letters, digits, '.', '_', '-')");
  return OkStatus();
}
namespace {
std::string Errno() { return std::strerror(errno); }

// "a FIFO", "a directory", ...: what a path that is not a regular file is.
std::string KindOf(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

// Opens `path` for reading without blocking (a FIFO opened O_RDONLY would
// wait for a writer) and checks it is a regular file; its size in *size.
StatusOr<int> OpenRegular(const std::string& path, bool follow_links, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW));
  if (fd < 0) {
    const int err = errno;
    struct stat ls {};
    if (!follow_links && err == ELOOP && ::lstat(path.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode))
      return PermissionDenied(path + " is a symbolic link; not followed");
    return NotFound("cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string err = Errno();
    ::close(fd);
    return DataLoss("cannot stat " + path + ": " + err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + " is not a regular file (it is " + KindOf(st.st_mode) + ")");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace

StatusOr<std::string> ReadFileToString(const std::string& path, const ReadFileOptions& options) {
  uint64_t size = 0;
  ASSIGN_OR_RETURN(int fd, OpenRegular(path, options.follow_links, &size));
  if (options.expected_size >= 0 && size != static_cast<uint64_t>(options.expected_size)) {
    ::close(fd);
    return DataLoss(path + " has " + std::to_string(size) + " bytes, " + std::to_string(options.expected_size) +
                    " expected");
  }
  std::string out(size, '\0');
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, out.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = n < 0 ? Errno() : "the file shrank while read";
      ::close(fd);
      return DataLoss("read error on " + path + ": " + err);
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return NotFound("cannot open directory " + dir + ": " + Errno());
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return DataLoss("fsync of directory " + dir + " failed: " + Errno());
  return OkStatus();
}

Status WriteFileAtomic(const std::string& path, const void* data, size_t size) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::string dir = p.parent_path().empty() ? "." : p.parent_path().string();
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // A private folder's files are private (the memory tier's: owned_dir.h).
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, NewFileMode(dir));
  if (fd < 0) return NotFound("cannot create " + tmp + ": " + Errno());
  const char* ptr = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    ssize_t n = ::write(fd, ptr, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = Errno();
      ::close(fd);
      ::unlink(tmp.c_str());
      return DataLoss("write to " + tmp + " failed: " + err);
    }
    ptr += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    std::string err = Errno();
    ::close(fd);
    ::unlink(tmp.c_str());
    return DataLoss("fsync of " + tmp + " failed: " + err);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = Errno();
    ::unlink(tmp.c_str());
    return DataLoss("rename " + tmp + " -> " + path + " failed: " + err);
  }
  return FsyncDir(dir);
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_ && size_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ && size_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  uint64_t size = 0;
  ASSIGN_OR_RETURN(int fd, OpenRegular(path, /*follow_links=*/true, &size));
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string err = Errno();
      ::close(fd);
      return DataLoss("mmap of " + path + " failed: " + err);
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

}  // namespace shard
