// How long the calling thread has been blocked on communication: a per-thread
// running total that the trainer reads before and after a step, so a step's
// compute time is its wall time minus the time its thread waited for peers
// (what straggler detection compares across ranks, docs/control-plane.md).
//
// Two seams feed it, each where the blocking happens and nowhere else:
//   * TimedCommunicator (timed_communicator.h) times every collective a
//     thread calls itself (the loss all-reduce, the gradient norm, a replica
//     all-reduce);
//   * the FSDP runtime's communication thread (shard/fsdp/comm_thread.h)
//     times a caller's Wait/Drain on collectives it runs in the background.
// Time the communication thread itself spends inside collectives lands on its
// own total, which nobody reads: overlapped communication is not waiting.
//
// Thread-safety: each thread touches only its own total (thread_local).
#pragma once

#include <chrono>

namespace shard {

// Seconds this thread has spent inside ScopedCommWait scopes since it started.
double ThisThreadCommWaitSeconds();

// Adds the scope's duration to this thread's total.
class ScopedCommWait {
 public:
  ScopedCommWait() : t0_(std::chrono::steady_clock::now()) {}
  ~ScopedCommWait();
  ScopedCommWait(const ScopedCommWait&) = delete;
  ScopedCommWait& operator=(const ScopedCommWait&) = delete;

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace shard
