// What the three binaries (shardd, shardd-worker, shardctl) share on their
// command lines (docs/cli.md): --version; --log-level and --log-format; every
// top-level flag also read from SHARDD_<FLAG> (upper case, '-' -> '_');
// usage errors exit 2 with one line (not CLI11's 105/106/109); an unknown
// subcommand is named with the nearest one suggested; under --json an error
// is one JSON object on stdout.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace CLI {
class App;
class Option;
}

namespace shard::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;  // a bad command line or bad input

struct LogFlags {
  std::string level = "info";  // trace, debug, info, warn, error, off
  std::string format = "text"; // text or json
};

// Adds --version (prints "<program> <version>") and --log-level/--log-format.
void AddCommonFlags(CLI::App& app, const std::string& program, LogFlags* log);

// Refuses a value of `opt` (a number flag) that is not a finite number in
// [lo, hi], naming the flag and the bounds: a usage error, exit 2. CLI11's own
// Range lets NaN through and nothing bounds a flag by default. Returns `opt`.
CLI::Option* FiniteRange(CLI::Option* opt, double lo, double hi);

// The variable a flag is read from: "--state-dir" -> "SHARDD_STATE_DIR".
std::string EnvName(const std::string& flag);

// Gives every option of `app` itself (not its subcommands') with a long name
// its SHARDD_<FLAG> variable, except the flags named in `skip` (spelled
// "--name"). A flag on the command line wins over its variable.
void BindEnv(CLI::App& app, const std::vector<std::string>& skip = {});

// The candidate closest to `word` by edit distance, when close enough to be a
// likely typo (or `word` is a prefix of it); "" otherwise.
std::string Nearest(const std::string& word, const std::vector<std::string>& candidates);

// Parses; nullopt: go on. Otherwise the process should exit with the returned
// code: 0 after --help/--version (printed), 2 after a usage error (printed as
// one line "<program>: <message>", or as JSON when argv holds --json).
std::optional<int> Parse(CLI::App& app, int argc, char** argv, const std::string& program);

// Prints an error: "<program>: <message>" on stderr, or under json
// {"error": {"code": "INVALID_ARGUMENT", "message": ..., "exit_code": N}} on stdout.
void PrintError(const std::string& program, const Status& st, int exit_code, bool json);

// True when argv holds --json (before any "--").
bool WantsJson(int argc, char** argv);

}  // namespace shard::cli
