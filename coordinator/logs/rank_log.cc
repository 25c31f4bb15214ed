#include "coordinator/logs/rank_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "shard/common/file_util.h"

namespace shardd {
namespace {

constexpr size_t kMaxLine = 300;
constexpr int64_t kTailBytes = 16 << 10;

// "2026-12-01 14:40:30.123 E [job/a1/r0] text" -> "text" for E and C lines.
bool SpdlogError(const std::string& line, std::string* msg) {
  std::istringstream in(line);
  std::string date, time, level;
  if (!(in >> date >> time >> level)) return false;
  if (date.size() != 10 || date[4] != '-' || (level != "E" && level != "C")) return false;
  std::string rest;
  std::getline(in, rest);
  rest.erase(0, rest.find_first_not_of(' '));
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find("] ");
    if (close != std::string::npos) rest.erase(0, close + 2);
  }
  *msg = rest;
  return true;
}

}  // namespace

std::string LastErrorLine(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    lines.push_back(l);
  }
  static const std::string kWorker = "shardd-worker: ";
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    std::string msg;
    if (it->rfind(kWorker, 0) == 0) msg = it->substr(kWorker.size());
    else if (!SpdlogError(*it, &msg)) continue;
    if (msg.empty()) continue;
    if (msg.size() > kMaxLine) msg = msg.substr(0, kMaxLine - 3) + "...";
    return msg;
  }
  return "";
}

std::string LastErrorLineOfLog(const std::string& root, const std::string& rel) {
  auto fd = shard::OpenBeneath(root, rel, O_RDONLY | O_NONBLOCK);
  if (!fd.ok()) return "";
  struct stat st;
  std::string text;
  if (::fstat(*fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const int64_t n = std::min<int64_t>(st.st_size, kTailBytes);
    text.resize(n);
    const ssize_t got = ::pread(*fd, text.data(), n, st.st_size - n);
    text.resize(got > 0 ? got : 0);
  }
  ::close(*fd);
  return LastErrorLine(text);
}

}  // namespace shardd
