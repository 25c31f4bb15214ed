#include "coordinator/ctl/log_view.h"

#include <algorithm>
#include <cctype>
#include <tuple>

namespace shardctl {
namespace {

// "2026-12-01 15:03:13.378" or the JSON format's "2026-12-01T15:03:13.378Z",
// normalised to the first (sortable as text); "" when the line has neither.
std::string LineTime(const std::string& line) {
  auto looks_like_time = [](const std::string& s, size_t at) {
    if (s.size() < at + 23) return false;
    for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22})
      if (!std::isdigit(static_cast<unsigned char>(s[at + i]))) return false;
    return s[at + 4] == '-' && s[at + 7] == '-' && (s[at + 10] == ' ' || s[at + 10] == 'T') && s[at + 13] == ':' &&
           s[at + 16] == ':' && s[at + 19] == '.';
  };
  size_t at = 0;
  if (line.rfind("{\"time\":\"", 0) == 0) at = 9;
  if (!looks_like_time(line, at)) return "";
  std::string t = line.substr(at, 23);
  t[10] = ' ';
  return t;
}

}  // namespace

std::string TailLines(const std::string& text, int64_t n) {
  if (n <= 0) return text;
  size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;  // the final newline ends the last line
  size_t pos = end;
  for (int64_t seen = 0; pos > 0; --pos)
    if (text[pos - 1] == '\n' && ++seen == n) break;
  return text.substr(pos);
}

std::string MergeRankLogs(const std::vector<std::pair<int, std::string>>& logs) {
  struct Line {
    std::string time;
    size_t log, index;
    std::string text;
  };
  std::vector<Line> lines;
  for (size_t l = 0; l < logs.size(); ++l) {
    const std::string& text = logs[l].second;
    std::string last_time;
    size_t index = 0;
    for (size_t start = 0; start < text.size();) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      start = end + 1;
      const std::string t = LineTime(line);
      if (!t.empty()) last_time = t;
      lines.push_back({last_time, l, index++, "[rank " + std::to_string(logs[l].first) + "] " + line});
    }
  }
  std::stable_sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) {
    return std::tie(a.time, a.log, a.index) < std::tie(b.time, b.log, b.index);
  });
  std::string out;
  for (const Line& l : lines) out += l.text + "\n";
  return out;
}

}  // namespace shardctl
