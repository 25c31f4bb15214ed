// Runs attempts as Kubernetes Indexed Jobs (see k8s_manifests.h for what is
// created) and watches them with kubectl.
//
// Why a thread: the JobManager calls every launcher from its one thread with
// its mutex held, ten times a second, and a kubectl call takes from a tenth of
// a second to the command timeout. So nothing here runs kubectl on the
// caller's thread: Launch renders and checks the manifests (errors come back
// at once) and queues the apply; Terminate queues the delete; Poll and
// Running return what the launcher's own thread last saw. That thread works
// through queued applies and deletes first, then runs one
// `kubectl get jobs.batch,pods -l <attempt> -o json` per attempt every
// resources.kubernetes.poll_interval_s, and turns what it sees into exits
// (k8s_status.h): the whole attempt ends at once (rank = kAllRanks), with the
// pod, the reason and the container's exit code (2 = bad input) in the detail.
// An apply that kubectl refuses is reported the same way, as an exit.
//
// Cluster objects outlive this object: destroying the launcher (a coordinator
// shutdown) stops watching but deletes nothing, so a restarted coordinator
// adopts the running attempt by name.
//
// Thread-safety: every public method may be called from any thread; mu_
// guards attempts_ and exits_. kubectl runs on thread_ only, never under mu_.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "coordinator/launchers/command.h"
#include "coordinator/launchers/launcher.h"

namespace shardd {

struct KubernetesLauncherOptions {
  std::string kubectl = "kubectl";          // looked up on PATH
  std::vector<std::string> kubectl_args;    // before every subcommand: --kubeconfig F, --context C
  std::string worker_command = "shardd-worker";  // on the worker image's PATH
  // Adopt has only (job id, attempt): it looks for the Job in these namespaces.
  std::vector<std::string> adopt_namespaces = {"default"};
  double adopt_poll_interval_s = 2;
  double command_timeout_s = 60;            // per kubectl call
  // Pods that cannot start (image pull errors, a missing Secret) fail the
  // attempt after this long; Unschedulable pods after unschedulable_grace_s
  // (0 = wait for capacity forever).
  double image_grace_s = 180;
  double unschedulable_grace_s = 1800;
};

class KubernetesLauncher : public Launcher {
 public:
  explicit KubernetesLauncher(KubernetesLauncherOptions opts);
  ~KubernetesLauncher() override;  // stops watching; leaves the cluster objects for adoption
  const char* name() const override { return "kubernetes"; }
  // kubectl runs here (`kubectl version --client`, checked once a minute at most).
  Status CheckAvailable() override;
  // Renders and checks; queues `kubectl apply`. Returns world zeros (pods
  // have no process ids the coordinator could use).
  StatusOr<std::vector<int>> Launch(const LaunchRequest& req) override;
  std::vector<RankExit> Poll() override;
  // Queues `kubectl delete jobs,services,secrets -l <attempt>` (foreground
  // cascade: the Job stays until its pods are gone, so Running() reaches 0
  // only then); force also deletes the pods with --grace-period=0 --force.
  void Terminate(const std::string& job_id, int attempt, bool force) override;
  // The attempt's ranks until its Job is seen gone, or finished with no pod left.
  int Running(const std::string& job_id, int attempt) override;
  // Until a pod of the attempt runs (scheduling, image pulls): the
  // JobManager's registration clock waits; stuck pods have their own graces.
  bool Pending(const std::string& job_id, int attempt) override;
  // Why a pod waits, when the cluster said (unschedulable, image errors).
  std::string PendingReason(const std::string& job_id, int attempt) override;
  // Finds the Job named after (job_id, attempt) in opts.adopt_namespaces and
  // watches it; one that is in none of them is reported as gone.
  void Adopt(const std::string& job_id, int attempt, const std::vector<int>& pids) override;

 private:
  using Key = std::pair<std::string, int>;
  struct Attempt {
    std::string job_id;
    int attempt = 0;
    int world = 0;
    int nproc = 1;
    std::string name;                  // of the Job, Service and Secret
    std::string ns;                    // "" while an adopted attempt is being located
    std::string manifest;              // YAML still to apply ("" once applied, or adopted)
    std::vector<std::string> search;   // namespaces to look in (adopted)
    double poll_interval_s = 2;
    bool delete_wanted = false, delete_done = false;
    bool force_wanted = false, force_done = false;
    bool reported = false;             // an exit went to exits_
    bool gone = false;                 // the Job and its pods are seen gone: Running() = 0
    bool observed = false;
    int live_pods = 0;
    bool pod_running = false;          // the last poll saw a pod of the attempt Running
    std::string wait_detail;           // the last poll's reason a pod waits ("" = none known)
    bool finished = false;             // the Job succeeded or failed
    int64_t next_poll_ms = 0;
    int64_t delete_retry_ms = 0;     // after a failed kubectl delete
    int64_t stuck_since_ms = 0;
    std::string stuck_kind;
    int get_failures = 0;
  };
  enum class Action { kNone, kLocate, kApply, kDelete, kForce, kPoll };

  void Loop();
  // Under mu_: the next action and the attempt it is for.
  std::pair<Action, Key> NextActionLocked(int64_t now_ms, int64_t* wake_ms);
  void DoLocate(const Key& key, Attempt snapshot);
  void DoApply(const Key& key, Attempt snapshot);
  void DoDelete(const Key& key, Attempt snapshot, bool force);
  void DoPoll(const Key& key, Attempt snapshot);
  void ReportLocked(Attempt& a, int exit_code, int signal, const std::string& detail);
  std::vector<std::string> Kubectl(std::vector<std::string> args) const;

  const KubernetesLauncherOptions opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, Attempt> attempts_;
  std::vector<RankExit> exits_;
  bool stop_ = false;
  CommandCheck available_{"kubernetes", "kubectl", {opts_.kubectl, "version", "--client"}};  // CheckAvailable's cached answer
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace shardd
