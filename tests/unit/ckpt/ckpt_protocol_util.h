// Helpers of the checkpoint-protocol tests: a scratch directory per test, a
// synthetic "model" of a few units whose values are a pure function of (unit,
// element, array), and a writer of complete committed steps made through the
// real protocol (WriteShardFile → WriteShardReport → CommitStep).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/committer.h"
#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"
#include "tests/unit/scratch_dir_test.h"

namespace shard::ckpt_testing {

namespace fs = std::filesystem;

// A fresh directory per test (tests/unit/scratch_dir_test.h).
class ProtocolTest : public ::shard::testing::ScratchDirTest {};

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Flips one bit of the byte at `offset` (negative: from the end).
inline void FlipByte(const std::string& path, int64_t offset) {
  std::string b = ReadBytes(path);
  ASSERT_FALSE(b.empty()) << path;
  const size_t at = offset >= 0 ? static_cast<size_t>(offset) : b.size() + offset;
  ASSERT_LT(at, b.size());
  b[at] = static_cast<char>(b[at] ^ 0x10);
  WriteBytes(path, b);
}

// The value of element i of unit u in array `which` (0 params, 1 m, 2 v) at
// checkpoint step `step`: distinct everywhere, so a misplaced element shows.
inline float Value(int64_t step, int u, int which, int64_t i) {
  return static_cast<float>(step * 1e5 + u * 1e4 + which * 3000 + i) * (which == 2 ? 1e-3f : 1.0f);
}

inline constexpr uint64_t kModelHash = 0x1234abcd5678ef00ull;

// The synthetic model: unit names and sizes (odd sizes, so shards are uneven).
inline std::vector<std::pair<std::string, int64_t>> Units() {
  return {{"embed", 37}, {"layers.0", 101}, {"final", 10}};
}

inline Manifest BaseManifest(int64_t step, int shard_count) {
  Manifest m;
  m.job = "job";
  m.step = step;
  m.world = shard_count;
  m.strategy = "full_shard";
  m.shard_count = shard_count;
  m.model_hash = kModelHash;
  m.model_config = "{\"hidden_size\":8}";
  m.units = Units();
  m.samples_seen = step * 8;
  m.seed = 7;
  m.shuffle = true;
  m.global_batch = 8;
  m.total_steps = 100;
  m.tokens_seen = step * 8 * 32;
  return m;
}

// The range [begin, begin+count) shard `r` of `n` holds of a unit of `numel`
// elements, cut as FSDP does (equal padded shards; the last ones may be short
// or empty).
inline std::pair<int64_t, int64_t> ShardRange(int64_t numel, int r, int n) {
  const int64_t per = (numel + n - 1) / n;
  const int64_t b = std::min<int64_t>(numel, r * per), e = std::min<int64_t>(numel, (r + 1) * per);
  return {b, e - b};
}

using UnitList = std::vector<std::pair<std::string, int64_t>>;

inline ShardHeader HeaderFor(int64_t step, int r, int n, const UnitList& units = Units(),
                             uint64_t model_hash = kModelHash) {
  ShardHeader h;
  h.step = step;
  h.world = n;
  h.rank = r;
  h.shard_rank = r;
  h.shard_count = n;
  h.model_hash = model_hash;
  for (const auto& [name, numel] : units) {
    ShardUnit su;
    su.name = name;
    su.numel = numel;
    std::tie(su.begin, su.count) = ShardRange(numel, r, n);
    h.units.push_back(su);
  }
  return h;
}

// Writes shard r of n for `step` into step_dir (values from Value()); returns
// what was written. `storage` keeps the arrays alive.
inline WrittenFile WriteShard(const std::string& step_dir, int64_t step, int r, int n, const UnitList& units = Units(),
                              uint64_t model_hash = kModelHash) {
  ShardHeader h = HeaderFor(step, r, n, units, model_hash);
  std::vector<std::vector<float>> storage;
  std::vector<ShardUnitData> data;
  for (size_t u = 0; u < h.units.size(); ++u) {
    for (int which = 0; which < 3; ++which) {
      std::vector<float> a(static_cast<size_t>(h.units[u].count));
      for (int64_t i = 0; i < h.units[u].count; ++i) a[i] = Value(step, static_cast<int>(u), which, h.units[u].begin + i);
      storage.push_back(std::move(a));
    }
  }
  for (size_t u = 0; u < h.units.size(); ++u)
    data.push_back({storage[3 * u].data(), storage[3 * u + 1].data(), storage[3 * u + 2].data()});
  auto wf = WriteShardFile(step_dir, h, data);
  EXPECT_TRUE(wf.ok()) << wf.status().ToString();
  return wf.ok() ? *wf : WrittenFile{};
}

// A complete step: every shard written and reported, then committed (by the
// run `run_fingerprint`, "" = none recorded).
// A complete step of `base` (its step, shard count, units and model hash).
inline std::string MakeCommittedStepOf(const std::string& job_dir, const Manifest& base) {
  const std::string step_dir = job_dir + "/" + StepDirName(base.step);
  fs::create_directories(step_dir);
  for (int r = 0; r < base.shard_count; ++r) {
    WrittenFile wf = WriteShard(step_dir, base.step, r, base.shard_count, base.units, base.model_hash);
    EXPECT_TRUE(WriteShardReport(step_dir, wf, r).ok());
  }
  Status st = CommitStep(step_dir, base, std::chrono::milliseconds(2000));
  EXPECT_TRUE(st.ok()) << st.ToString();
  return step_dir;
}

inline std::string MakeCommittedStep(const std::string& job_dir, int64_t step, int n,
                                     const std::string& run_fingerprint = "") {
  Manifest base = BaseManifest(step, n);
  base.run_fingerprint = run_fingerprint;
  if (!run_fingerprint.empty()) base.run_keys = {{"train.lr", run_fingerprint == "00000000000000aa" ? "0.003" : "0.001"}};
  return MakeCommittedStepOf(job_dir, base);
}

// An uncommitted step directory: shards written (and reported), no COMMITTED.
inline std::string MakePartialStep(const std::string& job_dir, int64_t step, int n) {
  const std::string step_dir = job_dir + "/" + StepDirName(step);
  fs::create_directories(step_dir);
  for (int r = 0; r < n; ++r) WriteShard(step_dir, step, r, n);
  return step_dir;
}

}  // namespace shard::ckpt_testing
