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
#include <fstream>
#include <sstream>
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
}  // namespace

StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path + ": " + Errno());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLoss("read error on " + path);
  return ss.str();
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
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open " + path + ": " + Errno());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string err = Errno();
    ::close(fd);
    return DataLoss("cannot stat " + path + ": " + err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + " is not a regular file");
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
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
