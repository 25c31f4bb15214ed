// The coordinator's state dir (--state-dir) holds the job database (job specs,
// join tokens, hashes of worker tokens), the admin token and every job's
// logs: it is the owner's alone. At start the dir is made (or restricted to)
// 0700 and the database files to 0600; a mode that cannot be fixed is refused
// with the path, the mode and the command that fixes it.
//
// Thread-safety: call once, before anything else opens files there.
#pragma once

#include <string>

#include "shard/common/status.h"

namespace shardd {

// Creates `dir` (mode 0700) or restricts an existing one to 0700, logging a
// warning when it had to change a mode. PERMISSION_DENIED when it cannot.
shard::Status SecureStateDir(const std::string& dir);

// Creates `path` empty with mode 0600 when absent, or restricts an existing
// file to 0600 (SQLite gives its -wal and -shm files the database's mode, so
// securing shardd.db before SQLite opens it secures those too).
shard::Status SecurePrivateFile(const std::string& path);

}  // namespace shardd
