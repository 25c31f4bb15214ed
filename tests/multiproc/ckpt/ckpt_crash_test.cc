// Crash consistency and the checkpoint CLI through the real binaries.
//
//   * Crash points: shardd-worker is SIGKILLed (SHARDD_FAULT=POINT@4) at each of
//     ckpt_before_write, ckpt_mid_write, ckpt_after_rename, ckpt_before_commit
//     and ckpt_during_retention, with async saves on and off. `shardctl
//     checkpoints --json` must then show no corrupt step and the step 4 save
//     either partial or (only once COMMITTED was written) valid; a rerun with
//     resume: auto must start right after the newest valid step (its first
//     metrics line) and finish with weights bitwise identical to an
//     uninterrupted run.
//   * A world-2 run killed before its commit, resumed at world 1: the re-save of
//     that step must commit cleanly despite the stale world-2 reports.
//   * CLI: `shardctl checkpoints` labels valid / corrupt / partial steps;
//     `shardctl export` of a corrupt step exits 2 with one line; the export of a
//     world-4 (Gloo, 4 processes) checkpoint matches the world-1 one within the
//     FSDP tolerance; the export equals the checkpoint's parameters bitwise and
//     loads back through model.from_hf (2 ranks, each reading its slices) to the
//     same weights.
//
// Every worker runs with one compute and one OpenBLAS thread (up to four share
// two cores; and bitwise comparisons need the same kernel split in every run).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/safetensors.h"
#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"
#include "tests/multiproc/multiproc_test_util.h"

namespace shard {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::Describe;
using testing::MakeSuiteDir;
using testing::NonEmptyLines;
using testing::ReadAll;
using testing::TinyJobYaml;
using testing::WritePhraseTokens;

std::string Bin(const std::string& rel) {
  const char* bin = std::getenv("SHARDD_BIN_DIR");
  return std::string(bin ? bin : "build") + "/" + rel;
}

bool ExitedZero(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

struct Proc {
  pid_t pid = -1;
  std::string out, err;
  int status = -1;
};

// fork/exec argv with extra environment; stdout/stderr to files.
Proc Start(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
           const std::string& out, const std::string& err) {
  Proc p;
  p.out = out;
  p.err = err;
  p.pid = testing::Spawn(argv, env, {"SHARDD_FAULT"}, out, err);
  return p;
}

// Waits for all, SIGKILLing stragglers after `limit` seconds (a hang fails the
// test instead of hanging it).
void WaitAll(std::vector<Proc>* procs, double limit) {
  auto t0 = Clock::now();
  size_t left = procs->size();
  bool killed = false;
  while (left > 0) {
    for (auto& p : *procs) {
      if (p.status != -1) continue;
      int st = 0;
      if (::waitpid(p.pid, &st, WNOHANG) == p.pid) {
        p.status = st;
        --left;
      }
    }
    if (left > 0 && !killed && std::chrono::duration<double>(Clock::now() - t0).count() > limit) {
      ADD_FAILURE() << "processes still running after " << limit << " s: killing them";
      for (auto& p : *procs)
        if (p.status == -1) ::kill(p.pid, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// All tensors of an HF folder with one safetensors file, as fp32, by name.
std::map<std::string, std::vector<float>> LoadExport(const std::string& hf_dir) {
  std::map<std::string, std::vector<float>> out;
  auto f = SafetensorsFile::Open(hf_dir + "/model.safetensors");
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return out;
  for (const auto& t : f->tensors()) {
    std::vector<float> v(static_cast<size_t>(t.numel));
    Status st = f->ReadF32(t.name, t.shape, v.data());
    EXPECT_TRUE(st.ok()) << st.ToString();
    out[t.name] = std::move(v);
  }
  return out;
}

// Max |a - b| over every tensor (both must hold the same names and shapes).
double MaxAbsDiff(const std::map<std::string, std::vector<float>>& a,
                  const std::map<std::string, std::vector<float>>& b, const std::string& what) {
  EXPECT_FALSE(a.empty()) << what;
  EXPECT_EQ(a.size(), b.size()) << what;
  double worst = 0;
  std::string where;
  for (const auto& [name, va] : a) {
    auto it = b.find(name);
    if (it == b.end()) {
      ADD_FAILURE() << what << ": lacks " << name;
      continue;
    }
    EXPECT_EQ(va.size(), it->second.size()) << name;
    for (size_t i = 0; i < va.size() && i < it->second.size(); ++i) {
      const double d = std::abs(static_cast<double>(va[i]) - it->second[i]);
      if (d > worst) {
        worst = d;
        where = name + "[" + std::to_string(i) + "] = " + std::to_string(va[i]);
      }
    }
  }
  if (worst > 0) std::printf("[ measured ] %s: worst at %s\n", what.c_str(), where.c_str());
  return worst;
}

bool BitwiseEqual(const std::map<std::string, std::vector<float>>& a,
                  const std::map<std::string, std::vector<float>>& b) {
  if (a.empty() || a.size() != b.size()) return false;
  for (const auto& [name, va] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != va.size()) return false;
    if (std::memcmp(va.data(), it->second.data(), va.size() * 4) != 0) return false;
  }
  return true;
}

// Inverts the byte `back` bytes before the end of the file.
void FlipByteFromEnd(const std::string& path, int64_t back) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-back, std::ios::end);
  const int c = f.get();
  f.seekp(-back, std::ios::end);
  f.put(static_cast<char>(c ^ 0xff));
  ASSERT_TRUE(f.good()) << path;
}

std::vector<int64_t> MetricSteps(const std::string& path) {
  std::vector<int64_t> out;
  for (const auto& line : NonEmptyLines(ReadAll(path))) out.push_back(nlohmann::json::parse(line).at("step"));
  return out;
}

// W = 4 (or a W = 2 → 1 resume) and W = 1 differ only in fp32 summation order
// (gradient partials combined by reduce-scatter instead of one accumulation).
// Most weights agree to ~1e-7, but AdamW amplifies the rounding noise of
// gradient components near adam_eps (a component that cancels to ~1e-8 moves
// its update by lr * dg / eps): measured max 1.7e-5 (W = 4, 6 steps, on an
// o_proj weight of 2e-4) and 8e-6 (W = 2 → 1). 1e-4 = lr / 30 leaves 6x margin;
// a real bug (a lost or doubled rank, a misplaced slice) moves weights by ~lr.
constexpr double kWeightAbsTol = 1e-4;

class CkptCrashTest : public testing::SuiteDirTest<CkptCrashTest> {
 protected:
  static void SetUpTestSuite() {
    root_ = MakeSuiteDir("shardd-ckpt-mp-");
    ASSERT_FALSE(root_.empty()) << "cannot make a temporary folder";
    WritePhraseTokens(root_ + "/tokens.u32", 17, 48, 6, 15, 30000);
    // Saves at 2, 4, 6; keep_last 1 so the step-4 commit deletes step 2
    // (the retention fault point needs something to delete).
    std::ofstream(root_ + "/job.yaml") << TinyJobYaml("ck", root_ + "/tokens.u32", 6,
                                                      "parallel: {world_size: 1, comm_timeout_s: 20}\n"
                                                      "checkpoint: {every_steps: 2, keep_last: 1, async: true}\n"
                                                      "resources: {device: cpu}\n");
  }

  // Runs `world` workers in `dir` (checkpoints under dir/ckpt, metrics per rank
  // and attempt); `env_for(rank)` adds environment. Returns the procs, reaped.
  std::vector<Proc> Workers(const std::string& dir, int world, const std::vector<std::string>& sets,
                            const std::string& attempt,
                            const std::function<std::vector<std::pair<std::string, std::string>>(int)>& env_for = {},
                            const std::string& config = "") {
    std::vector<Proc> procs;
    for (int r = 0; r < world; ++r) {
      std::vector<std::string> a = {Bin("worker/shardd-worker"), "--standalone", "--config",
                                    config.empty() ? root_ + "/job.yaml" : config,
                                    "--log-level", "warn", "--rank", std::to_string(r), "--world",
                                    std::to_string(world), "--run-id", fs::path(dir).filename().string() + attempt,
                                    "--metrics", dir + "/metrics." + attempt + "." + std::to_string(r) + ".jsonl",
                                    "--set", "parallel.world_size=" + std::to_string(world), "--set",
                                    "checkpoint.dir=" + dir + "/ckpt"};
      if (world > 1) a.insert(a.end(), {"--rendezvous", "file:" + dir + "/store"});
      for (const auto& s : sets) a.insert(a.end(), {"--set", s});
      const std::string tag = dir + "/" + attempt + ".rank" + std::to_string(r);
      procs.push_back(Start(a, env_for ? env_for(r) : std::vector<std::pair<std::string, std::string>>{},
                            tag + ".out", tag + ".err"));
    }
    WaitAll(&procs, 90);
    return procs;
  }

  // shardctl with args; returns {exit status, stdout, stderr}.
  struct CtlResult {
    int status;
    std::string out, err;
  };
  CtlResult Ctl(const std::vector<std::string>& args) {
    const std::string base = root_ + "/ctl" + std::to_string(++run_counter_);
    std::vector<std::string> a = {Bin("coordinator/ctl/shardctl")};
    a.insert(a.end(), args.begin(), args.end());
    std::vector<Proc> p = {Start(a, {}, base + ".out", base + ".err")};
    WaitAll(&p, 60);
    return {p[0].status, ReadAll(p[0].out), ReadAll(p[0].err)};
  }

  // step -> state from `shardctl checkpoints DIR --json`.
  std::map<int64_t, std::string> States(const std::string& job_dir) {
    CtlResult r = Ctl({"checkpoints", job_dir, "--json"});
    EXPECT_TRUE(ExitedZero(r.status)) << Describe(r.status) << r.err;
    std::map<int64_t, std::string> out;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("checkpoints") && j["checkpoints"].is_array()) << r.out;
    if (!j.is_object() || !j.contains("checkpoints")) return out;
    for (const auto& e : j["checkpoints"]) out[e.at("step").get<int64_t>()] = e.at("state").get<std::string>();
    return out;
  }

  // The uninterrupted world-1 run (exports its final weights to ref/hf).
  const std::string& Reference() {
    if (ref_.empty()) {
      ref_ = NewRunDir("reference");
      auto p = Workers(ref_, 1, {"export.hf_dir=" + ref_ + "/hf", "checkpoint.keep_last=3"}, "a");
      EXPECT_TRUE(ExitedZero(p[0].status)) << Describe(p[0].status) << ReadAll(p[0].err);
    }
    return ref_;
  }

  static std::string ref_;
};

std::string CkptCrashTest::ref_;

struct FaultCase {
  std::string point;
  int64_t newest_valid_after_crash;  // what the rerun must resume from (0 = nothing)
};

TEST_F(CkptCrashTest, EveryFaultPointResumesFromTheLastCommittedStep) {
  const auto ref_weights = LoadExport(Reference() + "/hf");
  ASSERT_FALSE(ref_weights.empty());
  const std::vector<FaultCase> cases = {
      {"ckpt_before_write", 2}, {"ckpt_mid_write", 2},        {"ckpt_after_rename", 2},
      {"ckpt_before_commit", 2}, {"ckpt_during_retention", 4},
  };
  for (bool async : {false, true}) {
    for (const auto& c : cases) {
      const std::string what = c.point + (async ? " async" : " sync");
      SCOPED_TRACE(what);
      const std::string dir = NewRunDir(c.point + (async ? "-async" : "-sync"));
      const std::vector<std::string> sets = {std::string("checkpoint.async=") + (async ? "true" : "false"),
                                             "export.hf_dir=" + dir + "/hf"};
      auto crashed = Workers(dir, 1, sets, "a", [&](int) {
        return std::vector<std::pair<std::string, std::string>>{{"SHARDD_FAULT", c.point + "@4"}};
      });
      ASSERT_TRUE(WIFSIGNALED(crashed[0].status) && WTERMSIG(crashed[0].status) == SIGKILL)
          << "the fault did not fire: " << Describe(crashed[0].status) << "\n" << ReadAll(crashed[0].err);
      EXPECT_NE(ReadAll(crashed[0].err).find("injected fault " + c.point + " at step 4"), std::string::npos);
      EXPECT_FALSE(fs::exists(dir + "/hf/model.safetensors")) << "a killed run must not have exported";

      // What is on disk: never a corrupt step; step 4 valid only once committed.
      const std::string job_dir = dir + "/ckpt/ck";
      const auto states = States(job_dir);
      int64_t newest_valid = 0;
      for (const auto& [step, state] : states) {
        EXPECT_NE(state, "corrupt") << "step " << step << " is corrupt after a crash";
        if (state == "valid") newest_valid = step;
      }
      EXPECT_EQ(newest_valid, c.newest_valid_after_crash) << "states: " << nlohmann::json(states).dump();
      if (c.newest_valid_after_crash == 2) {
        // The interrupted save of step 4 is on disk, uncommitted.
        EXPECT_EQ(states.count(4) ? states.at(4) : "absent", "partial");
      }
      EXPECT_EQ(states.count(6), 0u) << "nothing after the crash may exist";

      // Rerun: resumes right after the newest valid step, finishes, matches.
      auto rerun = Workers(dir, 1, sets, "b");
      ASSERT_TRUE(ExitedZero(rerun[0].status)) << Describe(rerun[0].status) << "\n" << ReadAll(rerun[0].err);
      const auto steps = MetricSteps(dir + "/metrics.b.0.jsonl");
      ASSERT_FALSE(steps.empty());
      EXPECT_EQ(steps.front(), c.newest_valid_after_crash + 1) << "resumed from the wrong step";
      EXPECT_EQ(steps.back(), 6);
      EXPECT_TRUE(BitwiseEqual(LoadExport(dir + "/hf"), ref_weights))
          << "final weights differ from the uninterrupted run (max abs "
          << MaxAbsDiff(LoadExport(dir + "/hf"), ref_weights, what) << ")";
      // After the rerun: only step 6 (keep_last 1), valid; the crashed save's
      // leftovers are gone.
      const auto after = States(job_dir);
      EXPECT_EQ(after, (std::map<int64_t, std::string>{{6, "valid"}})) << nlohmann::json(after).dump();
    }
  }
}

// World 2, rank 0 killed just before writing COMMITTED for step 4 (both shards
// and both reports are on disk), resumed at world 1 with retention off: step 4
// is saved again by one rank into the same directory and must commit as a
// valid one-shard step, and the run must end within tolerance of the world-1
// reference.
TEST_F(CkptCrashTest, StaleReportsOfACrashedWiderRunDoNotBreakTheResave) {
  const std::string dir = NewRunDir("w2-then-w1");
  const std::vector<std::string> sets = {"checkpoint.keep_last=10", "checkpoint.async=false",
                                         "export.hf_dir=" + dir + "/hf"};
  auto crashed = Workers(dir, 2, sets, "a", [](int r) {
    return r == 0 ? std::vector<std::pair<std::string, std::string>>{{"SHARDD_FAULT", "ckpt_before_commit@4"}}
                  : std::vector<std::pair<std::string, std::string>>{};
  });
  ASSERT_TRUE(WIFSIGNALED(crashed[0].status)) << Describe(crashed[0].status) << ReadAll(crashed[0].err);
  EXPECT_FALSE(ExitedZero(crashed[1].status)) << "rank 1 must notice its dead peer";
  const std::string job_dir = dir + "/ckpt/ck";
  ASSERT_TRUE(fs::exists(job_dir + "/" + StepDirName(4) + "/" + ShardFileName(1, 2) + ".report"));
  EXPECT_EQ(States(job_dir), (std::map<int64_t, std::string>{{2, "valid"}, {4, "partial"}}));

  auto rerun = Workers(dir, 1, sets, "b");
  ASSERT_TRUE(ExitedZero(rerun[0].status)) << Describe(rerun[0].status) << "\n" << ReadAll(rerun[0].err);
  EXPECT_EQ(MetricSteps(dir + "/metrics.b.0.jsonl").front(), 3);
  const auto after = States(job_dir);
  EXPECT_EQ(after, (std::map<int64_t, std::string>{{2, "valid"}, {4, "valid"}, {6, "valid"}}))
      << nlohmann::json(after).dump();
  auto r4 = CheckpointReader::Open(job_dir + "/" + StepDirName(4), true);
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_EQ(r4->manifest().shard_count, 1);
  EXPECT_EQ(r4->manifest().world, 1);
  const double d = MaxAbsDiff(LoadExport(dir + "/hf"), LoadExport(Reference() + "/hf"), "w2->w1");
  std::printf("[ measured ] W=2 crash, W=1 resume vs W=1 reference: weights max abs %.3g\n", d);
  EXPECT_LE(d, kWeightAbsTol);
}

TEST_F(CkptCrashTest, CheckpointsCommandLabelsAndExportRefusesCorruptSteps) {
  // A copy of the reference run's checkpoints (steps 2, 4, 6), then damage.
  const std::string job_dir = NewRunDir("corrupt") + "/ck";
  fs::copy(Reference() + "/ckpt/ck", job_dir, fs::copy_options::recursive);
  EXPECT_EQ(States(job_dir), (std::map<int64_t, std::string>{{2, "valid"}, {4, "valid"}, {6, "valid"}}));
  const std::string s4 = job_dir + "/" + StepDirName(4), s6 = job_dir + "/" + StepDirName(6);
  FlipByteFromEnd(s6 + "/" + ShardFileName(0, 1), 100);
  fs::resize_file(s4 + "/" + ShardFileName(0, 1), fs::file_size(s4 + "/" + ShardFileName(0, 1)) / 2);
  fs::create_directories(job_dir + "/" + StepDirName(8));
  std::ofstream(job_dir + "/" + StepDirName(8) + "/" + ShardFileName(0, 1) + ".tmp") << "half";
  EXPECT_EQ(States(job_dir),
            (std::map<int64_t, std::string>{{2, "valid"}, {4, "invalid"}, {6, "invalid"}, {8, "partial"}}));

  // The table form says the same, one line per step, with the reason.
  CtlResult table = Ctl({"checkpoints", job_dir});
  ASSERT_TRUE(ExitedZero(table.status)) << table.err;
  const auto lines = NonEmptyLines(table.out);
  ASSERT_EQ(lines.size(), 5u) << table.out;
  EXPECT_NE(lines[1].find("valid"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("corrupt"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("corrupt"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("checksum"), std::string::npos) << lines[3];
  EXPECT_NE(lines[4].find("partial"), std::string::npos) << lines[4];

  for (const std::string& bad : {s6, s4, job_dir + "/" + StepDirName(8), job_dir + "/step_00000099"}) {
    SCOPED_TRACE(bad);
    const std::string out = fs::path(job_dir).parent_path().string() + "/export-" + fs::path(bad).filename().string();
    CtlResult r = Ctl({"export", bad, "--out", out});
    EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 2) << Describe(r.status) << r.err;
    EXPECT_EQ(NonEmptyLines(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  }
  CtlResult ok = Ctl({"export", job_dir + "/" + StepDirName(2), "--out", job_dir + "/../export2"});
  EXPECT_TRUE(ExitedZero(ok.status)) << ok.err;
  CtlResult missing = Ctl({"checkpoints", job_dir + "/nope"});
  EXPECT_TRUE(WIFEXITED(missing.status) && WEXITSTATUS(missing.status) == 2) << Describe(missing.status);
  EXPECT_EQ(NonEmptyLines(missing.err).size(), 1u) << missing.err;
}

// The exported weights are the checkpoint's parameters, bitwise.
void ExpectExportIsTheCheckpoint(const std::string& step_dir, const std::map<std::string, std::vector<float>>& exp) {
  auto reader = CheckpointReader::Open(step_dir, true);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto config = LlamaConfigFromHfJson(reader->manifest().model_config, "manifest");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const ParamLayout layout = ParamLayout::ForLlama(*config);
  size_t tensors = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> unit(layout.units[u].numel);
    ASSERT_TRUE(reader->ReadUnitRange(u, 0, unit.size(), unit.data(), nullptr, nullptr).ok());
    for (const auto& t : layout.units[u].tensors) {
      auto it = exp.find(t.hf_name);
      ASSERT_NE(it, exp.end()) << t.hf_name;
      ASSERT_EQ(std::memcmp(it->second.data(), unit.data() + t.offset, it->second.size() * 4), 0) << t.hf_name;
      ++tensors;
    }
  }
  EXPECT_EQ(tensors, exp.size());
}

TEST_F(CkptCrashTest, ExportOfAFourRankCheckpointMatchesOneRankAndReloads) {
  const std::string ref_step = Reference() + "/ckpt/ck/" + StepDirName(6);
  const std::string w4 = NewRunDir("w4");
  auto procs = Workers(w4, 4, {"checkpoint.keep_last=3", "parallel.strategy=full_shard"}, "a");
  for (int r = 0; r < 4; ++r)
    ASSERT_TRUE(ExitedZero(procs[r].status)) << "rank " << r << ": " << Describe(procs[r].status) << "\n"
                                             << ReadAll(procs[r].err);
  const std::string w4_step = w4 + "/ckpt/ck/" + StepDirName(6);
  auto reader = CheckpointReader::Open(w4_step, true);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(reader->manifest().shard_count, 4);
  EXPECT_EQ(reader->manifest().world, 4);

  CtlResult e1 = Ctl({"export", ref_step, "--out", w4 + "/export-w1"});
  CtlResult e4 = Ctl({"export", w4_step, "--out", w4 + "/export-w4"});
  ASSERT_TRUE(ExitedZero(e1.status)) << e1.err;
  ASSERT_TRUE(ExitedZero(e4.status)) << e4.err;
  EXPECT_NE(e4.out.find("exported step 6"), std::string::npos) << e4.out;
  const auto x1 = LoadExport(w4 + "/export-w1"), x4 = LoadExport(w4 + "/export-w4");
  const double d = MaxAbsDiff(x1, x4, "W=4 vs W=1 export");
  std::printf("[ measured ] shardctl export W=4 vs W=1 checkpoint: weights max abs %.3g\n", d);
  EXPECT_LE(d, kWeightAbsTol);
  // The offline export of the last step equals the trainer's own end-of-run export.
  EXPECT_TRUE(BitwiseEqual(x1, LoadExport(Reference() + "/hf")));
  ExpectExportIsTheCheckpoint(w4_step, x4);
  ExpectExportIsTheCheckpoint(ref_step, x1);
  // config.json is there and describes the model.
  auto config = LlamaConfigFromHfDir(w4 + "/export-w4");
  ASSERT_TRUE(config.ok()) << config.status().ToString();

  // bf16 export: each value is the fp32 one rounded to bf16 (rel error <= 2^-8).
  CtlResult eb = Ctl({"export", w4_step, "--out", w4 + "/export-bf16", "--dtype", "bf16"});
  ASSERT_TRUE(ExitedZero(eb.status)) << eb.err;
  const auto xb = LoadExport(w4 + "/export-bf16");
  ASSERT_EQ(xb.size(), x4.size());
  double worst_rel = 0;
  for (const auto& [name, v] : x4)
    for (size_t i = 0; i < v.size(); ++i)
      worst_rel = std::max(worst_rel, std::abs(static_cast<double>(v[i]) - xb.at(name)[i]) /
                                          std::max(std::abs(static_cast<double>(v[i])), 1e-30));
  EXPECT_LE(worst_rel, 1.0 / 256);

  // model.from_hf at W = 2 (each rank reads its slices), one step at lr 1e-30:
  // the update is ~1e-30 absolute, below half an ulp of every weight of this
  // model, so the end-of-run export must equal the loaded weights bitwise — a
  // misplaced slice or a dtype slip would not.
  const std::string reload = NewRunDir("from-hf");
  std::string yaml = ReadAll(root_ + "/job.yaml");
  yaml.replace(yaml.find("{preset: tiny}"), 14, "{from_hf: " + w4 + "/export-w4}");
  std::ofstream(reload + "/job.yaml") << yaml;
  auto rp = Workers(reload, 2,
                    {"train.steps=1", "train.lr=1e-30", "checkpoint.every_steps=0", "export.hf_dir=" + reload + "/hf"},
                    "a", {}, reload + "/job.yaml");
  for (int r = 0; r < 2; ++r)
    ASSERT_TRUE(ExitedZero(rp[r].status)) << "rank " << r << ": " << Describe(rp[r].status) << "\n"
                                          << ReadAll(rp[r].err);
  EXPECT_TRUE(BitwiseEqual(LoadExport(reload + "/hf"), x4))
      << "max abs " << MaxAbsDiff(LoadExport(reload + "/hf"), x4, "reload");
}

}  // namespace
}  // namespace shard
