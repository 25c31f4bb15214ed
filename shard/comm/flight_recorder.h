// The flight recorder: a bounded ring of this rank's newest collectives
// (sequence number, op, unit, bytes, group, start and end time), so that when
// a job stalls the coordinator can say which rank never entered the
// collective the others wait in, and what that rank was last doing
// (docs/control-plane.md, "The flight recorder").
//
// TimedCommunicator (timed_communicator.h) writes it: Begin before the
// backend call, End after. A record's sequence number counts the calls on its
// communicator (its group) from 1; calls are collective and matched by order,
// so the same call has the same number on every rank of the group, and two
// ranks holding the same number with a different op, unit or bytes have
// diverged (a desync). The worker's heartbeat thread reads Summary().
//
// Cost: one uncontended mutex and two slot writes per collective, no
// allocation (tests/bench/flight_recorder_bench.cc measures it). Memory:
// kCapacity fixed slots (~48 KiB).
//
// Thread-safety: every method is thread-safe (one mutex guards the ring and
// the group table); collectives of different groups may record from
// different threads at once.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace shard {

enum class CollectiveOp : uint8_t { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kBarrier };

// "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier".
const char* CollectiveOpName(CollectiveOp op);

struct CollectiveRecord {
  int64_t seq = 0;        // per group, from 1
  CollectiveOp op = CollectiveOp::kBarrier;
  bool failed = false;    // ended with an error (a timeout, a lost peer, an abort)
  int32_t unit = -1;      // the FSDP unit it moves (CommOptions::unit); -1: none
  int32_t group = -1;     // FlightRecorder::group_name(group)
  int64_t bytes = 0;      // the call's input buffer on this rank
  int64_t start_ns = 0;   // FlightRecorder::NowNs() at Begin
  int64_t end_ns = 0;     // at End; 0 while in flight
  bool in_flight() const { return end_ns == 0; }
};

class FlightRecorder {
 public:
  static constexpr size_t kCapacity = 1024;

  // Steady-clock nanoseconds: the clock every record is stamped with.
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // One communicator's group ("shard0", "rep1") of `size` ranks; the id its
  // records carry. Called once per communicator (allocates).
  int AddGroup(const std::string& name, int size);
  std::string group_name(int group) const;
  int group_size(int group) const;

  // Records the start of call `seq` of `group`; End takes the ticket back.
  uint64_t Begin(int group, int64_t seq, CollectiveOp op, int unit, int64_t bytes);
  void End(uint64_t ticket, bool ok);

  // The newest `n` records (at most kCapacity), oldest first.
  std::vector<CollectiveRecord> Tail(size_t n) const;
  // What a heartbeat carries: for each group, its newest record and, while
  // that one is in flight, its newest finished one (oldest first per group).
  std::vector<CollectiveRecord> Summary() const;
  // Records ever begun (the ring holds the newest kCapacity of them).
  uint64_t count() const;

  // "all_gather #4121 (unit 17, 4.0 MB, shard0) in flight for 62 s" /
  // "... ended 0.2 s ago after 1.3 ms" / "... failed ...": one line for logs.
  std::string Describe(const CollectiveRecord& r, int64_t now_ns) const;

 private:
  struct Group {
    std::string name;
    int size = 0;
    CollectiveRecord newest;       // seq 0: none yet
    CollectiveRecord newest_done;  // seq 0: none yet
  };
  mutable std::mutex mu_;
  std::array<CollectiveRecord, kCapacity> ring_{};  // guarded by mu_
  uint64_t next_ = 0;                               // guarded by mu_: tickets handed out
  std::vector<Group> groups_;                       // guarded by mu_
};

}  // namespace shard
