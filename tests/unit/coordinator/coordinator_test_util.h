// Helpers of the coordinator tests: a scratch directory per test, a fake
// launcher that records what the JobManager asks of it and lets the test
// decide how ranks end, and a JobManager fixture on a fake clock (time is
// free: the test advances an integer), a real StateStore and a valid job file.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "coordinator/jobs/job_manager.h"
#include "coordinator/launchers/launcher.h"
#include "coordinator/state/state_store.h"
#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"
#include "shardd/v1/coordinator.pb.h"
#include "shardd/v1/worker.pb.h"
#include "tests/unit/scratch_dir_test.h"

namespace shardd::testing {

namespace fs = std::filesystem;

// A fresh directory per test (tests/unit/scratch_dir_test.h).
class ScratchTest : public shard::testing::ScratchDirTest {};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Records every call; ranks end only when the test says so (Exit), and the
// count of still-running ranks of an attempt is whatever the test sets.
class FakeLauncher : public Launcher {
 public:
  struct TerminateCall {
    std::string job_id;
    int attempt = 0;
    bool force = false;
  };
  struct AdoptCall {
    std::string job_id;
    int attempt = 0;
    std::vector<int> pids;
  };

  // It stands in for the local launcher, or any other under its name.
  explicit FakeLauncher(const char* name = "local") : name_(name) {}
  const char* name() const override { return name_; }
  Status CheckAvailable() override { return available; }
  StatusOr<std::vector<int>> Launch(const LaunchRequest& req) override {
    launches.push_back(req);
    if (!launch_error.ok()) return launch_error;
    std::vector<int> pids;
    for (int r = 0; r < req.world; ++r) pids.push_back(next_pid++);
    running[{req.job_id, req.attempt}] = req.world;
    return pids;
  }
  std::vector<RankExit> Poll() override { return std::exchange(pending_exits, {}); }
  void Terminate(const std::string& job_id, int attempt, bool force) override {
    terminates.push_back({job_id, attempt, force});
  }
  bool Pending(const std::string& job_id, int attempt) override { return pending.count({job_id, attempt}) > 0; }
  std::string PendingReason(const std::string& job_id, int attempt) override {
    return pending.count({job_id, attempt}) ? pending_reason : "";
  }
  StatusOr<int> Capacity(const LaunchRequest& req) override {
    capacity_asks.push_back(req);
    return capacity;
  }
  bool SizesRestartsBeforeLaunch() const override { return sizes_restarts; }
  int Running(const std::string& job_id, int attempt) override {
    auto it = running.find({job_id, attempt});
    return it == running.end() ? 0 : it->second;
  }
  void Adopt(const std::string& job_id, int attempt, const std::vector<int>& pids) override {
    adopts.push_back({job_id, attempt, pids});
    int n = 0;
    for (int p : pids) n += p > 0;
    running[{job_id, attempt}] = n;
  }

  // The next Poll reports that rank ended (exit_code when signal == 0).
  void Exit(const std::string& job_id, int attempt, int rank, int exit_code, int signal = 0) {
    pending_exits.push_back({job_id, attempt, rank, exit_code, signal, ""});
  }
  // The next Poll reports that the whole allocation ended (a Slurm job).
  void ExitAll(const std::string& job_id, int attempt, int exit_code, const std::string& detail = "") {
    pending_exits.push_back({job_id, attempt, RankExit::kAllRanks, exit_code, 0, detail});
  }
  void SetRunning(const std::string& job_id, int attempt, int n) { running[{job_id, attempt}] = n; }
  int CountTerminates(const std::string& job_id, int attempt, bool force) const {
    int n = 0;
    for (const auto& t : terminates) n += t.job_id == job_id && t.attempt == attempt && t.force == force;
    return n;
  }

  std::vector<LaunchRequest> launches;
  std::vector<TerminateCall> terminates;
  std::vector<AdoptCall> adopts;
  std::vector<RankExit> pending_exits;
  std::map<std::pair<std::string, int>, int> running;
  std::set<std::pair<std::string, int>> pending;  // attempts whose allocation waits in a queue
  std::string pending_reason;                      // what PendingReason says about them
  StatusOr<int> capacity = shard::Unimplemented("the fake launcher counts no places");  // what Capacity answers
  std::vector<LaunchRequest> capacity_asks;        // every Capacity call
  bool sizes_restarts = false;                     // what SizesRestartsBeforeLaunch answers (the local launcher's true)
  Status launch_error;
  Status available;  // what CheckAvailable answers
  int next_pid = 4000;
  const char* name_;
};

// The coordinator's tests on a fake clock over a real StateStore in the
// scratch dir, with a workdir holding the job's token file. The helpers below
// reach the coordinator through the Do* calls: JobManagerTest's go through
// the JobManager facade, JobOwnersTest's (jobs/job_owners_test_util.h)
// straight to the owner of each call.
class CoordinatorTest : public ScratchTest {
 protected:
  void SetUp() override {
    ScratchTest::SetUp();
    if (HasFatalFailure()) return;
    workdir_ = Path("work");
    WriteBytes(workdir_ + "/data/tokens.u32", std::string(4096, '\1'));
    OpenStore();
  }

  void OpenStore() {
    auto s = StateStore::Open(Path("state"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  // `o` brings what a test sets (TLS files); the rest is the fixture's.
  JobManagerOptions Options(JobManagerOptions o = {}) {
    o.state_dir = Path("state");
    o.coordinator_address = "127.0.0.1:7000";
    o.worker_bin = "/opt/shardd/bin/shardd-worker";
    o.kill_grace_s = kKillGraceS;
    o.register_timeout_s = kRegisterTimeoutS;
    o.now_ms = [this] { return now_ms_; };
    o.stall_forgive_s = stall_forgive_s_;
    o.allowed_roots = allowed_roots_;
    return o;
  }

  // The calls the helpers make, each to whoever the fixture tests.
  virtual StatusOr<v1::JobStatus> DoSubmit(const v1::JobSpec& spec) = 0;
  virtual void DoTick() = 0;
  virtual StatusOr<v1::JobStatus> DoGet(const std::string& id) = 0;
  virtual StatusOr<std::vector<v1::JobEvent>> DoEvents(const std::string& id, int64_t after_seq) = 0;
  virtual StatusOr<v1::RegisterResponse> DoRegister(const v1::RegisterRequest& req, const std::string& token) = 0;
  virtual StatusOr<v1::HeartbeatResponse> DoHeartbeat(const v1::HeartbeatRequest& req, const std::string& token) = 0;
  virtual Status DoReportDone(const v1::ReportDoneRequest& req, const std::string& token) = 0;
  virtual StatusOr<v1::ReportCheckpointResponse> DoReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                                                    const std::string& token) = 0;

  // A valid job: 2 CPU workers, checkpoints under <workdir>/ckpt/<name>.
  // `extra` is appended to the file (more top-level sections).
  static std::string JobYaml(const std::string& name = "tiny", const std::string& extra = "") {
    return "name: " + name +
           "\n"
           "model: {preset: tiny}\n"
           "data: {tokens: data/tokens.u32, seq_len: 16}\n"
           "train: {steps: 100, global_batch: 4, micro_batch: 2}\n"
           "parallel: {world_size: 2}\n"
           "checkpoint: {dir: ckpt, every_steps: 5, keep_last: 2}\n"
           "resources: {device: cpu}\n"
           "restart: {max_restarts: 2, backoff_s: 3, heartbeat_timeout_s: 10, hang_timeout_s: 60}\n" +
           extra;
  }
  v1::JobSpec Spec(const std::string& yaml, std::vector<std::string> overrides = {}) const {
    v1::JobSpec s;
    s.set_yaml(yaml);
    s.set_source_path("jobs/tiny.yaml");
    s.set_workdir(workdir_);
    for (auto& o : overrides) s.add_overrides(o);
    return s;
  }

  // Submits a valid job (with overrides) and returns its id.
  std::string SubmitJob(std::vector<std::string> overrides = {}, const std::string& name = "tiny") {
    auto st = DoSubmit(Spec(JobYaml(name), std::move(overrides)));
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? st->id() : "";
  }
  // Submits, launches (one Tick) and registers every rank: RUNNING.
  std::string StartRunningJob(std::vector<std::string> overrides = {}) {
    const std::string id = SubmitJob(std::move(overrides));
    DoTick();
    RegisterAll(id);
    EXPECT_EQ(State(id), v1::RUNNING);
    return id;
  }

  void Advance(double seconds) { now_ms_ += static_cast<int64_t>(seconds * 1000); }

  v1::JobStatus Get(const std::string& id) {
    auto s = DoGet(id);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : v1::JobStatus();
  }
  v1::JobState State(const std::string& id) { return Get(id).state(); }
  std::string Reason(const std::string& id) { return Get(id).reason(); }

  // The token the launcher handed to the attempt's workers.
  std::string TokenOf(const std::string& id, int attempt) const {
    for (const LaunchRequest& r : launcher_.launches)
      if (r.job_id == id && r.attempt == attempt) return r.env.at("SHARDD_WORKER_TOKEN");
    ADD_FAILURE() << "no launch of " << id << " attempt " << attempt;
    return "";
  }
  static v1::WorkerId Worker(const std::string& id, int attempt, int rank) {
    v1::WorkerId w;
    w.set_job_id(id);
    w.set_attempt(attempt);
    w.set_rank(rank);
    return w;
  }
  // The checkpoint report of `rank` (attempt `attempt`) of a 2-rank "tiny"
  // job for `step` in step_dir: its one shard file (`size` bytes, xxh64
  // 0x1000 + rank) and the manifest base (global batch `global_batch`).
  static v1::ReportCheckpointRequest TinyShardReport(const std::string& id, int attempt, int rank, int64_t step,
                                                     const std::string& step_dir, int64_t size, int global_batch) {
    shard::Manifest base;
    base.job = "tiny";
    base.step = step;
    base.world = 2;
    base.strategy = "full_shard";
    base.shard_count = 2;
    base.total_steps = 100;
    base.global_batch = global_batch;
    base.units = {{"embed", 10}};
    v1::ReportCheckpointRequest req;
    *req.mutable_id() = Worker(id, attempt, rank);
    req.set_step(step);
    req.set_step_dir(step_dir);
    req.set_manifest_base(base.ToJson());
    v1::CheckpointFile* f = req.add_files();
    f->set_name(shard::ShardFileName(rank, 2));
    f->set_shard_rank(rank);
    f->set_size(size);
    f->set_xxh64(0x1000 + rank);
    return req;
  }

  StatusOr<v1::RegisterResponse> Register(const std::string& id, int attempt, int rank, const std::string& token) {
    v1::RegisterRequest req;
    *req.mutable_id() = Worker(id, attempt, rank);
    req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
    req.set_hostname("host-" + std::to_string(rank));
    return DoRegister(req, token);
  }
  void RegisterAll(const std::string& id) {
    const int attempt = Get(id).attempt();
    const std::string token = TokenOf(id, attempt);
    for (int r = 0; r < Get(id).world_size(); ++r) {
      auto resp = Register(id, attempt, r, token);
      ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    }
  }
  StatusOr<v1::HeartbeatResponse> Heartbeat(const std::string& id, int attempt, int rank, int64_t step,
                                            const std::string& token, std::vector<v1::StepMetric> metrics = {}) {
    v1::HeartbeatRequest req;
    *req.mutable_id() = Worker(id, attempt, rank);
    req.set_state("training");
    req.set_step(step);
    for (auto& m : metrics) *req.add_metrics() = m;
    return DoHeartbeat(req, token);
  }
  // Every rank of the current attempt heartbeats at `step`.
  void HeartbeatAll(const std::string& id, int64_t step) {
    const int attempt = Get(id).attempt();
    const std::string token = TokenOf(id, attempt);
    for (int r = 0; r < Get(id).world_size(); ++r) {
      auto resp = Heartbeat(id, attempt, r, step, token);
      ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    }
  }
  Status ReportDone(const std::string& id, int attempt, int rank, const std::string& token, int64_t step = 100) {
    v1::ReportDoneRequest req;
    *req.mutable_id() = Worker(id, attempt, rank);
    req.set_step(step);
    req.set_final_loss(1.25);
    return DoReportDone(req, token);
  }

  // The job's events of `kind`, oldest first.
  std::vector<v1::JobEvent> EventsOf(const std::string& id, const std::string& kind) {
    std::vector<v1::JobEvent> out;
    auto all = DoEvents(id, 0);
    EXPECT_TRUE(all.ok()) << all.status().ToString();
    if (all.ok())
      for (const v1::JobEvent& e : *all)
        if (e.kind() == kind) out.push_back(e);
    return out;
  }
  // The kinds of the job's stored events, oldest first.
  std::vector<std::string> EventKinds(const std::string& id) {
    std::vector<std::string> kinds;
    auto all = DoEvents(id, 0);
    EXPECT_TRUE(all.ok()) << all.status().ToString();
    if (all.ok())
      for (const v1::JobEvent& e : *all) kinds.push_back(e.kind());
    return kinds;
  }
  // Ranks 0 and 1 of a 2-rank attempt of the "tiny" job write and report
  // `step` (a 100-byte shard each under <workdir>/ckpt/tiny): the commit.
  // The first refusal, else the last answer.
  StatusOr<v1::ReportCheckpointResponse> ReportTwoRankStep(const std::string& id, int64_t step,
                                                           const std::string& token) {
    const std::string dir = workdir_ + "/ckpt/tiny/" + shard::StepDirName(step);
    StatusOr<v1::ReportCheckpointResponse> last = shard::Internal("no report");
    for (int rank = 0; rank < 2; ++rank) {
      WriteBytes(dir + "/" + shard::ShardFileName(rank, 2), std::string(100, 'a'));
      last = DoReportCheckpoint(TinyShardReport(id, Get(id).attempt(), rank, step, dir, 100, 8), token);
      if (!last.ok()) return last;
    }
    return last;
  }

  static constexpr double kKillGraceS = 5;
  static constexpr double kRegisterTimeoutS = 120;

  std::string workdir_;
  std::vector<std::string> allowed_roots_;  // canonical; NewManager confines job paths to them
  double stall_forgive_s_ = 0;              // off: Advance jumps the clock between Ticks
  int64_t now_ms_ = 1'700'000'000'000;
  FakeLauncher launcher_;
  std::unique_ptr<StateStore> store_;
};

// A JobManager (the facade) over the fixture: for what is end-to-end of it.
class JobManagerTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorTest::SetUp();
    if (HasFatalFailure()) return;
    manager_ = NewManager(&launcher_);
  }
  void TearDown() override {
    manager_.reset();
    store_.reset();
    ScratchTest::TearDown();
  }
  std::unique_ptr<JobManager> NewManager(Launcher* launcher, JobManagerOptions o = {}) {
    return std::make_unique<JobManager>(Options(std::move(o)), store_.get(), launcher);
  }

  StatusOr<v1::JobStatus> DoSubmit(const v1::JobSpec& spec) override { return manager_->Submit(spec); }
  void DoTick() override { manager_->Tick(); }
  StatusOr<v1::JobStatus> DoGet(const std::string& id) override { return manager_->Get(id); }
  StatusOr<std::vector<v1::JobEvent>> DoEvents(const std::string& id, int64_t after_seq) override {
    return manager_->Events(id, after_seq);
  }
  StatusOr<v1::RegisterResponse> DoRegister(const v1::RegisterRequest& req, const std::string& token) override {
    return manager_->Register(req, token);
  }
  StatusOr<v1::HeartbeatResponse> DoHeartbeat(const v1::HeartbeatRequest& req, const std::string& token) override {
    return manager_->Heartbeat(req, token);
  }
  Status DoReportDone(const v1::ReportDoneRequest& req, const std::string& token) override {
    return manager_->ReportDone(req, token);
  }
  StatusOr<v1::ReportCheckpointResponse> DoReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                                            const std::string& token) override {
    return manager_->ReportCheckpoint(req, token);
  }

  std::unique_ptr<JobManager> manager_;
};

}  // namespace shardd::testing
