#include "coordinator/state/state_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace shardd {
namespace {

// "pid N\naddress A\n" as the holder last wrote it; "" where unknown.
void ReadHolder(int fd, std::string* pid, std::string* address) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return;
  std::istringstream in(std::string(buf, static_cast<size_t>(n)));
  std::string key, value;
  while (in >> key >> value) {
    if (key == "pid") *pid = value;
    if (key == "address") *address = value;
  }
}

}  // namespace

shard::StatusOr<std::unique_ptr<StateDirLock>> StateDirLock::Acquire(const std::string& state_dir) {
  const std::string path = state_dir + "/" + kFileName;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return shard::PermissionDenied("cannot open the state dir's lock " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string pid, address;
    if (err == EWOULDBLOCK) ReadHolder(fd, &pid, &address);
    ::close(fd);
    if (err != EWOULDBLOCK)
      return shard::Unavailable("cannot lock the state dir's lock " + path + ": " + std::strerror(err));
    return shard::Unavailable("state dir " + state_dir + " is in use by another coordinator: pid " +
                              (pid.empty() ? "unknown" : pid) + " serving " +
                              (address.empty() ? "(address not yet known)" : address) + " (lock " + path +
                              "); stop it, or give another --state-dir");
  }
  std::unique_ptr<StateDirLock> lock(new StateDirLock(fd, path));
  RETURN_IF_ERROR(lock->Write(""));
  return lock;
}

StateDirLock::~StateDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor releases the flock
}

shard::Status StateDirLock::Record(const std::string& address) { return Write(address); }

shard::Status StateDirLock::Write(const std::string& address) {
  std::string text = "pid " + std::to_string(::getpid()) + "\n";
  if (!address.empty()) text += "address " + address + "\n";
  // Written over the old text, then cut to length: a reader never sees an
  // empty file in between.
  if (::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ::ftruncate(fd_, static_cast<off_t>(text.size())) != 0)
    return shard::Internal("cannot write the state dir's lock " + path_ + ": " + std::strerror(errno));
  return shard::OkStatus();
}

}  // namespace shardd
