#include "coordinator/launchers/local/local_launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace shardd {

LocalLauncher::Attempt& LocalLauncher::Find(const std::string& job_id, int attempt) {
  for (Attempt& a : attempts_)
    if (a.job_id == job_id && a.attempt == attempt) return a;
  attempts_.push_back(Attempt{job_id, attempt, {}});
  return attempts_.back();
}

StatusOr<std::vector<int>> LocalLauncher::JobGpus(const LaunchRequest& req) const {
  if (auto it = req.env.find("CUDA_VISIBLE_DEVICES"); it != req.env.end()) return ParseDeviceList(it->second);
  if (auto it = job_gpus_.find(req.job_id); it != job_gpus_.end()) return it->second;
  return shard::NotFound("job " + req.job_id + " was not launched by this coordinator: its GPUs are not known");
}

StatusOr<int> LocalLauncher::Capacity(const LaunchRequest& req) {
  ASSIGN_OR_RETURN(const std::vector<int> gpus, JobGpus(req));
  if (gpus.empty())
    return shard::Unimplemented("job " + req.job_id + " runs on CPU ranks, which have no placement limit");
  if (!gpus_) return shard::Unimplemented("the local launcher has no GPU probe");
  ASSIGN_OR_RETURN(const std::vector<int> left, gpus_->Surviving(gpus));
  return std::min<int>(req.world, static_cast<int>(left.size()));
}

StatusOr<std::vector<int>> LocalLauncher::Launch(const LaunchRequest& req) {
  std::map<std::string, std::string> env = req.env;
  if (auto gpus = JobGpus(req); gpus.ok() && !gpus->empty()) {
    job_gpus_[req.job_id] = *gpus;
    // Fewer ranks than devices: an elastic attempt on the ones still here.
    if (gpus_ && req.world < static_cast<int>(gpus->size())) {
      auto left = gpus_->Surviving(*gpus);
      if (!left.ok()) return shard::Unavailable("cannot place " + std::to_string(req.world) + " rank(s) of job " +
                                                req.job_id + ": " + left.status().message());
      if (static_cast<int>(left->size()) < req.world)
        return shard::Unavailable("cannot place " + std::to_string(req.world) + " rank(s) of job " + req.job_id +
                                  ": only " + std::to_string(left->size()) + " of its GPUs " + DeviceList(*gpus) +
                                  " are left");
      left->resize(req.world);
      env["CUDA_VISIBLE_DEVICES"] = DeviceList(*left);
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(req.log_dir, ec);
  if (ec) return shard::Internal("cannot create log dir " + req.log_dir + ": " + ec.message());
  if (::access(req.worker_bin.c_str(), X_OK) != 0)
    return shard::NotFound("worker binary " + req.worker_bin + " is not executable: " + std::strerror(errno));
  std::vector<int> pids;
  for (int r = 0; r < req.world; ++r) {
    shard::SpawnOptions o;
    o.argv = {req.worker_bin, "--coordinator", req.coordinator, "--job", req.job_id,
              "--attempt", std::to_string(req.attempt), "--rank", std::to_string(r)};
    // req.env replaces an inherited value; the coordinator's own secrets are
    // not inherited.
    o.env.unset.assign(std::begin(kCoordinatorOnlyEnv), std::end(kCoordinatorOnlyEnv));
    o.env.set = env;
    o.cwd = req.workdir;
    o.log_path = (std::filesystem::path(req.log_dir) / ("rank_" + std::to_string(r) + ".log")).string();
    // No die_with_parent: a restarted coordinator adopts its running workers.
    auto pid = Find(req.job_id, req.attempt).ranks.Spawn(r, o);
    if (!pid.ok()) {
      Terminate(req.job_id, req.attempt, /*force=*/true);
      return pid.status();
    }
    pids.push_back(*pid);
  }
  return pids;
}

std::vector<RankExit> LocalLauncher::Poll() {
  std::vector<RankExit> out;
  for (Attempt& a : attempts_)
    for (const shard::RankEnd& e : a.ranks.Poll()) {
      // An adopted rank's code is not ours to see: -1.
      const int code = e.adopted ? -1 : e.status.signal == 0 ? e.status.code : 0;
      out.push_back({a.job_id, a.attempt, e.rank, code, e.status.signal, ""});
    }
  std::erase_if(attempts_, [](const Attempt& a) { return a.ranks.running() == 0; });
  return out;
}

void LocalLauncher::Release() {
  for (Attempt& a : attempts_) a.ranks.Release();
  attempts_.clear();
}

void LocalLauncher::Terminate(const std::string& job_id, int attempt, bool force) {
  for (Attempt& a : attempts_)
    if (a.job_id == job_id && a.attempt == attempt) a.ranks.Signal(force ? SIGKILL : SIGTERM);
}

int LocalLauncher::Running(const std::string& job_id, int attempt) {
  for (Attempt& a : attempts_)
    if (a.job_id == job_id && a.attempt == attempt) return a.ranks.running();
  return 0;
}

void LocalLauncher::Adopt(const std::string& job_id, int attempt, const std::vector<int>& pids) {
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] <= 0) continue;
    // Only a process that is still this job's worker: a pid from the database
    // may have been reused by anything since.
    std::ifstream f("/proc/" + std::to_string(pids[r]) + "/cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string want = std::string("--job") + '\0' + job_id + '\0' + "--attempt" + '\0' +
                             std::to_string(attempt) + '\0';
    if (cmd.find(want) == std::string::npos) continue;
    Find(job_id, attempt).ranks.Adopt(static_cast<int>(r), pids[r]);
  }
}

}  // namespace shardd
