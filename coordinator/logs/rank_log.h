// What a rank's log says about why it died: the last error line a worker
// wrote (spdlog's "E"/"C" lines, or shardd-worker's one-line "shardd-worker:
// ..." reason). Used when a rank exits without having reported its error, so
// the job's status names the cause instead of only an exit code.
//
// Thread-safety: pure functions over the filesystem.
#pragma once

#include <string>

namespace shardd {

// The last error line of `text` (a log's tail), without its timestamp and
// level, at most 300 characters; "" when there is none.
std::string LastErrorLine(const std::string& text);

// LastErrorLine of the last 16 KiB of `root`/`rel`, opened without following
// symlinks (the job's processes can write there); "" when unreadable.
std::string LastErrorLineOfLog(const std::string& root, const std::string& rel);

}  // namespace shardd
