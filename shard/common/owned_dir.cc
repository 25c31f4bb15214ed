#include "shard/common/owned_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace shard {

namespace {

constexpr int kMaxRemoveDepth = 32;  // a step folder is one level deep; deeper is not the tier's

std::string Octal(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

// The folder behind `fd` is a directory of this user that only it may write.
Status CheckOwned(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Internal("cannot stat " + path + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return FailedPrecondition(path + " is not a directory");
  if (st.st_uid != ::geteuid())
    return PermissionDenied(path + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
                            std::to_string(::geteuid()) +
                            "); the memory tier uses only its own user's folders: remove it or choose another "
                            "checkpoint.memory.dir");
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return PermissionDenied(path + " is writable by group or others (mode " + Octal(st.st_mode) +
                            "); the memory tier uses only folders its user alone can write: chmod 700 " + path);
  return OkStatus();
}

// Opens (with `create`, first makes 0700) the folder `name` inside `parent`
// without following a link, then checks it.
StatusOr<int> OpenChecked(int parent, const std::string& name, const std::string& path, bool create) {
  const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(parent, name.c_str(), flags);
  if (fd < 0 && errno == ENOENT && create) {
    if (::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST)
      return PermissionDenied("cannot create " + path + ": " + std::strerror(errno));
    fd = ::openat(parent, name.c_str(), flags);
  }
  if (fd < 0) {
    const int err = errno;
    struct stat st;
    const bool seen = ::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (seen && S_ISLNK(st.st_mode))
      return PermissionDenied(path + " is a symbolic link; the memory tier never follows one: remove it");
    if (seen && !S_ISDIR(st.st_mode)) return FailedPrecondition(path + " is not a directory");
    if (err == ENOENT) return NotFound(path + " does not exist");
    return PermissionDenied("cannot open " + path + ": " + std::strerror(err));
  }
  if (Status st = CheckOwned(fd, path); !st.ok()) {
    ::close(fd);
    return st;
  }
  return fd;
}

std::vector<std::string> Components(const std::string& rel) {
  std::vector<std::string> parts;
  for (size_t start = 0; start <= rel.size();) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    std::string part = rel.substr(start, end - start);
    if (!part.empty() && part != ".") parts.push_back(std::move(part));
    start = end + 1;
  }
  return parts;
}

// mkdir -p of `dir`'s missing folders, 0700 (the root's ancestors).
void MakeAncestors(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at < dir.size() && dir[at] != '/') continue;
    (void)::mkdir(dir.substr(0, at).c_str(), 0700);  // EEXIST and the rest: the open below says
  }
}

Status RemoveAt(int dirfd, const std::string& name, const std::string& path, int depth) {
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT ? OkStatus() : DataLoss("cannot delete " + path + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT)
      return DataLoss("cannot delete " + path + ": " + std::strerror(errno));
    return OkStatus();
  }
  if (depth >= kMaxRemoveDepth) return DataLoss("cannot delete " + path + ": folders nested too deep");
  const int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? OkStatus() : DataLoss("cannot open " + path + ": " + std::strerror(errno));
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return DataLoss("cannot list " + path + ": " + std::strerror(errno));
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  Status out = OkStatus();
  for (const std::string& n : names) {
    Status st = RemoveAt(::dirfd(d), n, path + "/" + n, depth + 1);
    if (!st.ok() && out.ok()) out = st;
  }
  ::closedir(d);
  RETURN_IF_ERROR(out);
  if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
    return DataLoss("cannot delete " + path + ": " + std::strerror(errno));
  return OkStatus();
}

}  // namespace

OwnedDir& OwnedDir::operator=(OwnedDir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

OwnedDir::~OwnedDir() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<OwnedDir> OwnedDir::Open(const std::string& root_in, const std::string& rel, bool create) {
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  const size_t slash = root.rfind('/');
  if (root.empty() || root.front() != '/' || slash == std::string::npos || slash + 1 >= root.size())
    return InvalidArgument("memory tier root " + root_in + ": not an absolute folder path");
  for (const std::string& part : Components(rel))
    if (part == "..") return InvalidArgument("memory tier folder " + rel + " leaves " + root + " ('..')");
  const std::string parent = slash == 0 ? "/" : root.substr(0, slash);
  if (create) MakeAncestors(parent);
  const int pfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound(parent + " does not exist");
    if (err == ENOTDIR) return FailedPrecondition(parent + " is not a directory");
    return PermissionDenied("cannot open " + parent + ": " + std::strerror(err));
  }
  struct stat pst;
  if (::fstat(pfd, &pst) == 0 && (pst.st_mode & (S_IWGRP | S_IWOTH)) && !(pst.st_mode & S_ISVTX) &&
      pst.st_uid != ::geteuid()) {
    ::close(pfd);
    return PermissionDenied(parent + " (mode " + Octal(pst.st_mode) +
                            ") is writable by others and not sticky: another user could replace " + root +
                            "; choose a checkpoint.memory.dir in a folder only you can write");
  }
  auto rfd = OpenChecked(pfd, root.substr(slash + 1), root, create);
  ::close(pfd);
  if (!rfd.ok()) return rfd.status();
  OwnedDir d;
  d.fd_ = *rfd;
  d.path_ = root;
  for (const std::string& part : Components(rel)) {
    ASSIGN_OR_RETURN(OwnedDir sub, d.Sub(part, create));
    d = std::move(sub);
  }
  return d;
}

StatusOr<OwnedDir> OwnedDir::OpenUnderParent(const std::string& path, bool create) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 >= p.size())
    return InvalidArgument("memory tier folder " + path + ": not <root>/<folder>");
  return Open(p.substr(0, slash), p.substr(slash + 1), create);
}

StatusOr<OwnedDir> OwnedDir::Sub(const std::string& name, bool create) const {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return InvalidArgument("memory tier folder name '" + name + "' in " + path_ + " is not one plain component");
  ASSIGN_OR_RETURN(int fd, OpenChecked(fd_, name, path_ + "/" + name, create));
  OwnedDir d;
  d.fd_ = fd;
  d.path_ = path_ + "/" + name;
  return d;
}

Status OwnedDir::Remove(const std::string& name) const { return RemoveEntryAt(fd_, name, path_ + "/" + name); }

Status RemoveEntryAt(int dir_fd, const std::string& name, const std::string& path) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return InvalidArgument("cannot delete " + path + ": '" + name + "' is not one plain component");
  return RemoveAt(dir_fd, name, path, 0);
}

Status CheckOwnableDir(const std::string& path) {
  if (path.empty() || path.front() != '/') return InvalidArgument(path + " is not an absolute path");
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) return PermissionDenied(path + " is a symbolic link; the memory tier never follows one");
    if (!S_ISDIR(st.st_mode)) return FailedPrecondition(path + " is not a directory");
    if (st.st_uid != ::geteuid())
      return PermissionDenied(path + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
                              std::to_string(::geteuid()) + ")");
    if (st.st_mode & (S_IWGRP | S_IWOTH))
      return PermissionDenied(path + " is writable by group or others (mode " + Octal(st.st_mode) + "): chmod 700 " +
                              path);
    if (::access(path.c_str(), W_OK | X_OK) != 0)
      return PermissionDenied("cannot create files in " + path + ": " + std::strerror(errno));
    return OkStatus();
  }
  if (errno != ENOENT && errno != ENOTDIR)
    return PermissionDenied("cannot inspect " + path + ": " + std::strerror(errno));
  std::string up = path;
  while (up.size() > 1) {
    up = up.substr(0, std::max<size_t>(1, up.rfind('/')));
    if (::stat(up.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) continue;
      return PermissionDenied(path + " cannot be created: " + up + ": " + std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return FailedPrecondition(path + " cannot be created: " + up + " is not a directory");
    if (::access(up.c_str(), W_OK | X_OK) != 0)
      return PermissionDenied(path + " cannot be created: no permission to create folders in " + up);
    return OkStatus();
  }
  return OkStatus();
}

unsigned NewFileMode(const std::string& dir) {
  struct stat st;
  if (::stat(dir.empty() ? "." : dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 077) == 0)
    return 0600;
  return 0644;
}

}  // namespace shard
