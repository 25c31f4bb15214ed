// shardctl logs: the last N lines of a log (--tail) and one time-ordered view
// of every rank's log (--all-ranks). Pure text functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardctl {

// The last n lines of text (n <= 0: all of it). A last line without "\n" counts.
std::string TailLines(const std::string& text, int64_t n);

// Every rank's lines, each prefixed "[rank R] ", in time order: a line's time
// is its leading "YYYY-MM-DD HH:MM:SS.mmm" (text format) or its "time" field
// (--log-format json); a line without one (a program's own output) keeps
// the time of the line before it in the same log. Ties keep rank order.
std::string MergeRankLogs(const std::vector<std::pair<int, std::string>>& logs);

}  // namespace shardctl
