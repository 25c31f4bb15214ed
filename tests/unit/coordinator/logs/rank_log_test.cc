// The last error line of a rank's log names why it died, in the words the
// worker used (spdlog error lines or shardd-worker's one-line reason), and
// the log is read without following a symlink.
#include "coordinator/logs/rank_log.h"

#include <gtest/gtest.h>

#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

TEST(RankLogTest, TheLastErrorLineWithoutTimestampAndContext) {
  const std::string log =
      "2026-12-01 14:40:30.100 I [tiny-1/a1/r0] step 1 loss 5.5\n"
      "2026-12-01 14:40:30.200 E [tiny-1/a1/r0] first error\n"
      "2026-12-01 14:40:30.300 W [tiny-1/a1/r0] a warning\n"
      "2026-12-01 14:40:30.400 E [tiny-1/a1/r0] INTERNAL: cannot write step_00000010: No space left on device\n"
      "2026-12-01 14:40:30.500 I [tiny-1/a1/r0] after it\n";
  EXPECT_EQ(LastErrorLine(log), "INTERNAL: cannot write step_00000010: No space left on device");
  EXPECT_EQ(LastErrorLine("shardd-worker: NOT_FOUND: no CUDA device 3 (2 visible)\n"),
            "NOT_FOUND: no CUDA device 3 (2 visible)");
  EXPECT_EQ(LastErrorLine("2026-12-01 14:40:30.400 C fatal without context\r\n"), "fatal without context");
  EXPECT_EQ(LastErrorLine("just output\nE not a log line\n"), "");
  EXPECT_EQ(LastErrorLine(""), "");
  const std::string longer = LastErrorLine("shardd-worker: " + std::string(1000, 'x') + "\n");
  EXPECT_EQ(longer.size(), 300u);
  EXPECT_EQ(longer.substr(297), "...");
}

class RankLogFileTest : public ScratchTest {};

TEST_F(RankLogFileTest, ReadsTheTailAndNeverFollowsASymlink) {
  WriteBytes(Path("state/jobs/j-1/attempt_1/rank_0.log"),
             std::string(40000, '.') + "\nshardd-worker: INTERNAL: disk full\n");
  EXPECT_EQ(LastErrorLineOfLog(Path("state"), "jobs/j-1/attempt_1/rank_0.log"), "INTERNAL: disk full");
  WriteBytes(Path("elsewhere.log"), "shardd-worker: secret\n");
  fs::create_symlink(Path("elsewhere.log"), Path("state/jobs/j-1/attempt_1/rank_1.log"));
  EXPECT_EQ(LastErrorLineOfLog(Path("state"), "jobs/j-1/attempt_1/rank_1.log"), "");
  EXPECT_EQ(LastErrorLineOfLog(Path("state"), "jobs/j-1/attempt_1/rank_2.log"), "");
}

}  // namespace
}  // namespace shardd::testing
