// RunCommand (how cluster launchers call sbatch, scontrol and kubectl): output
// and exit code captured, stdin fed, the environment added to, programs that
// cannot run named, and a command past its timeout killed with everything it
// started (its own process group), so a hung CLI leaves nothing behind.
#include "coordinator/launchers/command.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

using namespace std::chrono_literals;

class CommandTest : public ScratchTest {};

TEST_F(CommandTest, CapturesOutputCodeStdinAndEnvironment) {
  CommandOptions co;
  co.stdin_data = "from stdin";
  co.env["COMMAND_TEST_VAR"] = "set";
  co.cwd = dir_;
  auto r = RunCommand({"sh", "-c", "cat; echo \" $COMMAND_TEST_VAR $(pwd)\"; echo oops >&2; exit 4"}, co);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 4);
  EXPECT_EQ(r->out, "from stdin set " + fs::canonical(dir_).string() + "\n");
  EXPECT_EQ(r->err, "oops\n");
  EXPECT_EQ(r->Explain("sh"), "sh exited with code 4: oops");
  auto missing = RunCommand({"no-such-cluster-cli"});
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Contains(missing.status().message(), "no-such-cluster-cli")) << missing.status().ToString();
}

TEST_F(CommandTest, ATimeoutKillsTheCommandAndWhatItStarted) {
  CommandOptions co;
  co.timeout_s = 0.5;
  const std::string pid_file = Path("child.pid");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RunCommand({"sh", "-c", "sleep 100 & echo $! > " + pid_file + "; wait"}, co);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), shard::StatusCode::kDeadlineExceeded);
  const pid_t child = std::stoi(ReadBytes(pid_file));
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    const std::string stat = ReadBytes("/proc/" + std::to_string(child) + "/stat");
    const auto paren = stat.rfind(')');
    gone = stat.empty() || (paren != std::string::npos && stat[paren + 2] == 'Z');
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "the command's child " << child << " outlived its timeout";
  if (!gone) ::kill(child, SIGKILL);
}

}  // namespace
}  // namespace shardd::testing
