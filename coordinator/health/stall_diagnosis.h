// Turns what the ranks' flight recorders last said (each heartbeat carries,
// per communication group, the rank's newest collective and its newest
// finished one) into one sentence naming the cause of a stall: pure, so each
// case is unit-tested with made-up records and no clock.
//
// Rules, first match wins:
//   * a desync: two ranks hold the same call number of a group with a
//     different op, unit or bytes — their code paths diverged ("ranks
//     disagree on collective #41 of group shard0: rank 0 called all_gather
//     (unit 3, 4096 B), rank 1 called all_reduce (8 B)");
//   * a stuck collective: in the group whose oldest waiter waited longest,
//     the ranks inside (or failed in) its newest call are the waiters, the
//     group's other ranks that never entered it are named with what they
//     were last doing ("ranks 0,1,3 waited 62 s in all_gather #4121 (unit
//     17); rank 2 never entered it: its last collective was reduce_scatter
//     #4120 (unit 16), ended 63 s ago"); a dead rank is said to have died;
//     when no rank is missing the collective itself is stuck;
//   * no rank inside a collective: the stall is outside them, with each
//     rank's last collective.
// "" when no rank has reported a collective (nothing to say).
//
// Thread-compatible: plain data in, a string out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardd {

// One collective of a rank's recorder, on the coordinator's clock.
struct CollectiveSeen {
  std::string group;       // "shard0"
  int group_size = 0;
  int64_t seq = 0;         // the call's number in its group (equal on every rank of it)
  std::string op;          // all_gather | reduce_scatter | all_reduce | broadcast | barrier
  int unit = -1;           // -1: none
  int64_t bytes = 0;
  int64_t start_ms = 0;
  int64_t end_ms = -1;     // -1: in flight when last heard
  bool failed = false;     // ended with an error
  bool in_flight() const { return end_ms < 0; }
};

struct RankFlight {
  int rank = 0;
  bool dead = false;       // exited, or silent past its heartbeat deadline
  std::string dead_how;    // what it did, after "it ": "was killed by signal 9"; "" = "died"
  int64_t heard_ms = 0;    // when `collectives` arrived (0: never)
  std::vector<CollectiveSeen> collectives;
};

enum class StallTrigger { kCollectiveTimeout, kHang, kRankDied };
// "collective_timeout", "hang", "rank_died".
const char* StallTriggerName(StallTrigger t);

struct StallInput {
  StallTrigger trigger = StallTrigger::kHang;
  std::vector<RankFlight> ranks;  // every rank of the attempt, in rank order
  int64_t now_ms = 0;
};

std::string DiagnoseStall(const StallInput& in);

// The live ranks the stuck collective's waiters wait for (they never entered
// it), as DiagnoseStall names them; empty for a desync, a stall outside
// collectives, a collective stuck with no rank missing, or only dead ranks
// missing. The hang watchdog blames these rather than whichever rank it
// checked first (every rank of a stuck group stops making progress).
std::vector<int> StalledRanks(const StallInput& in);

// "0,1,3", "0-5,7": ranks in ascending order, runs of three or more as ranges.
std::string RankList(std::vector<int> ranks);

// One line for a rank's newest collective in status ("in all_gather #41
// (unit 3) for 2.1 s", "all_reduce #40 ended 0.3 s ago"); "" for none.
std::string DescribeLatest(const std::vector<CollectiveSeen>& collectives, int64_t now_ms);

}  // namespace shardd
