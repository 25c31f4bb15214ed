#include "shard/common/cli_conventions.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shard/config.h"

namespace shard::cli {
namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The first word that is not an option (or an option's value) when `app` has
// subcommands, and is not one of them: an unknown command.
std::optional<std::string> UnknownCommand(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  if (names.empty()) return std::nullopt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return std::nullopt;
    if (arg.size() > 1 && arg[0] == '-') {
      if (arg.find('=') != std::string::npos) continue;
      const CLI::Option* opt = app.get_option_no_throw(arg);
      if (opt && opt->get_type_size() != 0) ++i;  // its value follows
      continue;
    }
    if (std::find(names.begin(), names.end(), arg) != names.end()) return std::nullopt;
    return arg;
  }
  return std::nullopt;
}

}  // namespace

void AddCommonFlags(CLI::App& app, const std::string& program, LogFlags* log) {
  app.set_version_flag("--version", program + " " + SHARDD_VERSION, "Print the version and exit");
  app.add_option("--log-level", log->level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--log-format", log->format, "text, or json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

CLI::Option* FiniteRange(CLI::Option* opt, double lo, double hi) {
  char bounds[64];
  std::snprintf(bounds, sizeof(bounds), "%.15g..%.15g", lo, hi);
  const std::string range = bounds;
  opt->check(CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const char* s = text.c_str();
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s, &end);
        // Not a number at all: CLI11's conversion names it after this check.
        if (end == s) return "";
        if (!std::isfinite(v) || errno == ERANGE) return "'" + text + "' is not a finite number (want " + range + ")";
        if (v < lo || v > hi) return "'" + text + "' is out of range " + range;
        return "";
      },
      "in " + range, "FINITE_RANGE"));
  return opt;
}

std::string EnvName(const std::string& flag) {
  std::string name = "SHARDD_";
  for (char c : flag.substr(flag.find_first_not_of('-')))
    name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

void BindEnv(CLI::App& app, const std::vector<std::string>& skip) {
  for (CLI::Option* opt : app.get_options()) {
    const auto& names = opt->get_lnames();
    if (names.empty() || opt->get_type_size() == 0) continue;  // flags without a value, --help
    const std::string flag = "--" + names.front();
    if (flag == "--version" || std::find(skip.begin(), skip.end(), flag) != skip.end()) continue;
    opt->envname(EnvName(flag));
  }
}

std::string Nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const std::string& c : candidates) {
    const size_t d = c.rfind(word, 0) == 0 && !word.empty() ? 0 : EditDistance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : "";
}

bool WantsJson(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return false;
    if (std::strcmp(argv[i], "--json") == 0) return true;
  }
  return false;
}

void PrintError(const std::string& program, const Status& st, int exit_code, bool json) {
  if (!json) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), st.ToString().c_str());
    return;
  }
  nlohmann::json j = {{"error", {{"code", StatusCodeName(st.code())}, {"message", st.message()}, {"exit_code", exit_code}}}};
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

std::optional<int> Parse(CLI::App& app, int argc, char** argv, const std::string& program) {
  const bool json = WantsJson(argc, argv);
  if (auto word = UnknownCommand(app, argc, argv)) {
    std::vector<std::string> names;
    for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(s->get_name());
    const std::string near = Nearest(*word, names);
    PrintError(program,
               InvalidArgument("unknown command '" + *word + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                               "; `" + program + " --help` lists the commands"),
               kExitUsage, json);
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --help-all, --version: printed
    PrintError(program, InvalidArgument(std::string(e.what()) + " (`" + program + " --help` for usage)"), kExitUsage,
               json);
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace shard::cli
