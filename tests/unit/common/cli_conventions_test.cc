// The command-line conventions the three binaries share: usage errors exit 2
// (CLI11's own codes are 105/106/109), --help and --version exit 0, an
// unknown subcommand is named with the nearest one, flags read SHARDD_<FLAG>
// with the command line winning, and errors print as JSON under --json.
#include "shard/common/cli_conventions.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace shard::cli {
namespace {

struct Argv {
  explicit Argv(std::vector<std::string> a) : args(std::move(a)) {
    for (auto& s : args) ptrs.push_back(s.data());
  }
  int argc() { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> args;
  std::vector<char*> ptrs;
};

struct Tool {
  Tool() {
    app.require_subcommand(1);
    AddCommonFlags(app, "tool", &log);
    app.add_option("--state-dir", state_dir, "");
    status = app.add_subcommand("status", "");
    status->add_option("job", job)->required();
    auto* m = app.add_subcommand("metrics", "");
    m->add_option("--last", last);
    app.add_subcommand("checkpoints", "");
    BindEnv(app);
  }
  std::optional<int> Run(std::vector<std::string> args) {
    args.insert(args.begin(), "tool");
    Argv a(args);
    return Parse(app, a.argc(), a.argv(), "tool");
  }
  CLI::App app{"tool"};
  LogFlags log;
  std::string state_dir, job;
  int64_t last = 0;
  CLI::App* status = nullptr;
};

TEST(CliConventionsTest, UsageErrorsExitTwoAndHelpVersionZero) {
  EXPECT_EQ(Tool().Run({"status", "j"}), std::nullopt);
  EXPECT_EQ(Tool().Run({}), kExitUsage);                             // no subcommand (CLI11: 106)
  EXPECT_EQ(Tool().Run({"status"}), kExitUsage);                     // a required argument (106)
  EXPECT_EQ(Tool().Run({"metrics", "--last", "ten"}), kExitUsage);   // a conversion (106)
  EXPECT_EQ(Tool().Run({"--log-level", "loud", "status", "j"}), kExitUsage);  // a validator (105)
  EXPECT_EQ(Tool().Run({"status", "j", "extra"}), kExitUsage);       // extras (109)
  EXPECT_EQ(Tool().Run({"--bogus", "status", "j"}), kExitUsage);
  testing::internal::CaptureStdout();
  EXPECT_EQ(Tool().Run({"--help"}), kExitOk);
  EXPECT_EQ(Tool().Run({"--version"}), kExitOk);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("tool "), std::string::npos) << out;
}

TEST(CliConventionsTest, UnknownCommandNamesTheNearest) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(Tool().Run({"--state-dir", "status", "stauts", "j"}), kExitUsage);  // --state-dir's value is no command
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("unknown command 'stauts' (did you mean 'status'?)"), std::string::npos) << err;
  EXPECT_EQ(Nearest("checkpoint", {"status", "checkpoints"}), "checkpoints");
  EXPECT_EQ(Nearest("metrcs", {"status", "metrics"}), "metrics");
  EXPECT_EQ(Nearest("xyzzy", {"status", "metrics"}), "");
}

TEST(CliConventionsTest, ErrorsAsJsonUnderJson) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(Tool().Run({"stauts", "--json"}), kExitUsage);
  const std::string out = testing::internal::GetCapturedStdout();
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(j["error"]["exit_code"], 2);
  EXPECT_NE(j["error"]["message"].get<std::string>().find("stauts"), std::string::npos);
}

TEST(CliConventionsTest, FlagsReadTheirVariableAndTheCommandLineWins) {
  EXPECT_EQ(EnvName("--state-dir"), "SHARDD_STATE_DIR");
  EXPECT_EQ(EnvName("--log-format"), "SHARDD_LOG_FORMAT");
  ::setenv("SHARDD_STATE_DIR", "/from/env", 1);
  ::setenv("SHARDD_LOG_LEVEL", "debug", 1);
  Tool a;
  ASSERT_EQ(a.Run({"status", "j"}), std::nullopt);
  EXPECT_EQ(a.state_dir, "/from/env");
  EXPECT_EQ(a.log.level, "debug");
  Tool b;
  ASSERT_EQ(b.Run({"--state-dir", "/flag", "status", "j"}), std::nullopt);
  EXPECT_EQ(b.state_dir, "/flag");
  ::setenv("SHARDD_LOG_LEVEL", "loud", 1);  // a bad value in a variable is a usage error too
  EXPECT_EQ(Tool().Run({"status", "j"}), kExitUsage);
  ::unsetenv("SHARDD_STATE_DIR");
  ::unsetenv("SHARDD_LOG_LEVEL");
}

// CLI11's Range lets NaN through; FiniteRange refuses NaN, infinity and
// values outside the bounds, naming the flag (issue 28 item 13).
TEST(CliConventionsTest, FiniteRangeRefusesNonFiniteAndOutOfRangeNamingTheFlag) {
  auto run = [](std::vector<std::string> args, std::string* err) {
    CLI::App app{"tool"};
    double seconds = 600;
    int slots = 0;
    FiniteRange(app.add_option("--wait-s", seconds, ""), 0, 1e9);
    FiniteRange(app.add_option("--slots", slots, ""), 1, 4096);
    args.insert(args.begin(), "tool");
    Argv a(args);
    testing::internal::CaptureStderr();
    auto code = Parse(app, a.argc(), a.argv(), "tool");
    *err = testing::internal::GetCapturedStderr();
    return code;
  };
  std::string err;
  for (const char* bad : {"nan", "NaN", "inf", "1e999"}) {
    EXPECT_EQ(run({"--wait-s", bad}, &err), kExitUsage) << bad;
    EXPECT_NE(err.find("--wait-s: '" + std::string(bad) + "' is not a finite number (want 0..1000000000)"),
              std::string::npos)
        << err;
  }
  for (const char* bad : {"-5", "1e10"}) {
    EXPECT_EQ(run({"--wait-s", bad}, &err), kExitUsage) << bad;
    EXPECT_NE(err.find("--wait-s: '" + std::string(bad) + "' is out of range 0..1000000000"), std::string::npos)
        << err;
  }
  for (const char* bad : {"0", "-5", "2000000000"}) {
    EXPECT_EQ(run({"--slots", bad}, &err), kExitUsage) << bad;
    EXPECT_NE(err.find("--slots: '" + std::string(bad) + "' is out of range 1..4096"), std::string::npos) << err;
  }
  EXPECT_EQ(run({"--slots", "nan"}, &err), kExitUsage);
  EXPECT_EQ(run({"--slots", "1.5"}, &err), kExitUsage) << "still an integer flag";
  EXPECT_EQ(run({"--wait-s", "0", "--slots", "4096"}, &err), std::nullopt) << err;
  EXPECT_EQ(run({"--wait-s", "2.5e3", "--slots", "1"}, &err), std::nullopt) << err;
  EXPECT_EQ(run({}, &err), std::nullopt) << "defaults are not checked";
}

}  // namespace
}  // namespace shard::cli
