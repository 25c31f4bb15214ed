#include "proto/codec/metrics_codec.h"
#include "proto/codec/resume_plan_codec.h"
#include "worker/agent.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/checkpoint_tier.h"
#include "shard/ckpt/partner_map.h"
#include "shard/ckpt/resume_plan.h"
#include "shard/common/logging.h"
#include "shard/common/process.h"
#include "shard/spec/elastic_world.h"
#include "shard/train/trainer.h"
#include "worker/peer_barrier.h"
#include "worker/run_trainer.h"
#include "worker/coordinator_answer.h"
#include "worker/coordinator_client.h"
#include "worker/flight_report.h"
#include "worker/memory_partner.h"
#include "worker/stop_signal.h"

namespace shardd {

bool CanNeverSucceed(const shard::Status& st) {
  using C = shard::StatusCode;
  return st.code() == C::kInvalidArgument || st.code() == C::kNotFound || st.code() == C::kUnimplemented ||
         st.code() == C::kOutOfRange;
}

namespace {

int64_t RssBytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, rss = 0;
  f >> pages >> rss;
  return rss * ::sysconf(_SC_PAGESIZE);
}

bool Retryable(const shard::Status& st) { return !CanNeverSucceed(st); }

// The attempt is over for good only when the coordinator says so in as many
// words (coordinator_answer.h); a coordinator that stops, is away or cuts a
// call off is retried while training goes on.
bool AttemptOver(const shard::Status& st) { return ClassifyAnswer(st) == CoordinatorAnswer::kAttemptEnded; }

// A failing rank's last words to the coordinator (its final heartbeat and its
// failure report) share this one deadline: a rank whose link is cut (its
// collective just timed out) leaves within it, not after each call's own.
constexpr std::chrono::milliseconds kLastWords{2000};

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds Left(Clock::time_point until) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()));
}

// Heartbeats from their own thread, so a long step or a blocked collective
// never looks like a dead process; the progress watchdog on the coordinator
// tells the two apart by the step number.
class Heartbeater {
 public:
  Heartbeater(CoordinatorClient* client, double interval_s, double reconnect_window_s,
              std::shared_ptr<const shard::FlightRecorder> recorder)
      : client_(client), interval_s_(interval_s), window_s_(reconnect_window_s), recorder_(std::move(recorder)) {}
  ~Heartbeater() { Stop(); }

  void Start() { thread_ = std::thread([this] { Loop(); }); }
  // cut: the rank failed; a heartbeat in flight is cancelled rather than
  // waited for (it is part of the rank's last words, kLastWords).
  void Stop(bool cut = false) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (cut) client_->StopHeartbeats();
    if (thread_.joinable()) thread_.join();
  }
  void OnStep(const shard::StepMetrics& m, bool all_metrics) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = m.step;
    tokens_per_s_ = m.seconds > 0 ? m.tokens / m.seconds : 0;
    step_seconds_ = m.seconds;
    state_ = "training";
    if (all_metrics) {
      pending_.push_back(ToStepMetric(m));
    } else {
      // Every other rank: its step's timing only, for straggler detection
      // (the coordinator records rank 0's rows alone).
      v1::StepMetric t;
      t.set_step(m.step);
      t.set_seconds(m.seconds);
      t.set_compute_seconds(m.compute_seconds);
      pending_.push_back(t);
    }
  }
  void SetState(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = s;
  }
  // Rank 0: the checkpoint this attempt resumed from, sent with every heartbeat
  // (the coordinator records the first as an event).
  void SetResumed(const std::string& step_dir, int64_t step, shard::CheckpointTier tier, const std::string& note) {
    std::lock_guard<std::mutex> lock(mu_);
    resumed_from_ = step_dir;
    resumed_step_ = step;
    resumed_tier_ = tier;
    resumed_note_ = note;
    step_ = step;
  }
  // Rank 0: the resume's fallbacks (skipped steps, a start from step 0),
  // sent with every heartbeat like the resume point.
  void SetResumeEvents(std::vector<std::string> events) {
    std::lock_guard<std::mutex> lock(mu_);
    resume_events_ = std::move(events);
  }
  // Takes the pending metrics of steps up to `step` for a checkpoint report
  // to carry, so a failure right after the commit cannot lose them; PutBack
  // returns them when the report could not be delivered.
  std::vector<v1::StepMetric> TakeMetrics(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    auto later = std::stable_partition(pending_.begin(), pending_.end(),
                                       [&](const v1::StepMetric& m) { return m.step() <= step; });
    std::vector<v1::StepMetric> taken(pending_.begin(), later);
    pending_.erase(pending_.begin(), later);
    return taken;
  }
  void PutBack(const std::vector<v1::StepMetric>& metrics) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.insert(pending_.begin(), metrics.begin(), metrics.end());
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      SendLocked(lock);
      cv_.wait_for(lock, std::chrono::milliseconds(static_cast<int64_t>(interval_s_ * 1000)), [&] { return stop_; });
    }
  }

 public:
  // After Stop(): one last heartbeat with whatever metrics are still pending,
  // sent by `until` (a coordinator out of reach then is not waited for).
  void Flush(Clock::time_point until) {
    std::unique_lock<std::mutex> lock(mu_);
    SendLocked(lock, until);
  }

 private:
  // Sends one heartbeat (unlocking around the RPC); exits the process when
  // the coordinator ended the attempt or, for the loop's heartbeats (no
  // `until`), stayed unreachable longer than the reconnect window.
  void SendLocked(std::unique_lock<std::mutex>& lock, std::optional<Clock::time_point> until = std::nullopt) {
    v1::HeartbeatRequest req;
    req.set_state(state_);
    req.set_step(step_);
    req.set_tokens_per_s(tokens_per_s_);
    req.set_rss_bytes(RssBytes());
    req.set_step_seconds(step_seconds_);
    if (!resumed_from_.empty()) {
      req.set_resumed_from(resumed_from_);
      req.set_resumed_step(resumed_step_);
      req.set_resumed_checkpoint_tier(shardd::ToCheckpointTierProto(resumed_tier_));
      req.set_resumed_note(resumed_note_);
    }
    for (const std::string& e : resume_events_) req.add_resume_events(e);
    for (auto& m : pending_) *req.add_metrics() = m;
    if (recorder_) AddCollectives(*recorder_, &req);
    std::vector<v1::StepMetric> sent = std::move(pending_);
    pending_.clear();
    lock.unlock();
    auto resp = until ? client_->Heartbeat(req, std::min<std::chrono::milliseconds>(Left(*until), std::chrono::seconds(5)))
                      : client_->Heartbeat(req, std::chrono::seconds(5), /*stoppable=*/true);
    lock.lock();
    if (resp.ok()) {
      if (unreachable_)
        LOG_INFO("coordinator reached again after {:.1f} s",
                 std::chrono::duration<double>(Clock::now() - last_ok_).count());
      unreachable_ = false;
      last_ok_ = Clock::now();
      if (resp->abort()) {
        LOG_WARN("coordinator ended this attempt: {}", resp->reason());
        std::_Exit(kExitAttemptOver);
      }
      return;
    }
    // Keep the metrics for the next try (bounded).
    pending_.insert(pending_.begin(), sent.begin(), sent.end());
    if (pending_.size() > 1000) pending_.erase(pending_.begin(), pending_.end() - 1000);
    if (AttemptOver(resp.status())) {
      LOG_WARN("coordinator ended this attempt: {}", resp.status().ToString());
      std::_Exit(kExitAttemptOver);  // the trainer may sit in a collective: leave at once
    }
    if (until) return;  // last words: no waiting for the coordinator
    double lost = std::chrono::duration<double>(Clock::now() - last_ok_).count();
    if (!unreachable_) {
      unreachable_ = true;
      LOG_WARN("coordinator unreachable ({}); training on, retrying for up to {:.0f} s", resp.status().ToString(),
               window_s_);
    }
    if (lost > window_s_) {
      LOG_ERROR("coordinator unreachable for {:.0f} s ({}); giving up", lost, resp.status().ToString());
      std::_Exit(kExitLostCoordinator);
    }
  }

  CoordinatorClient* client_;
  double interval_s_, window_s_;
  std::shared_ptr<const shard::FlightRecorder> recorder_;  // this rank's collectives (thread-safe)
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                    // guarded by mu_
  int64_t step_ = 0;                     // guarded by mu_
  double tokens_per_s_ = 0;              // guarded by mu_
  double step_seconds_ = 0;              // guarded by mu_
  std::string state_ = "starting";       // guarded by mu_
  std::string resumed_from_;             // guarded by mu_
  int64_t resumed_step_ = 0;             // guarded by mu_
  shard::CheckpointTier resumed_tier_ = shard::CheckpointTier::kDisk;  // guarded by mu_
  std::string resumed_note_;             // guarded by mu_
  std::vector<std::string> resume_events_;  // guarded by mu_
  std::vector<v1::StepMetric> pending_;  // guarded by mu_
  Clock::time_point last_ok_ = Clock::now();  // guarded by mu_
  bool unreachable_ = false;                  // guarded by mu_: the last heartbeat failed (said once)
};

// Retries a call while the coordinator is unreachable (stopping, restarting,
// away: coordinator_answer.h) until `until`. A call cut off mid-flight is
// resent: the coordinator's handlers are idempotent for a repeated report.
shard::Status RetryUntil(Clock::time_point until, const std::function<shard::Status()>& call) {
  auto backoff = std::chrono::milliseconds(200);
  while (true) {
    shard::Status st = call();
    if (ClassifyAnswer(st) != CoordinatorAnswer::kUnreachable || Clock::now() >= until) return st;
    LOG_WARN("{}; retrying", st.ToString());
    std::this_thread::sleep_for(std::min(backoff, Left(until)));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

shard::Status RetryUnreachable(double window_s, const std::function<shard::Status()>& call) {
  return RetryUntil(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(window_s)),
                    call);
}

// One worker's life under a coordinator, in named steps. Each step returns
// kContinue or the process exit code to leave with.
class AgentSession {
 public:
  explicit AgentSession(const AgentOptions& opts) : opts_(opts), reconnect_window_s_(opts.reconnect_window_s) {}

  int Run() {
    if (int code = Connect(); code != kContinue) return code;
    if (int code = Register(); code != kContinue) return code;
    return Train();
  }

 private:
  static constexpr int kContinue = -1;

  // The rank this worker trains as: --rank, or the one an elastic attempt's
  // join assigned (JoinResponse.rank).
  int rank() const { return client_->id().rank(); }

  // Dials the coordinator; an external job's worker first joins its current attempt.
  int Connect() {
    ClientIdentity who;
    who.address = opts_.coordinator;
    who.tls = opts_.tls;
    who.token = opts_.token;
    who.id.set_job_id(opts_.job_id);
    who.id.set_attempt(opts_.attempt);
    who.id.set_rank(opts_.rank);
    auto client = CoordinatorClient::Connect(who);
    if (!client.ok()) {
      std::fprintf(stderr, "shardd-worker: %s\n", client.status().ToString().c_str());
      return kExitBadInput;
    }
    client_ = std::move(*client);
    if (opts_.attempt != 0) return kContinue;
    shard::Status js =
        RetryUnreachable(opts_.join_wait_s, [&] { return client_->Join(opts_.world_hint, opts_.hostname); });
    if (js.ok()) return kContinue;
    std::fprintf(stderr, "shardd-worker: %s\n", js.ToString().c_str());
    if (js.code() == shard::StatusCode::kInvalidArgument) return kExitBadInput;
    return AttemptOver(js) ? kExitAttemptOver : kExitFailed;
  }

  // The probe runs in a child (`shardd-worker --probe --brief`) so the CUDA
  // contexts it opens on every GPU die with it; one worker per host asks.
  std::string ProbeDevices() const {
    std::string devices;
    if (!opts_.probe_devices) return devices;
    shard::SpawnOptions so;
    so.argv = {"/proc/self/exe", "--probe", "--brief"};
    so.new_process_group = false;  // a kill of this worker's group takes the probe too
    auto run = shard::RunCapturingStdout(so, shard::CapturedStderr::kDiscard);
    if (!run.ok()) return devices;
    devices = run->out.substr(0, run->out.find('\n'));  // the first line
    while (!devices.empty() && devices.back() == '\r') devices.pop_back();
    return devices;
  }

  // Registers this rank and receives the job and the attempt's resume point.
  int Register() {
    const std::string devices = ProbeDevices();
    shard::StatusOr<v1::RegisterResponse> reg = shard::Unavailable("not sent");
    // A coordinator restarting while this rank starts is waited for.
    shard::Status rs = RetryUnreachable(reconnect_window_s_, [&] {
      reg = client_->Register(opts_.hostname, static_cast<int>(::getpid()), opts_.launcher_id, devices);
      return reg.ok() ? shard::OkStatus() : reg.status();
    });
    if (!rs.ok()) {
      std::fprintf(stderr, "shardd-worker: %s\n", rs.ToString().c_str());
      return AttemptOver(rs) ? kExitAttemptOver : kExitFailed;
    }
    reg_ = std::move(*reg);
    auto plan = FromResumePlanProto(reg_.resume_plan());
    if (!plan.ok()) return Fail(plan.status());
    plan_ = std::move(*plan);
    const int attempt = client_->id().attempt();
    shard::SetLogContext(opts_.job_id, attempt, rank());
    if (opts_.attempt == 0) LOG_INFO("joined attempt {} of job {} as rank {}", attempt, opts_.job_id, rank());
    LOG_DEBUG("registered with {} as rank {}: rendezvous prefix {}, resume from {}", opts_.coordinator, rank(),
              reg_.kv_prefix(), plan_.resume_from.empty() ? "auto" : plan_.resume_from);
    return kContinue;
  }

  // Logs and reports a failure by `until` (its last words' deadline); the
  // exit code says whether a retry may help.
  int Fail(const shard::Status& st) { return Fail(st, Clock::now() + kLastWords); }
  int Fail(const shard::Status& st, Clock::time_point until) {
    const bool retryable = Retryable(st);
    LOG_ERROR("{}", st.ToString());
    shard::Status rs =
        RetryUntil(until, [&] { return client_->ReportFailure(st.ToString(), retryable, Left(until)); });
    if (!rs.ok()) LOG_WARN("could not report the failure: {}", rs.ToString());
    return retryable ? kExitFailed : kExitBadInput;
  }

  // Reports one checkpoint shard (the coordinator commits once every rank has);
  // rank 0's report carries the metrics of the steps up to it.
  shard::Status ReportCheckpoint(Heartbeater& hb, const shard::Manifest& base, const std::string& step_dir,
                                 const std::vector<shard::ManifestFile>& files, shard::CheckpointTier tier) {
    // A per-host memory step: the partner copy first (the commit needs it).
    std::vector<int> partner(files.size(), -1);
    if (tier == shard::CheckpointTier::kMemory && memory_)
      for (size_t i = 0; i < files.size(); ++i) partner[i] = memory_->AfterMemorySave(step_dir, files[i].name, base.step);
    v1::ReportCheckpointRequest req;
    req.set_step(base.step);
    req.set_checkpoint_tier(ToCheckpointTierProto(tier));
    req.set_step_dir(std::filesystem::absolute(step_dir).lexically_normal().string());
    req.set_manifest_base(base.ToJson());
    for (const auto& f : files) {
      v1::CheckpointFile* pf = req.add_files();
      pf->set_name(f.name);
      pf->set_shard_rank(f.shard_rank);
      pf->set_size(f.size);
      pf->set_xxh64(f.xxh64);
      const int p = partner[&f - files.data()];
      pf->set_partner_copy(p >= 0);
      pf->set_partner_rank(p);
    }
    const std::vector<v1::StepMetric> metrics =
        rank() == 0 ? hb.TakeMetrics(base.step) : std::vector<v1::StepMetric>{};
    for (const auto& m : metrics) *req.add_metrics() = m;
    shard::Status st =
        RetryUnreachable(reconnect_window_s_, [&] { return client_->ReportCheckpoint(req).status(); });
    if (!st.ok()) hb.PutBack(metrics);
    return st;
  }

  // A memory step this rank could not write: the coordinator says it in an
  // event. Training goes on whatever this answer is (the next report or
  // heartbeat meets a coordinator that is gone).
  void ReportMemorySkip(int64_t step, const std::string& reason) {
    v1::ReportCheckpointRequest req;
    req.set_step(step);
    req.set_checkpoint_tier(v1::CHECKPOINT_TIER_MEMORY);
    req.set_memory_skipped(reason.empty() ? "unknown" : reason);
    shard::Status st =
        RetryUnreachable(reconnect_window_s_, [&] { return client_->ReportCheckpoint(req).status(); });
    if (!st.ok()) LOG_WARN("could not report skipped memory step {}: {}", step, st.ToString());
  }

  shard::DistContext RankContext(Heartbeater& hb) {
    shard::DistContext dist;
    dist.rank = rank();
    dist.world = reg_.world_size();
    dist.store = client_->kv_store();
    dist.prefix = "";  // the coordinator namespaces keys by job and attempt
    dist.gloo_hostname = opts_.hostname;
    dist.stop_requested = StopRequested;
    dist.tensorboard = true;
    dist.flight_recorder = recorder_;
    dist.report_checkpoint = [this, &hb](const shard::Manifest& base, const std::string& step_dir,
                                         const std::vector<shard::ManifestFile>& files, shard::CheckpointTier tier) {
      return ReportCheckpoint(hb, base, step_dir, files, tier);
    };
    dist.memory_step_skipped = [this](int64_t step, const std::string& reason) { ReportMemorySkip(step, reason); };
    // The coordinator's plan, with what this host's memory tier assembled.
    dist.tiers = shard::TiersFromPlan(plan_, memory_ ? memory_->host_dir() : std::string(), memory_resume_);
    return dist;
  }

  // Parses the job as the coordinator handed it, trains with heartbeats from
  // their own thread, and reports how it ended.
  int Train() {
    const v1::JobSpec& spec = reg_.spec();
    std::vector<std::string> overrides(spec.overrides().begin(), spec.overrides().end());
    auto parsed = shard::ParseJobConfig(spec.yaml(), spec.source_path(), overrides);
    if (!parsed.ok()) return Fail(parsed.status());
    reconnect_window_s_ = parsed->restart.coordinator_loss_timeout_s;
    // The world size is the coordinator's: fewer ranks than the job file's
    // after an elastic restart, each running more micro-batches per step.
    auto job = shard::JobAtWorldSize(*parsed, reg_.world_size());
    if (!job.ok()) return Fail(job.status());
    if (reg_.world_size() != parsed->parallel.world_size && rank() == 0)
      LOG_INFO("training on {} of {} ranks (restart.min_world_size {}): {} micro-batch(es) of {} per rank and step "
               "instead of {}, global batch {} kept",
               reg_.world_size(), parsed->parallel.world_size, shard::MinWorldSize(*parsed),
               shard::MicroBatchesPerStep(*job, reg_.world_size()), job->train.micro_batch,
               shard::MicroBatchesPerStep(*parsed, parsed->parallel.world_size), job->train.global_batch);

    Heartbeater hb(client_.get(), reg_.heartbeat_interval_s() > 0 ? reg_.heartbeat_interval_s() : 1.0,
                   reconnect_window_s_, recorder_);
    hb.Start();
    TrainerHooks hooks;
    hooks.on_step = [&](const shard::StepMetrics& m) { hb.OnStep(m, /*all_metrics=*/rank() == 0); };
    // Rank 0 tells the coordinator which checkpoint it resumed (an event).
    hooks.on_built = [&](const shard::Trainer& t) {
      if (rank() != 0) return;
      if (!t.resumed_from().empty())
        hb.SetResumed(std::filesystem::absolute(t.resumed_from()).lexically_normal().string(), t.step(),
                      t.resumed_tier(), memory_note_);
      // The memory steps the hosts could not assemble, then the trainer's own
      // fallbacks; every one skipped and nothing resumed: from step 0, said.
      std::vector<std::string> events = memory_events_;
      events.insert(events.end(), t.resume_events().begin(), t.resume_events().end());
      if (!memory_events_.empty() && t.resumed_from().empty() &&
          (events.empty() || events.back().rfind("starting from step 0", 0) != 0))
        events.push_back("starting from step 0: no committed memory step could be assembled on every host and "
                         "the disk tier holds no committed step of this run");
      if (!events.empty()) hb.SetResumeEvents(std::move(events));
    };
    // Every rank registered before any rendezvous (worker/peer_barrier.h).
    PeerBarrierOptions barrier;
    barrier.rank = rank();
    barrier.world = reg_.world_size();
    if (shard::Status ps = WaitForPeers(*client_->kv_store(), barrier); !ps.ok()) {
      hb.Stop(/*cut=*/true);
      if (AttemptOver(ps)) return kExitAttemptOver;
      return Fail(ps);
    }
    if (shard::Status ms = StartMemoryTier(*job); !ms.ok()) {
      hb.Stop(/*cut=*/true);
      if (AttemptOver(ms)) return kExitAttemptOver;
      return Fail(ms);
    }
    TrainOutcome run;
    shard::Status st = RunTrainer(*job, RankContext(hb), hooks, &run);
    hb.SetState(st.ok() ? "done" : "failed");
    // A failed rank's last words (the heartbeat in flight, a last one with
    // the failed collective, the failure report) end within kLastWords: a
    // coordinator it cannot reach (a cut link) does not hold it past
    // comm_timeout_s + kLastWords. The last heartbeat goes first, so the
    // stall the coordinator explains is the one that ended this rank.
    const Clock::time_point until = Clock::now() + kLastWords;
    hb.Stop(/*cut=*/!st.ok());
    if (!st.ok()) {
      hb.Flush(until);
      LogFlightTail(*recorder_, 16);
      return Fail(st, until);
    }
    hb.Flush(Clock::now() + std::chrono::seconds(5));  // the final metrics before done
    return Finish(run);
  }

  // The per-host memory tier (memory_partner.h): this rank's copy server,
  // its partner, and the step this attempt resumes — the committed memory
  // step when every host can assemble it, else the coordinator's disk choice.
  shard::Status StartMemoryTier(const shard::JobConfig& job) {
    if (!plan_.memory_per_host || plan_.memory_dir.empty() || !job.checkpoint.memory.enabled())
      return shard::OkStatus();
    // Ended jobs' folders on this host (each job has its own, so no later
    // job shares and drops them): this host's part of each goes.
    for (const std::string& dir : plan_.ended_memory_dirs) RemoveEndedHostFolder(dir);
    MemoryPartnerOptions mo;
    mo.rank = rank();
    mo.world = reg_.world_size();
    mo.hostname = opts_.hostname;
    mo.root = plan_.memory_dir;
    mo.keep = job.checkpoint.memory.keep_last + 1;
    mo.replicas = job.checkpoint.memory.replicas > 0;
    mo.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::max(10.0, job.parallel.comm_timeout_s) * 1000));
    mo.copy_timeout = std::chrono::milliseconds(static_cast<int64_t>(job.parallel.comm_timeout_s * 500));
    ASSIGN_OR_RETURN(memory_, MemoryPartner::Start(client_->kv_store(), mo));
    const int64_t disk_step =
        shard::StepOfDirName(std::filesystem::path(plan_.resume_from).filename().string()).value_or(0);
    std::vector<std::string> manifests;  // newest first
    if (!plan_.memory_manifest.empty()) manifests.push_back(plan_.memory_manifest);
    manifests.insert(manifests.end(), plan_.memory_fallbacks.begin(), plan_.memory_fallbacks.end());
    ASSIGN_OR_RETURN(MemoryResume mr, memory_->Resume(manifests, disk_step));
    memory_note_ = mr.note;
    memory_events_ = mr.events;
    memory_resume_ = mr.step_dir;
    return shard::OkStatus();
  }

  // <dir>/host-<this host>, and <dir> once empty; another rank of this host
  // may be removing it at the same time (said at debug level only).
  void RemoveEndedHostFolder(const std::string& dir) {
    const std::string host_dir = (std::filesystem::path(dir) / shard::MemoryHostFolder(opts_.hostname)).string();
    shard::Status st = shard::RemoveMemoryTier(host_dir);
    if (!st.ok()) st = shard::RemoveMemoryTier(host_dir);
    if (!st.ok()) LOG_DEBUG("{}", st.ToString());
    std::error_code ec;
    std::filesystem::remove(dir, ec);  // only if empty
  }

  // Reports a stop on the launcher's signal (a new attempt resumes) or done.
  int Finish(const TrainOutcome& run) {
    if (run.stopped) {
      const std::string why = std::string(StopSignalName()) + " at step " + std::to_string(run.step) +
                              "; checkpoint step_" + std::to_string(run.step) + " written";
      LOG_WARN("stopping: {}", why);
      shard::Status ps = RetryUnreachable(10, [&] { return client_->ReportPreempted(why, run.step); });
      if (!ps.ok()) LOG_WARN("could not report the preemption: {}", ps.ToString());
      return kExitPreempted;
    }
    const double last_loss = run.last_loss < 0 ? 0 : run.last_loss;  // no step ran: as before, 0
    shard::Status ds = RetryUnreachable(reconnect_window_s_, [&] {
      return client_->ReportDone(run.step, last_loss, run.nothing_trained, run.total_steps, run.resumed_from);
    });
    if (!ds.ok()) {
      LOG_ERROR("{}", ds.ToString());
      return AttemptOver(ds) ? kExitAttemptOver : kExitFailed;
    }
    if (memory_) memory_->RemoveHostFolder();  // the job is done on this host
    if (rank() == 0 && run.nothing_trained)
      LOG_INFO("already complete: {} is at step {} >= train.steps {}; nothing trained", run.resumed_from, run.step,
               run.total_steps);
    else if (rank() == 0)
      LOG_INFO("done: {} steps, final loss {:.4f}", run.step, last_loss);
    return kExitOk;
  }

  const AgentOptions& opts_;
  // How long the coordinator may be unreachable: the flag's until the job is
  // known, then the job's restart.coordinator_loss_timeout_s.
  double reconnect_window_s_;
  std::unique_ptr<CoordinatorClient> client_;
  v1::RegisterResponse reg_;
  shard::ResumePlan plan_;     // reg_.resume_plan(): the coordinator's one decision
  std::string memory_resume_;  // the per-host memory step every host assembled ("" = the plan's resume_from)
  // This rank's collectives: written by the trainer's communicators, read by
  // the heartbeat thread (docs/control-plane.md, "The flight recorder").
  std::shared_ptr<shard::FlightRecorder> recorder_ = std::make_shared<shard::FlightRecorder>();
  std::unique_ptr<MemoryPartner> memory_;  // the per-host memory tier (null: none, or one the coordinator reads)
  std::string memory_note_;                // what the resume took from partners (rank 0's resumed event)
  std::vector<std::string> memory_events_;  // the memory steps the hosts skipped (rank 0's resume events)
};

}  // namespace

int RunAgent(const AgentOptions& opts) { return AgentSession(opts).Run(); }

}  // namespace shardd
