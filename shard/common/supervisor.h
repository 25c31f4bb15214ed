// The local supervisor: the one place that runs a job's ranks on this host
// and waits for them (`shardctl launch`, `shardd-worker --nproc-per-node`;
// the coordinator's local launcher polls a RankGroup from its own loop).
//
// Each rank leads its own process group, so a terminal's Ctrl-C or a pod's
// SIGTERM reaches only the supervising process: it passes the signals named
// in `forward` on to every rank's group. When a rank fails, the others are
// stopped (SIGTERM to their groups, SIGKILL after the grace) so none waits in
// a collective for a peer that is gone. Every rank is reaped and its end
// (exit code or signal) reported.
//
// Wait sleeps on a self-pipe the signal handlers (the forwarded signals and
// SIGCHLD) write to, not on a fixed tick.
//
// Thread-safety: one Supervisor per process at a time (it owns the handlers
// of the forwarded signals and SIGCHLD while it lives; the previous ones are
// restored by the destructor); used by one thread, the one that spawns (see
// SpawnOptions::die_with_parent).
#pragma once

#include <signal.h>

#include <functional>
#include <utility>
#include <vector>

#include "shard/common/rank_group.h"

namespace shard {

struct SuperviseOptions {
  // Signals caught while the Supervisor lives, each passed on to every
  // running rank's group as the second signal: {SIGINT, SIGINT}, or a pod's
  // {SIGTERM, SIGUSR1} (checkpoint and stop).
  std::vector<std::pair<int, int>> forward;
  // After passing a signal on, stop the ranks as after a failure.
  bool stop_on_signal = false;
  // Whether a rank's end dooms the others. Default: anything but exit code 0.
  std::function<bool(const ExitStatus&)> fails = [](const ExitStatus& e) { return !e.ok(); };
  // The others get SIGTERM, then SIGKILL after this many seconds; < 0: SIGTERM only.
  double stop_grace_s = 5;
  // Called for each rank's end as it is seen, before the others are stopped;
  // `dooms` is true for the failure that stops them (at most once, and never
  // once a forwarded signal is stopping them).
  std::function<void(const RankEnd& end, bool dooms)> on_end;
  // Called for each signal caught before the ranks are being stopped, before
  // it is passed on.
  std::function<void(int sig)> on_signal;
};

struct SuperviseResult {
  std::vector<RankEnd> ends;  // every rank, in the order their ends were seen
  int failed_rank = -1;       // the failure that stopped the others, or -1
  int signal = 0;             // the first signal caught and passed on, or 0
};

class Supervisor {
 public:
  // Starts catching opts.forward's signals (a signal that arrives before
  // Wait is passed on once Wait runs).
  explicit Supervisor(SuperviseOptions opts);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts one rank (its own process group). On an error the ranks already
  // started keep running: Stop them, or let the destructor kill them.
  StatusOr<pid_t> Spawn(int rank, const SpawnOptions& opts) { return ranks_.Spawn(rank, opts); }
  // Blocks until every rank has ended, forwarding signals and stopping the
  // others after a failure on the way.
  SuperviseResult Wait();
  // SIGTERM to every running rank, SIGKILL after the grace; waits for them.
  void Stop() { ranks_.Stop(opts_.stop_grace_s < 0 ? 0 : opts_.stop_grace_s); }

 private:
  void BeginStop();
  void OnSignal(int sig, SuperviseResult& result);
  void OnEnd(const RankEnd& end, SuperviseResult& result);
  // Sleeps until a signal arrives or at most timeout_ms.
  void Sleep(int timeout_ms);

  SuperviseOptions opts_;
  RankGroup ranks_;
  std::vector<std::pair<int, struct sigaction>> saved_;  // handlers to restore
  bool stopping_ = false;
  double kill_at_ = -1;  // steady-clock seconds when the stop turns to SIGKILL; < 0: none
};

}  // namespace shard
