// Logging through spdlog. Every line carries the job, attempt and rank once
// SetLogContext has been called, so interleaved worker logs stay readable.
// Two formats: text ("2026-01-02 03:04:05.678 I [job/a1/r0] message") and
// json (one object per line: {"time", "level", "job", "attempt", "rank", "msg"};
// the last three once SetLogContext ran).
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace shard {

// Level names: trace, debug, info, warn, error, off. Unknown names keep "info".
// format: "text" or "json" (anything else: text).
void InitLogging(const std::string& level = "info", const std::string& format = "text");

// Puts "[job/attempt/rank]" into every following log line of this process.
void SetLogContext(const std::string& job, int attempt, int rank);

}  // namespace shard

// Through the runtime level only: spdlog's SPDLOG_DEBUG would compile debug
// lines out (its default SPDLOG_ACTIVE_LEVEL is info), so --log-level debug
// showed nothing.
#define LOG_DEBUG(...) SPDLOG_LOGGER_CALL(spdlog::default_logger_raw(), spdlog::level::debug, __VA_ARGS__)
#define LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
