// The ranks of one job on this host, each a child leading its own process
// group (or a process adopted by pid): spawn, poll without blocking, signal
// every group, stop. The non-blocking half of the local supervisor
// (shard/common/supervisor.h waits on a RankGroup); the coordinator's local
// launcher keeps one RankGroup per attempt and polls it from its own loop.
//
// Thread-safety: none; one thread uses a RankGroup at a time.
#pragma once

#include <sys/types.h>

#include <vector>

#include "shard/common/process.h"
#include "shard/common/status.h"

namespace shard {

// How one rank ended.
struct RankEnd {
  int rank = 0;
  ExitStatus status;     // code -1, signal 0 for an adopted rank (its code is not ours to see)
  bool adopted = false;
};

class RankGroup {
 public:
  RankGroup() = default;
  RankGroup(RankGroup&&) = default;
  RankGroup& operator=(RankGroup&&) = default;
  // Ranks still running are killed with their groups (children reaped): no
  // orphans.
  ~RankGroup();

  // Starts `rank` as a child leading its own process group (whatever
  // opts.new_process_group says). Returns its pid.
  StatusOr<pid_t> Spawn(int rank, SpawnOptions opts);
  // Watches a process this one did not start (a restarted coordinator's
  // workers): it leads its own group; its end is seen with kill(pid, 0).
  void Adopt(int rank, pid_t pid);

  // The ranks that ended since the last call, reaped. Whatever a rank left in
  // its group is SIGKILLed with it.
  std::vector<RankEnd> Poll();
  // Sends sig to the group of every rank still running.
  void Signal(int sig);
  // SIGTERM to every running rank's group, SIGKILL after grace_s; returns
  // once the children have ended. Their ends are not reported by Poll.
  void Stop(double grace_s);
  // Lets every running rank go (children and adopted alike): they run on,
  // are no longer watched, and are not killed when this group goes.
  void Release();

  int running() const;
  bool empty() const { return members_.empty(); }

 private:
  struct Member {
    int rank = 0;
    pid_t pid = 0;
    Process proc;        // our child; not running for an adopted rank
    bool child = true;
    bool done = false;
  };
  std::vector<Member> members_;
};

}  // namespace shard
