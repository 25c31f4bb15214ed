// shardctl logs' text views: --tail keeps the last N lines (a last line
// without a newline counts), --all-ranks merges rank logs in time order (text
// and JSON timestamps alike; untimed lines stay after their predecessor).
#include "coordinator/ctl/log_view.h"

#include <gtest/gtest.h>

namespace shardctl {
namespace {

TEST(LogViewTest, TailKeepsTheLastLines) {
  EXPECT_EQ(TailLines("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(TailLines("a\nb\nc", 2), "b\nc");
  EXPECT_EQ(TailLines("a\nb\n", 5), "a\nb\n");
  EXPECT_EQ(TailLines("a\nb\n", 0), "a\nb\n");
  EXPECT_EQ(TailLines("", 3), "");
}

TEST(LogViewTest, MergeOrdersByTimeAcrossFormats) {
  const std::string r0 =
      "2026-12-01 10:00:00.100 I [j/a1/r0] first\n"
      "done: 40 steps\n"
      "2026-12-01 10:00:00.300 I [j/a1/r0] third\n";
  const std::string r1 = "{\"time\":\"2026-12-01T10:00:00.200Z\",\"level\":\"info\",\"msg\":\"second\"}\n";
  const std::string merged = MergeRankLogs({{0, r0}, {1, r1}});
  EXPECT_EQ(merged,
            "[rank 0] 2026-12-01 10:00:00.100 I [j/a1/r0] first\n"
            "[rank 0] done: 40 steps\n"
            "[rank 1] {\"time\":\"2026-12-01T10:00:00.200Z\",\"level\":\"info\",\"msg\":\"second\"}\n"
            "[rank 0] 2026-12-01 10:00:00.300 I [j/a1/r0] third\n");
}

}  // namespace
}  // namespace shardctl
