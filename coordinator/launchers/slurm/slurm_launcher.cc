#include "coordinator/launchers/slurm/slurm_launcher.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "coordinator/launchers/command.h"
#include "coordinator/launchers/slurm/slurm_capacity.h"
#include "coordinator/launchers/slurm/slurm_script.h"
#include "coordinator/launchers/slurm/slurm_status.h"
#include "shard/common/file_util.h"
#include "shard/common/logging.h"

namespace shardd {

Status SlurmLauncher::CheckAvailable() { return available_.Check(); }

StatusOr<std::vector<int>> SlurmLauncher::Launch(const LaunchRequest& req) {
  std::error_code ec;
  std::filesystem::create_directories(req.log_dir, ec);
  if (ec) return shard::Internal("cannot create " + req.log_dir + ": " + ec.message());
  const std::string script_path = req.log_dir + "/job.sbatch";
  RETURN_IF_ERROR(shard::WriteFileAtomic(script_path, RenderSbatchScript(req)));
  ::chmod(script_path.c_str(), 0700);
  CommandOptions co;
  co.env = req.env;  // the token: sbatch --export=ALL hands it to the workers
  // ... and all of this process's environment with it: blank the admin token
  // and the coordinator's own TLS files (the local launcher drops them too).
  for (const char* name : kCoordinatorOnlyEnv) co.env.emplace(name, "");
  co.cwd = req.workdir;
  co.timeout_s = opts_.command_timeout_s;
  ASSIGN_OR_RETURN(CommandResult r, RunCommand({opts_.sbatch, "--parsable", script_path}, co));
  if (!r.ok()) {
    // slurmctld busy or restarting is worth a retry; a refusal (bad
    // partition, account, time limit) is not.
    const std::string why = r.Explain("sbatch " + script_path);
    const bool transient = why.find("Socket timed out") != std::string::npos ||
                           why.find("Unable to contact slurm controller") != std::string::npos ||
                           why.find("temporarily unavailable") != std::string::npos ||
                           why.find("Slurm temporarily unable") != std::string::npos;
    return transient ? shard::Unavailable(why) : shard::FailedPrecondition(why);
  }
  std::string id = r.out.substr(0, r.out.find_first_of(";\n"));  // "42" or "42;cluster"
  if (id.empty() || id.find_first_not_of("0123456789_") != std::string::npos)
    return shard::Internal("sbatch printed '" + r.out.substr(0, 100) + "', not a job id");
  Attempt& a = attempts_[{req.job_id, req.attempt}];
  a.slurm_id = id;
  a.poll_interval_s = req.resources.slurm.poll_interval_s;
  a.next_poll = std::chrono::steady_clock::now();
  LOG_INFO("job {} attempt {}: slurm job {} submitted ({})", req.job_id, req.attempt, id, script_path);
  return std::vector<int>(req.world, 0);
}

bool SlurmLauncher::Check(const Key& key, Attempt& a, RankExit* exit) {
  CommandOptions co;
  co.timeout_s = opts_.command_timeout_s;
  exit->job_id = key.first;
  exit->attempt = key.second;
  exit->rank = RankExit::kAllRanks;
  auto r = RunCommand({opts_.scontrol, "show", "job", "-o", a.slurm_id}, co);
  if (!r.ok()) {
    LOG_WARN("slurm job {}: {}", a.slurm_id, r.status().ToString());
    return false;  // try again at the next poll
  }
  StatusOr<SlurmJobInfo> info = shard::NotFound("");
  if (r->ok()) {
    info = ParseScontrolJob(r->out);
  } else {
    // slurmctld forgot it (MinJobAge): accounting may still know.
    auto s = RunCommand({opts_.sacct, "-n", "-P", "-X", "-j", a.slurm_id, "-o", "State,ExitCode"}, co);
    if (s.ok() && s->ok()) info = ParseSacctJob(s->out);
    // Only "Invalid job id" means slurmctld forgot it; anything else (it is
    // restarting, unreachable) says nothing about the job: ask again later.
    if (!info.ok() && r->err.find("Invalid job id") == std::string::npos) {
      LOG_WARN("slurm job {}: {}; asking again at the next poll", a.slurm_id, r->Explain("scontrol show job"));
      return false;
    }
  }
  if (!info.ok()) {
    exit->exit_code = -1;
    exit->detail = "slurm job " + a.slurm_id + " is gone (neither scontrol nor sacct knows it)";
    return true;
  }
  if (info->state == "RUNNING") a.ran = true;
  a.queued = info->state == "PENDING" || info->state == "CONFIGURING";
  a.queue_reason = a.queued ? "slurm job " + a.slurm_id + " " + info->state +
                                  (info->reason.empty() || info->reason == "None" ? "" : " (" + info->reason + ")")
                            : "";
  if (info->restarts > a.restarts_seen) {
    a.requeued = true;
    exit->exit_code = -1;
    exit->detail = "slurm job " + a.slurm_id + " was requeued by Slurm (" + info->state + ", reason " + info->reason +
                   ")";
    return true;
  }
  if (!SlurmStateFinal(info->state)) return false;
  exit->exit_code = info->exit_code;
  exit->signal = info->signal;
  if (info->state == "COMPLETED") return true;
  if (info->state == "FAILED" && info->signal == 0) return true;  // the workers' own exit code says it
  exit->exit_code = info->state == "FAILED" ? info->exit_code : -1;
  exit->detail = "slurm job " + a.slurm_id + " " + info->state +
                 (info->reason.empty() || info->reason == "None" ? "" : " (" + info->reason + ")") +
                 (info->signal ? ", signal " + std::to_string(info->signal) : "");
  return true;
}

void SlurmLauncher::Refresh(const Key& key, Attempt& a) {
  const auto now = std::chrono::steady_clock::now();
  if (a.ended || now < a.next_poll) return;
  a.next_poll = now + std::chrono::milliseconds(static_cast<int64_t>(a.poll_interval_s * 1000));
  if (a.slurm_id.empty()) {
    a.ended = true;
    pending_.push_back({key.first, key.second, RankExit::kAllRanks, -1, 0,
                        "no slurm job named " + SlurmJobName(key.first, key.second) + " was found after the restart"});
    return;
  }
  RankExit e;
  if (Check(key, a, &e)) {
    a.ended = true;
    pending_.push_back(e);
  }
}

std::vector<RankExit> SlurmLauncher::Poll() {
  for (auto& [key, a] : attempts_) Refresh(key, a);
  // Forget ended attempts but the newest per job (Running() still asks about it).
  for (auto it = attempts_.begin(); it != attempts_.end();) {
    auto next = std::next(it);
    if (it->second.ended && next != attempts_.end() && next->first.first == it->first.first) attempts_.erase(it);
    it = next;
  }
  return std::exchange(pending_, {});
}

void SlurmLauncher::Terminate(const std::string& job_id, int attempt, bool force) {
  auto it = attempts_.find({job_id, attempt});
  // An ended job needs no scancel, except a requeued one: it would run again.
  if (it == attempts_.end() || it->second.slurm_id.empty() || (it->second.ended && !it->second.requeued)) return;
  CommandOptions co;
  co.timeout_s = opts_.command_timeout_s;
  // Without force Slurm sends SIGTERM, then SIGKILL after its KillWait.
  std::vector<std::string> argv = {opts_.scancel};
  if (force) argv.insert(argv.end(), {"--signal=KILL", "--full"});
  argv.push_back(it->second.slurm_id);
  auto r = RunCommand(argv, co);
  if (!r.ok() || !r->ok())
    LOG_WARN("job {} attempt {}: {}", job_id, attempt,
             r.ok() ? r->Explain("scancel " + it->second.slurm_id) : r.status().ToString());
  it->second.next_poll = std::chrono::steady_clock::now();  // see it end soon
}

bool SlurmLauncher::Pending(const std::string& job_id, int attempt) {
  auto it = attempts_.find({job_id, attempt});
  if (it == attempts_.end() || it->second.ended) return false;
  Refresh(it->first, it->second);
  return !it->second.ended && it->second.queued;
}

std::string SlurmLauncher::PendingReason(const std::string& job_id, int attempt) {
  auto it = attempts_.find({job_id, attempt});
  return it == attempts_.end() || it->second.ended ? "" : it->second.queue_reason;
}

int SlurmLauncher::Running(const std::string& job_id, int attempt) {
  auto it = attempts_.find({job_id, attempt});
  if (it == attempts_.end() || it->second.ended) return 0;
  Refresh(it->first, it->second);  // rate-limited; an exit it finds waits for Poll
  return it->second.ended ? 0 : 1;
}

StatusOr<int> SlurmLauncher::Capacity(const LaunchRequest& req) {
  const auto now = std::chrono::steady_clock::now();
  auto it = capacity_.find(req.job_id);
  if (it != capacity_.end() && it->second.attempt == req.attempt && now < it->second.next) return it->second.ranks;
  CapacityAnswer& a = capacity_[req.job_id];
  a.attempt = req.attempt;
  a.ranks = AskCapacity(req);
  a.next = now + std::chrono::milliseconds(static_cast<int64_t>(req.resources.slurm.poll_interval_s * 1000));
  return a.ranks;
}

StatusOr<int> SlurmLauncher::AskCapacity(const LaunchRequest& req) {
  const shard::SlurmConfig& c = req.resources.slurm;
  CommandOptions co;
  co.timeout_s = opts_.command_timeout_s;
  auto ask = [&](const std::vector<std::string>& argv, const std::string& what) -> StatusOr<std::string> {
    ASSIGN_OR_RETURN(CommandResult r, RunCommand(argv, co));
    if (!r.ok()) return shard::Unavailable(r.Explain(what));
    return r.out;
  };
  SlurmTaskShape shape;
  const int tasks = c.TasksPerNode(req.world);
  // The shape shard::ElasticRankUnit resizes in: one node of CPU workers,
  // or whole nodes of `tasks` each.
  shape.unit = c.tasks_per_node == 0 && c.gpus_per_node == 0 && c.nodes <= 1 ? 0 : tasks;
  shape.cpus_per_task = c.cpus_per_task > 0 ? c.cpus_per_task : 1;
  shape.gpus_per_task = c.gpus_per_node > 0 && tasks > 0 ? c.gpus_per_node / tasks : 0;
  shape.partition = c.partition;
  if (shape.partition.empty()) {
    ASSIGN_OR_RETURN(std::string parts, ask({opts_.scontrol, "show", "partition", "-o"}, "scontrol show partition"));
    shape.partition = DefaultPartition(parts);
  }
  ASSIGN_OR_RETURN(std::string text, ask({opts_.scontrol, "show", "nodes", "-o"}, "scontrol show nodes"));
  ASSIGN_OR_RETURN(std::vector<SlurmNode> nodes, ParseScontrolNodes(text));
  std::map<std::string, SlurmHeld> held;
  if (auto own = attempts_.find({req.job_id, req.attempt}); own != attempts_.end() && !own->second.slurm_id.empty()) {
    auto job = RunCommand({opts_.scontrol, "show", "job", "-o", own->second.slurm_id}, co);
    if (job.ok() && job->ok()) held = ParseHeldByJob(job->out);
  }
  return PlaceableRanks(nodes, held, shape, req.world);
}

void SlurmLauncher::Adopt(const std::string& job_id, int attempt, const std::vector<int>&) {
  Attempt& a = attempts_[{job_id, attempt}];
  a.next_poll = std::chrono::steady_clock::now();
  CommandOptions co;
  co.timeout_s = opts_.command_timeout_s;
  // --states=all: a job that ended while the coordinator was down is still
  // listed (for MinJobAge), so its end is seen rather than "not found".
  auto r = RunCommand({opts_.squeue, "-h", "--states=all", "-n", SlurmJobName(job_id, attempt), "-o", "%i"}, co);
  if (r.ok() && r->ok()) a.slurm_id = r->out.substr(0, r->out.find('\n'));
  if (a.slurm_id.empty())
    LOG_WARN("job {} attempt {}: no slurm job named {} in squeue", job_id, attempt, SlurmJobName(job_id, attempt));
}

std::string SlurmLauncher::SlurmJobId(const std::string& job_id, int attempt) const {
  auto it = attempts_.find({job_id, attempt});
  return it == attempts_.end() ? "" : it->second.slurm_id;
}

}  // namespace shardd
