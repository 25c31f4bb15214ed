// The rendezvous and the phase barrier shared by the threads of one local group.
//
// Groups are found by name in a process-wide registry: the first rank to Join a name
// creates the group, the last one to arrive removes it from the registry (so the same
// name can be used again for a fresh group later). Each collective is one or two
// phases: every rank publishes a Post describing its buffers and waits for all ranks
// (Arrive); between the two phases a rank reads its peers' buffers directly; the second
// Arrive keeps anyone from returning (and reusing a buffer) while a peer still reads it.
//
// Failures are sticky: a timeout, an Abort, a departed rank or a mismatched call
// "breaks" the group, and every waiting or later Arrive of every rank fails at once
// (ABORTED for the rank that aborted, UNAVAILABLE naming the cause for the others).
//
// Thread-safe: mu_ guards every mutable member; the registry has its own mutex, always
// taken before a group's mu_.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shard::comm {

// What a rank brings to a collective. Peers read it between the two phases.
struct LocalPost {
  const char* call = "";  // "AllGather", ...
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  int root = -1;      // Broadcast only
  int op = -1;        // ReduceOp as int; -1 when none
  int elem_size = 0;  // sizeof(element)

  std::string Describe() const;  // "AllReduce(count=3, op=1, elem=4)"
};

class LocalGroup {
 public:
  using Clock = std::chrono::steady_clock;

  // Joins group `name` as `rank` and waits until all `world_size` ranks have joined.
  static StatusOr<std::shared_ptr<LocalGroup>> Join(const std::string& name, int rank,
                                                    int world_size,
                                                    std::chrono::milliseconds timeout);

  LocalGroup(std::string name, int world_size);

  const std::string& name() const { return name_; }
  int world_size() const { return world_size_; }

  // Fails (ABORTED / UNAVAILABLE) if the group is broken; prefix errors with `where`.
  Status CheckUsable(int rank, const std::string& where);

  // Publishes `post` (if not null) as this rank's and waits until every rank has
  // arrived at the same phase, `deadline` passes (DEADLINE_EXCEEDED naming the missing
  // ranks, and the group breaks), or the group breaks. When posts were published, the
  // rank completing the phase checks, before anyone proceeds, that all ranks posted the
  // same call, count, root, op and element size; if not, the group breaks and the calls
  // fail (INVALID_ARGUMENT for that rank) describing the disagreement.
  Status Arrive(int rank, const LocalPost* post, Clock::time_point deadline,
                std::chrono::milliseconds timeout, const std::string& where);

  // Rank r's post of the current collective. Only valid between the two Arrive calls.
  const LocalPost& post(int r) const { return posts_[r]; }

  // Rank `rank` aborts: its calls return ABORTED, everyone else's UNAVAILABLE.
  void Abort(int rank, const std::string& reason);
  // Rank `rank` destroyed its communicator; peers that still wait on it fail.
  void Leave(int rank);

 private:
  // Marks the group broken (first cause wins) and wakes every waiter. Needs mu_ held.
  void BreakLocked(const std::string& cause);
  Status BrokenStatusLocked(int rank, const std::string& where) const;
  // Empty if all posts agree, else "rank 0 called X but rank 2 called Y". Needs mu_.
  std::string MismatchLocked() const;

  const std::string name_;
  const int world_size_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Join state.
  std::vector<bool> joined_;  // guarded by mu_
  int num_joined_ = 0;        // guarded by mu_
  // Phase barrier state.
  std::vector<bool> arrived_;  // guarded by mu_; which ranks are in the current phase
  int num_arrived_ = 0;        // guarded by mu_
  uint64_t generation_ = 0;    // guarded by mu_; bumped when a phase completes
  // Written under mu_ before a phase completes, read after it (the mutex orders them).
  std::vector<LocalPost> posts_;
  // Failure state.
  std::string broken_cause_;            // guarded by mu_; empty while healthy
  std::vector<std::string> aborted_;    // guarded by mu_; per rank, non-empty = reason
};

}  // namespace shard::comm
