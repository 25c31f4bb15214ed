// One coordinator per state dir: the daemon (and `shardctl run`'s embedded
// coordinator) holds an exclusive flock on <state dir>/shardd.lock for its
// whole life. Two coordinators on one state dir would both adopt (and kill)
// each other's workers and write the same checkpoint folders at once.
//
// The lock file holds the holder's pid and, once it is serving, its address,
// so a second coordinator is refused naming both. The lock is the kernel's
// flock, not the file: a holder that dies (even by SIGKILL) releases it, and
// a lock file left behind blocks nobody. The descriptor is close-on-exec, so
// the workers a coordinator launches never inherit it (they outlive it).
//
// Read-only views of the state dir (shardctl's offline status, list, logs...)
// never take the lock: they work while a daemon holds it.
//
// Thread-safety: Acquire and Record from one thread; the object is otherwise
// immutable.
#pragma once

#include <memory>
#include <string>

#include "shard/common/status.h"

namespace shardd {

class StateDirLock {
 public:
  // The lock file's name inside the state dir.
  static constexpr const char* kFileName = "shardd.lock";

  // Takes the lock on `state_dir` (which must exist) without waiting.
  // UNAVAILABLE naming the holder's pid and address when another process (or
  // another open of the file in this one) holds it.
  static shard::StatusOr<std::unique_ptr<StateDirLock>> Acquire(const std::string& state_dir);

  // Releases the lock (the file stays; it blocks nobody once released).
  ~StateDirLock();
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;

  // Writes the address this coordinator serves on into the lock file, for the
  // message a second one prints.
  shard::Status Record(const std::string& address);

  const std::string& path() const { return path_; }

 private:
  StateDirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  shard::Status Write(const std::string& address);
  int fd_;
  std::string path_;
};

}  // namespace shardd
