#include "coordinator/launchers/kubernetes/kubernetes_launcher.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "coordinator/launchers/command.h"
#include "coordinator/launchers/kubernetes/k8s_manifests.h"
#include "coordinator/launchers/kubernetes/k8s_names.h"
#include "coordinator/launchers/kubernetes/k8s_status.h"
#include "shard/common/logging.h"

namespace shardd {

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t Ms(double s) { return static_cast<int64_t>(s * 1000); }

bool Executable(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos) return ::access(cmd.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && ::access((dir + "/" + cmd).c_str(), X_OK) == 0) return true;
  return false;
}

// The first line kubectl printed on stderr (or stdout), for messages.
std::string FirstLine(const CommandResult& r) {
  std::string s = r.err.empty() ? r.out : r.err;
  if (size_t nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

}  // namespace

KubernetesLauncher::KubernetesLauncher(KubernetesLauncherOptions opts)
    : opts_(std::move(opts)), thread_([this] { Loop(); }) {}

KubernetesLauncher::~KubernetesLauncher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::vector<std::string> KubernetesLauncher::Kubectl(std::vector<std::string> args) const {
  std::vector<std::string> argv = {opts_.kubectl};
  argv.insert(argv.end(), opts_.kubectl_args.begin(), opts_.kubectl_args.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

StatusOr<std::vector<int>> KubernetesLauncher::Launch(const LaunchRequest& req) {
  if (!Executable(opts_.kubectl))
    return shard::NotFound("kubectl '" + opts_.kubectl +
                           "' is not an executable on PATH: install kubectl or start shardd with --kubectl PATH");
  k8s::ManifestOptions mo;
  mo.worker_command = opts_.worker_command;
  ASSIGN_OR_RETURN(k8s::Manifests m, k8s::RenderManifests(req, mo));
  Attempt a;
  a.job_id = req.job_id;
  a.attempt = req.attempt;
  a.world = req.world;
  a.nproc = req.resources.kubernetes.ProcsPerNode(req.world);
  a.name = m.name;
  a.ns = m.namespace_;
  a.manifest = m.Yaml();
  a.poll_interval_s = req.resources.kubernetes.poll_interval_s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{req.job_id, req.attempt};
    if (attempts_.count(key))
      return shard::Status(shard::StatusCode::kAlreadyExists, "job " + req.job_id + " attempt " + std::to_string(req.attempt) +
                                  " is already launched as kubernetes job " + a.name);
    attempts_.emplace(key, std::move(a));
  }
  cv_.notify_all();
  return std::vector<int>(req.world, 0);
}

Status KubernetesLauncher::CheckAvailable() { return available_.Check(); }

std::vector<RankExit> KubernetesLauncher::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RankExit> out;
  out.swap(exits_);
  return out;
}

void KubernetesLauncher::Terminate(const std::string& job_id, int attempt, bool force) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = attempts_.find({job_id, attempt});
    if (it == attempts_.end()) return;
    Attempt& a = it->second;
    if (!a.manifest.empty()) {
      // Not applied yet: there is nothing in the cluster to delete.
      attempts_.erase(it);
      return;
    }
    a.delete_wanted = true;
    if (force) a.force_wanted = true;
  }
  cv_.notify_all();
}

int KubernetesLauncher::Running(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find({job_id, attempt});
  if (it == attempts_.end() || it->second.gone) return 0;
  const Attempt& a = it->second;
  if (!a.observed) return a.world;
  return a.finished ? a.live_pods * a.nproc : a.world;
}

bool KubernetesLauncher::Pending(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find({job_id, attempt});
  if (it == attempts_.end() || it->second.gone || it->second.finished) return false;
  return !it->second.pod_running;
}

std::string KubernetesLauncher::PendingReason(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find({job_id, attempt});
  if (it == attempts_.end() || it->second.wait_detail.empty()) return "";
  return "kubernetes job " + it->second.name + ": " + it->second.wait_detail;
}

void KubernetesLauncher::Adopt(const std::string& job_id, int attempt, const std::vector<int>& pids) {
  Attempt a;
  a.job_id = job_id;
  a.attempt = attempt;
  a.world = pids.empty() ? 1 : static_cast<int>(pids.size());
  a.name = k8s::ObjectName(job_id, attempt);
  a.search = opts_.adopt_namespaces;
  a.poll_interval_s = opts_.adopt_poll_interval_s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    attempts_.emplace(Key{job_id, attempt}, std::move(a));
  }
  cv_.notify_all();
}

void KubernetesLauncher::ReportLocked(Attempt& a, int exit_code, int signal, const std::string& detail) {
  if (a.reported) return;
  a.reported = true;
  RankExit e;
  e.job_id = a.job_id;
  e.attempt = a.attempt;
  e.rank = RankExit::kAllRanks;
  e.exit_code = exit_code;
  e.signal = signal;
  e.detail = detail;
  LOG_INFO("job {} attempt {}: {}", a.job_id, a.attempt, detail);
  exits_.push_back(std::move(e));
}

std::pair<KubernetesLauncher::Action, KubernetesLauncher::Key> KubernetesLauncher::NextActionLocked(int64_t now,
                                                                                                   int64_t* wake) {
  *wake = kNever;
  // Deletes first: the coordinator's next attempt waits for them.
  for (auto& [key, a] : attempts_) {
    if (a.ns.empty() || a.delete_retry_ms > now) continue;
    if (a.delete_wanted && !a.delete_done) return {Action::kDelete, key};
    if (a.force_wanted && !a.force_done) return {Action::kForce, key};
  }
  for (auto& [key, a] : attempts_)
    if (a.ns.empty() && a.next_poll_ms <= now) return {Action::kLocate, key};
  for (auto& [key, a] : attempts_)
    if (!a.manifest.empty()) return {Action::kApply, key};
  for (auto& [key, a] : attempts_) {
    if ((a.delete_wanted && !a.delete_done) || (a.force_wanted && !a.force_done))
      *wake = std::min(*wake, a.delete_retry_ms);
    if (a.ns.empty() || !a.manifest.empty()) {
      if (a.ns.empty()) *wake = std::min(*wake, a.next_poll_ms);
      continue;
    }
    if (a.next_poll_ms <= now) return {Action::kPoll, key};
    *wake = std::min(*wake, a.next_poll_ms);
  }
  return {Action::kNone, {}};
}

void KubernetesLauncher::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    int64_t wake = kNever;
    auto [action, key] = NextActionLocked(NowMs(), &wake);
    if (action == Action::kNone) {
      if (wake == kNever) cv_.wait(lock);
      else cv_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(1, wake - NowMs())));
      continue;
    }
    Attempt& a = attempts_.at(key);
    Attempt snapshot = a;
    if (action == Action::kApply) a.manifest.clear();  // started: Terminate now deletes instead
    lock.unlock();
    switch (action) {
      case Action::kLocate: DoLocate(key, std::move(snapshot)); break;
      case Action::kApply: DoApply(key, std::move(snapshot)); break;
      case Action::kDelete: DoDelete(key, std::move(snapshot), false); break;
      case Action::kForce: DoDelete(key, std::move(snapshot), true); break;
      case Action::kPoll: DoPoll(key, std::move(snapshot)); break;
      case Action::kNone: break;
    }
    lock.lock();
  }
}

void KubernetesLauncher::DoApply(const Key& key, Attempt s) {
  CommandOptions co;
  co.stdin_data = s.manifest;
  co.timeout_s = opts_.command_timeout_s;
  // Server-side apply: one request per object, idempotent, and the API
  // server validates strictly (unknown fields are errors, not dropped).
  auto r = RunCommand(Kubectl({"apply", "--server-side", "--field-manager=shardd", "-f", "-"}), co);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find(key);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  a.next_poll_ms = NowMs() + Ms(a.poll_interval_s);
  if (r.ok() && r->ok()) {
    LOG_INFO("job {} attempt {}: applied kubernetes job {} in namespace {}", a.job_id, a.attempt, a.name, a.ns);
    return;
  }
  // Nothing (or not all) was created: the attempt ends here; a Terminate
  // still deletes whatever did get created.
  const std::string why = r.ok() ? FirstLine(*r) : r.status().ToString();
  const bool invalid = r.ok() && (r->err.find(" is invalid") != std::string::npos ||
                                  r->err.find("strict decoding error") != std::string::npos);
  a.observed = a.finished = true;
  a.live_pods = 0;
  ReportLocked(a, invalid ? 2 : -1, 0,
               "kubectl apply of kubernetes job " + a.name + " in namespace " + a.ns + " failed: " + why +
                   (invalid ? " (the cluster refused the manifest: not retried)" : ""));
}

void KubernetesLauncher::DoDelete(const Key& key, Attempt s, bool force) {
  const std::string sel = k8s::SelectorString(s.job_id, s.attempt);
  CommandOptions co;
  co.timeout_s = opts_.command_timeout_s;
  // Foreground: the Job object stays until the Job controller's pods are
  // gone, so "the Job is gone" means "no worker is left".
  std::vector<std::string> args =
      force ? std::vector<std::string>{"delete", "pods", "-n", s.ns, "-l", sel, "--grace-period=0", "--force",
                                       "--wait=false", "--ignore-not-found"}
            : std::vector<std::string>{"delete", "jobs.batch,services,secrets", "-n", s.ns, "-l", sel,
                                       "--cascade=foreground", "--wait=false", "--ignore-not-found"};
  auto r = RunCommand(Kubectl(args), co);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find(key);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  if (r.ok() && r->ok()) {
    (force ? a.force_done : a.delete_done) = true;
    a.next_poll_ms = std::min(a.next_poll_ms, NowMs() + Ms(std::min(a.poll_interval_s, 1.0)));
    return;
  }
  LOG_WARN("job {} attempt {}: {}; retrying", a.job_id, a.attempt,
           r.ok() ? r->Explain("kubectl delete") : r.status().ToString());
  a.delete_retry_ms = NowMs() + Ms(a.poll_interval_s);
}

void KubernetesLauncher::DoLocate(const Key& key, Attempt s) {
  const std::string sel = k8s::SelectorString(s.job_id, s.attempt);
  CommandOptions co;
  co.timeout_s = opts_.command_timeout_s;
  std::string found, error;
  for (const std::string& ns : s.search) {
    auto r = RunCommand(Kubectl({"get", "jobs.batch", "-n", ns, "-l", sel, "-o", "json"}), co);
    if (!r.ok() || !r->ok()) {
      error = r.ok() ? r->Explain("kubectl get jobs -n " + ns) : r.status().ToString();
      continue;
    }
    auto objs = k8s::ParseAttemptObjects(r->out);
    if (!objs.ok()) {
      error = objs.status().ToString();
    } else if (objs->job.found) {
      found = ns;
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find(key);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  if (!found.empty()) {
    a.ns = found;
    a.next_poll_ms = 0;
    LOG_INFO("job {} attempt {}: adopted kubernetes job {} in namespace {}", a.job_id, a.attempt, a.name, a.ns);
    return;
  }
  if (!error.empty()) {  // cannot tell: try again
    LOG_WARN("job {} attempt {}: looking for kubernetes job {}: {}", a.job_id, a.attempt, a.name, error);
    a.next_poll_ms = NowMs() + Ms(a.poll_interval_s);
    return;
  }
  std::string where;
  for (const std::string& ns : s.search) where += (where.empty() ? "" : ", ") + ns;
  if (!a.delete_wanted)
    ReportLocked(a, -1, 0, "kubernetes job " + a.name + " is in none of the namespaces [" + where + "]: it disappeared");
  attempts_.erase(it);
}

void KubernetesLauncher::DoPoll(const Key& key, Attempt s) {
  const std::string sel = k8s::SelectorString(s.job_id, s.attempt);
  CommandOptions co;
  co.timeout_s = opts_.command_timeout_s;
  auto r = RunCommand(Kubectl({"get", "jobs.batch,pods", "-n", s.ns, "-l", sel, "-o", "json"}), co);
  shard::StatusOr<k8s::AttemptObjects> objs = shard::Internal("not run");
  if (!r.ok()) objs = r.status();
  else if (!r->ok()) objs = shard::Unavailable(r->Explain("kubectl get"));
  else objs = k8s::ParseAttemptObjects(r->out);

  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find(key);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  const int64_t now = NowMs();
  a.next_poll_ms = now + Ms(a.poll_interval_s);
  if (!objs.ok()) {
    // The API server may be briefly away; the workers' heartbeats to the
    // coordinator still tell whether the attempt lives.
    if (a.get_failures++ % 10 == 0)
      LOG_WARN("job {} attempt {}: watching kubernetes job {}: {}", a.job_id, a.attempt, a.name,
               objs.status().ToString());
    return;
  }
  a.get_failures = 0;
  const k8s::Verdict v = k8s::Judge(*objs, a.name);
  a.observed = true;
  a.live_pods = v.live_pods;
  if (v.phase == k8s::Verdict::kRunning) a.pod_running = true;
  a.wait_detail = v.phase == k8s::Verdict::kPending ? v.detail : "";
  switch (v.phase) {
    case k8s::Verdict::kGone:
      if (!a.delete_wanted)
        ReportLocked(a, -1, 0,
                     "kubernetes job " + a.name + " in namespace " + a.ns + " disappeared (deleted outside shardd?)");
      a.finished = true;
      if (v.live_pods == 0) {
        attempts_.erase(it);  // nothing left to watch: Running() is 0
        return;
      }
      break;
    case k8s::Verdict::kSucceeded:
    case k8s::Verdict::kFailed:
      a.finished = true;
      if (!a.delete_wanted) ReportLocked(a, v.exit_code, v.signal, v.detail);
      // The coordinator ends failed attempts itself (Terminate); a finished
      // one is cleaned up here, so no Job or Secret with a dead token stays.
      if (v.phase == k8s::Verdict::kSucceeded) a.delete_wanted = true;
      break;
    case k8s::Verdict::kPending:
    case k8s::Verdict::kRunning:
      if (v.stuck_kind.empty()) {
        a.stuck_kind.clear();
        a.stuck_since_ms = 0;
        break;
      }
      if (v.stuck_kind != a.stuck_kind) {
        a.stuck_kind = v.stuck_kind;
        a.stuck_since_ms = now;
        LOG_WARN("job {} attempt {}: {}", a.job_id, a.attempt, v.detail);
      }
      {
        const double grace = a.stuck_kind == "image" ? opts_.image_grace_s : opts_.unschedulable_grace_s;
        if (grace > 0 && now - a.stuck_since_ms >= Ms(grace) && !a.delete_wanted)
          ReportLocked(a, -1, 0,
                       "kubernetes job " + a.name + ": " + v.detail + " (for " +
                           std::to_string((now - a.stuck_since_ms) / 1000) + " s; giving up)");
      }
      break;
  }
  // A finished attempt with no pod left needs no watching until Terminate
  // asks for the delete.
  if (a.finished && a.live_pods == 0 && !a.delete_wanted) a.next_poll_ms = kNever;
}

}  // namespace shardd
