// Folders only this process's user can reach: the one place that opens the
// memory checkpoint tier's folders (docs/control-plane.md, "Checkpoint tiers",
// "Whose folders"). A root in a world-writable place (/dev/shm) could be
// pre-created, linked or swapped by another user; every folder is therefore
// opened without following a link (O_NOFOLLOW | O_DIRECTORY, each component
// openat() relative to its opened parent) and checked on the opened fd: a
// directory, owned by the effective user, writable by nobody else. A folder
// that is missing is created 0700. Once the root is checked, nothing beneath
// it can be created, renamed or linked by another (non-root) user, so the
// checked path names what was checked; deletions still go through the fd.
//
// Thread-safety: an OwnedDir is immutable after Open (its fd is only read);
// the free functions are pure over the file system.
#pragma once

#include <string>

#include "shard/common/status.h"

namespace shard {

class OwnedDir {
 public:
  // Opens `root` (an absolute path; its own last component is not followed
  // if a link) and then each component of `rel` ("" = the root itself; no
  // "..") beneath it. With `create`, missing folders (the root's missing
  // ancestors too) are made 0700. Each folder of root/rel must be a
  // directory, not a link, owned by geteuid() and not writable by group or
  // others; the root's parent, when writable by others, must be sticky
  // (/dev/shm is 1777), or another user could rename the root away.
  // PERMISSION_DENIED naming the folder and why; NOT_FOUND when missing and
  // !create; FAILED_PRECONDITION when a component is not a directory.
  static StatusOr<OwnedDir> Open(const std::string& root, const std::string& rel, bool create);
  // The same for a path whose parent is the root (the memory tier's job
  // folder: <root>/<job folder>).
  static StatusOr<OwnedDir> OpenUnderParent(const std::string& path, bool create);

  OwnedDir() = default;
  OwnedDir(OwnedDir&& o) noexcept { *this = std::move(o); }
  OwnedDir& operator=(OwnedDir&& o) noexcept;
  OwnedDir(const OwnedDir&) = delete;
  OwnedDir& operator=(const OwnedDir&) = delete;
  ~OwnedDir();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  // The folder `name` (one component) inside this one, checked as Open does.
  StatusOr<OwnedDir> Sub(const std::string& name, bool create) const;
  // Removes the entry `name` (one component) of this folder: a link or file
  // is unlinked, a folder emptied (never through a link) and removed. A
  // missing entry is fine.
  Status Remove(const std::string& name) const;

 private:
  int fd_ = -1;
  std::string path_;
};

// Whether `path` is, or could be made, a folder OwnedDir::Open accepts as a
// root, without creating anything (submission's check): when it exists, a
// directory (not a link) of this user that nobody else may write and that it
// can create files in; when missing, its nearest existing ancestor a
// directory it can create folders in. One line naming the path and why.
Status CheckOwnableDir(const std::string& path);

// Removes the entry `name` of the opened folder `dir_fd` as OwnedDir::Remove
// does (`path` names it in messages): never through a link, never outside.
Status RemoveEntryAt(int dir_fd, const std::string& name, const std::string& path);

// The mode for a new file in `dir`: 0600 when the folder admits nobody but
// its owner (mode & 077 == 0: the memory tier's), else 0644. Files written by
// WriteFileAtomic and WriteShardFile take it, so a private folder's files are
// private too.
unsigned NewFileMode(const std::string& dir);

}  // namespace shard
