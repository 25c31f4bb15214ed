// What the elastic restarts (restart.min_world_size) keep of one job:
// elastic_rules.h, elastic_resize.h (external workers) and elastic_launched.h
// (a launcher's capacity) read and change it; nothing else does. Plain data,
// guarded by JobTable's lock like the rest of the Job.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardd {

struct ElasticState {
  int next_world = 0;              // the next attempt's ranks (0 = parallel.world_size)
  std::vector<std::string> last_hosts;  // each rank's host in the previous attempt ("" = never registered)
  int refused_attempt = 0;         // the attempt whose "cannot shrink" was announced
  int unfit = 0;                   // the planner refused this world size (and so every smaller one)
  // External workers beyond a shrunk attempt's ranks, by "host/rank": when
  // each last asked to join. Enough of them grow the job back at its next commit.
  std::map<std::string, int64_t> standby;
  // A launcher's count of the ranks it could place now (Launcher::Capacity,
  // asked off the lock by the control loop; elastic_launched.h): -1 unknown.
  int capacity_ranks = -1;
  int64_t capacity_ms = 0;       // when it was asked
  std::string capacity_error;    // why it could not say, when it could not
};

}  // namespace shardd
