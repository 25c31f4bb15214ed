#include "shard/common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace shard {
namespace {
std::string Pattern(const std::string& context) {
  return "%Y-%m-%d %H:%M:%S.%e %^%L%$ " + context + "%v";
}
}  // namespace

void InitLogging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("shardd");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern(Pattern(""));
  auto lvl = spdlog::level::from_str(level);
  spdlog::set_level(lvl == spdlog::level::off && level != "off" ? spdlog::level::info : lvl);
}

void SetLogContext(const std::string& job, int attempt, int rank) {
  spdlog::set_pattern(Pattern("[" + job + "/a" + std::to_string(attempt) + "/r" +
                              std::to_string(rank) + "] "));
}

}  // namespace shard
