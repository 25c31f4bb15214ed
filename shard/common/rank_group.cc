#include "shard/common/rank_group.h"

#include <signal.h>

#include <cerrno>

namespace shard {

RankGroup::~RankGroup() {
  // Children are SIGKILLed and reaped by their Process; adopted ranks by hand.
  for (Member& m : members_)
    if (!m.done && !m.child) ::kill(-m.pid, SIGKILL);
}

StatusOr<pid_t> RankGroup::Spawn(int rank, SpawnOptions opts) {
  opts.new_process_group = true;
  ASSIGN_OR_RETURN(Process proc, Process::Spawn(opts));
  Member m;
  m.rank = rank;
  m.pid = proc.pid();
  m.proc = std::move(proc);
  members_.push_back(std::move(m));
  return members_.back().pid;
}

void RankGroup::Adopt(int rank, pid_t pid) {
  Member m;
  m.rank = rank;
  m.pid = pid;
  m.child = false;
  members_.push_back(std::move(m));
}

std::vector<RankEnd> RankGroup::Poll() {
  std::vector<RankEnd> out;
  for (Member& m : members_) {
    if (m.done) continue;
    if (m.child) {
      const std::optional<ExitStatus> st = m.proc.Poll();
      if (!st) continue;
      m.done = true;
      // Whatever the rank left in its group goes with it.
      m.proc.Signal(SIGKILL);
      out.push_back({m.rank, *st, false});
    } else if (::kill(m.pid, 0) != 0 && errno == ESRCH) {
      m.done = true;
      out.push_back({m.rank, ExitStatus{}, true});
    }
  }
  return out;
}

void RankGroup::Release() {
  for (Member& m : members_) {
    if (m.done) continue;
    if (m.child) m.proc.Release();
    m.done = true;
  }
}

void RankGroup::Signal(int sig) {
  for (Member& m : members_) {
    if (m.done) continue;
    if (m.child) m.proc.Signal(sig);
    else ::kill(-m.pid, sig);
  }
}

void RankGroup::Stop(double grace_s) {
  std::vector<Process*> children;
  for (Member& m : members_) {
    if (m.done) continue;
    if (m.child) children.push_back(&m.proc);
    else ::kill(-m.pid, SIGTERM);
  }
  StopAll(children, grace_s);
  for (Member& m : members_) {
    if (!m.done && !m.child) ::kill(-m.pid, SIGKILL);
    m.done = true;
  }
}

int RankGroup::running() const {
  int n = 0;
  for (const Member& m : members_) n += m.done ? 0 : 1;
  return n;
}

}  // namespace shard
