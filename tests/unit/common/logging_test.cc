// Logging: --log-level debug shows LOG_DEBUG lines (they used to be compiled
// out by spdlog's default SPDLOG_ACTIVE_LEVEL), and --log-format json prints
// one parseable object per line with the job/attempt/rank context.
#include "shard/common/logging.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>

namespace shard {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(LoggingTest, DebugLevelShowsDebugLines) {
  InitLogging("debug", "text");
  testing::internal::CaptureStderr();
  LOG_DEBUG("rendezvous: set {}", "k");
  spdlog::default_logger()->flush();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(" D rendezvous: set k"), std::string::npos) << err;
  InitLogging("info", "text");
  testing::internal::CaptureStderr();
  LOG_DEBUG("hidden");
  spdlog::default_logger()->flush();
  EXPECT_EQ(testing::internal::GetCapturedStderr().find("hidden"), std::string::npos);
}

TEST(LoggingTest, JsonFormatIsOneObjectPerLineWithContext) {
  InitLogging("info", "json");
  testing::internal::CaptureStderr();
  LOG_INFO("before \"quoted\"");
  SetLogContext("job-1", 2, 3);
  LOG_WARN("after");
  spdlog::default_logger()->flush();
  const auto lines = Lines(testing::internal::GetCapturedStderr());
  InitLogging("info", "text");
  ASSERT_EQ(lines.size(), 2u);
  auto a = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(a["msg"], "before \"quoted\"");
  EXPECT_EQ(a["level"], "info");
  EXPECT_FALSE(a.contains("job"));
  EXPECT_EQ(lines[0].rfind("{\"time\":\"", 0), 0u);  // time first: sortable, what `logs --all-ranks` reads
  auto b = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(b["level"], "warning");
  EXPECT_EQ(b["job"], "job-1");
  EXPECT_EQ(b["attempt"], 2);
  EXPECT_EQ(b["rank"], 3);
}

}  // namespace
}  // namespace shard
