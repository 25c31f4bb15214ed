// A single background thread that runs communication tasks in FIFO order.
//
// Why one thread: collectives are matched by order across ranks, and every rank
// enqueues the same tasks in the same order, so one FIFO per rank keeps them
// matched while the compute thread overlaps its work with them (all-gather of
// the next unit, reduce-scatter of the previous unit's gradients).
//
// The FSDP runtime also runs a second instance as a plain FIFO executor: its
// host worker, which waits for offloaded gradient copies and adds them on the
// host (fsdp_runtime.h).
//
// A caller blocked in Wait or Drain of a communication queue is waiting for
// its peers: that time goes on the caller's wait clock (shard/comm/
// comm_wait_clock.h), which the trainer subtracts from the step to get its
// compute time. The host worker's waits are local work and are not counted.
//
// Thread-safety: Enqueue and Wait may be called from any thread. After a task
// fails, every later Wait returns that error (the attempt is over).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "shard/common/status.h"

namespace shard {

class CommThread {
 public:
  using Ticket = int64_t;  // tasks complete in ticket order
  // What a caller's blocked Wait is: waiting for peers (counted on its wait
  // clock) or for this process's own work (not counted).
  enum class Waits { kCommunication, kLocalWork };
  explicit CommThread(Waits waits = Waits::kCommunication);
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  Ticket Enqueue(std::function<Status()> task);
  // Blocks until task `t` (and every earlier task) finished; returns the first error.
  Status Wait(Ticket t);
  // Waits for everything enqueued so far.
  Status Drain();
  // True once task `t` has finished (successfully or not); never blocks.
  bool Done(Ticket t);

 private:
  void Loop();

  const Waits waits_;
  std::mutex mu_;
  std::condition_variable cv_;       // new task or stop
  std::condition_variable done_cv_;  // a task finished
  std::deque<std::pair<Ticket, std::function<Status()>>> queue_;  // guarded by mu_
  Ticket next_ = 1;                  // guarded by mu_
  Ticket completed_ = 0;             // guarded by mu_
  Status error_;                     // guarded by mu_
  bool stop_ = false;                // guarded by mu_
  std::thread thread_;
};

}  // namespace shard
