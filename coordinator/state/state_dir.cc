#include "coordinator/state/state_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "shard/common/logging.h"

namespace shardd {
namespace {

std::string Octal(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// Clears the group and other bits of `path` (a dir or a file), naming `what`.
shard::Status Restrict(const std::string& path, const struct stat& st, mode_t want, const char* what,
                       const char* fix) {
  if ((st.st_mode & 077) == 0) return shard::OkStatus();
  if (::chmod(path.c_str(), want) != 0)
    return shard::PermissionDenied(std::string(what) + " " + path + " is mode " + Octal(st.st_mode) +
                                   " (others may read it) and cannot be restricted: " + std::strerror(errno) + "; " +
                                   fix + " " + path);
  LOG_WARN("{} {} was mode {}; set to {} (it holds the job database and tokens)", what, path, Octal(st.st_mode),
           Octal(want));
  return shard::OkStatus();
}

}  // namespace

shard::Status SecureStateDir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    std::error_code ec;
    const std::filesystem::path p(dir);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return shard::InvalidArgument("cannot create state dir " + dir + ": " + std::strerror(errno));
    if (::stat(dir.c_str(), &st) != 0)
      return shard::InvalidArgument("cannot create state dir " + dir + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return shard::InvalidArgument("state dir " + dir + " is not a directory");
  return Restrict(dir, st, 0700, "state dir", "chmod 700");
}

shard::Status SecurePrivateFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return shard::PermissionDenied("cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  const int rc = ::fstat(fd, &st);
  ::close(fd);
  if (rc != 0) return shard::Internal("cannot stat " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return shard::InvalidArgument(path + " is not a regular file");
  return Restrict(path, st, 0600, "state file", "chmod 600");
}

}  // namespace shardd
