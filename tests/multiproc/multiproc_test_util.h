// What the multi-process tests (fsdp/, ckpt/) share: reading a process's
// output files, starting one with its output to files, naming how a process
// ended, the suite's temporary folder and
// its numbered run folders, and the tiny job they train (its token stream and
// job file).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace shard::testing {

inline std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> NonEmptyLines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// How a reaped process ended, from its raw wait status.
inline std::string Describe(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// fork/exec argv (argv[0]: the binary) with one compute and one OpenBLAS
// thread, the variables `unset` removed and then `env` set, stdout and stderr
// to the files out and err. Returns the child's pid; a failed exec exits 127
// naming the binary.
inline pid_t Spawn(std::vector<std::string> argv, const std::vector<std::pair<std::string, std::string>>& env,
                   const std::vector<std::string>& unset, const std::string& out, const std::string& err) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(out.c_str(), "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    ::setenv("SHARDD_NUM_THREADS", "1", 1);
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    for (const auto& k : unset) ::unsetenv(k.c_str());
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    std::fprintf(stderr, "exec %s failed\n", cargv[0]);
    ::_exit(127);
  }
  return pid;
}

// A token stream a tiny model can learn, written to `path` as uint32: random
// phrases over a 512-token vocabulary (`phrases` of them, each min_len to
// min_len + len_span - 1 tokens long, drawn with `seed`), repeated in random
// order until there are at least `count` tokens.
inline void WritePhraseTokens(const std::string& path, uint32_t seed, size_t phrases, uint32_t min_len,
                              uint32_t len_span, size_t count) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint32_t>> table(phrases);
  for (auto& p : table) {
    p.resize(min_len + rng() % len_span);
    for (auto& t : p) t = rng() % 512;
  }
  std::vector<uint32_t> toks;
  while (toks.size() < count) {
    const auto& p = table[rng() % table.size()];
    toks.insert(toks.end(), p.begin(), p.end());
  }
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(toks.data()), static_cast<std::streamsize>(toks.size() * 4));
}

// A fresh temporary folder <tmp>/<prefix>XXXXXX for a test suite; "" when it
// cannot be made.
inline std::string MakeSuiteDir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
  return ::mkdtemp(tmpl.data()) ? tmpl : "";
}

// Removes the suite's folder, unless SHARDD_KEEP_TEST_DIR is set (to look at
// what the workers wrote).
inline void RemoveSuiteDir(const std::string& dir) {
  if (!dir.empty() && !std::getenv("SHARDD_KEEP_TEST_DIR")) std::filesystem::remove_all(dir);
}

// The base of a multi-process suite's fixture (Suite: the fixture itself, so
// that each suite has its own folder): root_, the suite's temporary folder
// that the suite's SetUpTestSuite makes (MakeSuiteDir) and fills, removed
// after the suite; and a fresh numbered folder below it per run.
template <class Suite>
class SuiteDirTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { RemoveSuiteDir(root_); }

  // A fresh folder <root_>/<name>-<n> for one run (rendezvous store, outputs).
  std::string NewRunDir(const std::string& name) {
    std::string d = root_ + "/" + name + "-" + std::to_string(++run_counter_);
    std::filesystem::create_directories(d);
    return d;
  }

  inline static std::string root_;
  int run_counter_ = 0;
};

// The job file of the tiny model named `name` trained `steps` steps on the
// token file `tokens` (sequences of 32, shuffled; global batch 8 in micro
// batches of 2; cosine schedule; seed 1234), followed by `tail` (the
// parallel:, checkpoint: and resources: lines).
inline std::string TinyJobYaml(const std::string& name, const std::string& tokens, int steps,
                               const std::string& tail) {
  return "name: " + name + "\n" +
         "model: {preset: tiny}\n"
         "data: {tokens: " + tokens + ", seq_len: 32, shuffle: true}\n"
         "train: {steps: " + std::to_string(steps) + ", global_batch: 8, micro_batch: 2, lr: 3.0e-3, "
         "warmup_steps: 1, schedule: cosine, weight_decay: 0.1, grad_clip: 1.0, seed: 1234, log_every: 100}\n" +
         tail;
}

}  // namespace shard::testing
