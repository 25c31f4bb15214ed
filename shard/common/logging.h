// Logging through spdlog. Every line carries the job, attempt and rank once
// SetLogContext has been called, so interleaved worker logs stay readable.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace shard {

// Level names: trace, debug, info, warn, error, off. Unknown names keep "info".
void InitLogging(const std::string& level = "info");

// Puts "[job/attempt/rank]" into every following log line of this process.
void SetLogContext(const std::string& job, int attempt, int rank);

}  // namespace shard

#define LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
