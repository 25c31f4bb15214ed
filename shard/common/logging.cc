#include "shard/common/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>

namespace shard {
namespace {

std::string Pattern(const std::string& context) {
  return "%Y-%m-%d %H:%M:%S.%e %^%L%$ " + context + "%v";
}

struct Context {
  bool set = false;
  std::string job;
  int attempt = 0;
  int rank = 0;
};

// One JSON object per line. The context is copied in, so a later
// SetLogContext installs a new formatter rather than racing this one.
class JsonFormatter final : public spdlog::formatter {
 public:
  explicit JsonFormatter(Context ctx) : ctx_(std::move(ctx)) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    using namespace std::chrono;
    const auto t = msg.time;
    const std::time_t secs = system_clock::to_time_t(t);
    std::tm tm;
    gmtime_r(&secs, &tm);
    char buf[40];
    const size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    const long ms = static_cast<long>(duration_cast<milliseconds>(t.time_since_epoch()).count() % 1000);
    std::snprintf(buf + n, sizeof(buf) - n, ".%03ldZ", ms);
    nlohmann::ordered_json j = {{"time", buf},
                        {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                                              spdlog::level::to_string_view(msg.level).size())}};
    if (ctx_.set) {
      j["job"] = ctx_.job;
      j["attempt"] = ctx_.attempt;
      j["rank"] = ctx_.rank;
    }
    j["msg"] = std::string(msg.payload.data(), msg.payload.size());
    const std::string line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(ctx_); }

 private:
  Context ctx_;
};

std::mutex g_mu;
bool g_json = false;

}  // namespace

void InitLogging(const std::string& level, const std::string& format) {
  auto logger = spdlog::get("shardd");
  if (!logger) logger = spdlog::stderr_color_mt("shardd");
  spdlog::set_default_logger(logger);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_json = format == "json";
  }
  if (format == "json") spdlog::set_formatter(std::make_unique<JsonFormatter>(Context{}));
  else spdlog::set_pattern(Pattern(""));
  auto lvl = spdlog::level::from_str(level);
  spdlog::set_level(lvl == spdlog::level::off && level != "off" ? spdlog::level::info : lvl);
}

void SetLogContext(const std::string& job, int attempt, int rank) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_json) spdlog::set_formatter(std::make_unique<JsonFormatter>(Context{true, job, attempt, rank}));
  else spdlog::set_pattern(Pattern("[" + job + "/a" + std::to_string(attempt) + "/r" + std::to_string(rank) + "] "));
}

}  // namespace shard
