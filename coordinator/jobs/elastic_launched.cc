// Elastic restarts of launcher-managed jobs (elastic_launched.h).
#include "coordinator/jobs/elastic_launched.h"

#include <algorithm>

#include "coordinator/jobs/elastic_rules.h"
#include "coordinator/jobs/job_manager_internal.h"
#include "coordinator/sched/host_capacity.h"
#include "shard/spec/elastic_world.h"

namespace shardd::elastic {
namespace {

using internal::Fmt;

std::string Placeable(const Job& j) {
  return std::to_string(j.elastic.capacity_ranks) + " of " + std::to_string(j.config.parallel.world_size) +
         " ranks placeable (" + j.launcher->name() + " launcher)";
}

}  // namespace

void NoteCapacity(Job& j, const StatusOr<int>& ranks, int64_t now) {
  j.elastic.capacity_ms = now;
  j.elastic.capacity_ranks = ranks.ok() ? *ranks : -1;
  j.elastic.capacity_error = ranks.ok() ? "" : ranks.status().message();
}

std::string DescribeLaunchedShrink(const Job& j, int to, double waited_s) {
  const int full = j.config.parallel.world_size, now = static_cast<int>(j.ranks.size());
  std::string cause;
  if (!j.queue_reason.empty()) {
    cause = j.queue_reason + " for " + Fmt(waited_s, "%.0f") + " s";
  } else {
    std::string missing;
    int n = 0;
    for (int r = 0; r < now; ++r)
      if (!j.ranks[r].registered) missing += (n++ ? ", " : "") + std::to_string(r);
    cause = (n == 1 ? "rank " : "ranks ") + missing + " did not register within " + Fmt(waited_s, "%.0f") + " s";
  }
  return "continuing on " + std::to_string(to) + " of " + std::to_string(full) + " ranks: " + cause + "; " +
         Placeable(j) + "; " + MicroBatchChange(j, now, to);
}

bool MaybeShrinkLaunched(Job& j, int64_t now, JobTable* table, AttemptLifecycle* attempts) {
  if (!Launched(j) || !ShrinkDue(j, now)) return false;
  // Asked in this Tick (Observe), after the wait: an older count says nothing.
  if (j.elastic.capacity_ms < j.attempt_began_ms + WaitMs(j) || now - j.elastic.capacity_ms > kCapacityFreshMs) return false;
  const int world = static_cast<int>(j.ranks.size());
  auto refuse = [&](const std::string& why) { return RefuseShrinkOnce(j, why, world, table); };
  if (j.elastic.capacity_ranks < 0)
    return refuse("the " + std::string(j.launcher->name()) + " launcher cannot say: " + j.elastic.capacity_error);
  // Room for every rank: the wait is the cluster's queue order or slow
  // workers, not a lack of places; the registration deadline judges it.
  if (j.elastic.capacity_ranks >= world) return false;
  const shard::ElasticDecision d = DecideFitWorld(j, j.elastic.capacity_ranks);
  if (d.world == 0) return refuse(Placeable(j) + ": " + d.refusal);
  if (d.world >= world) return refuse(Placeable(j) + ", no smaller allowed world");
  attempts->Resize(j, d.world, "elastic_shrink",
                   DescribeLaunchedShrink(j, d.world, (now - j.attempt_began_ms) / 1000.0));
  return true;
}

bool WantsCapacityBeforeLaunch(const Job& j) {
  return Launched(j) && j.state == v1::RESTARTING && j.attempt > 0 && j.launcher->SizesRestartsBeforeLaunch();
}

int SizeRestart(Job& j, const StatusOr<int>& ranks, int64_t now, JobTable* table) {
  NoteCapacity(j, ranks, now);
  const int full = j.config.parallel.world_size;
  const int planned = j.elastic.next_world > 0 && j.elastic.next_world < full ? j.elastic.next_world : full;
  auto refuse = [&](const std::string& why) {
    if (j.elastic.refused_attempt != j.attempt) {
      j.elastic.refused_attempt = j.attempt;
      table->Emit(j, "elastic_refused",
                  "cannot size the restart: " + why + "; launching on " + std::to_string(planned) + " rank(s)");
    }
    return planned;
  };
  if (j.elastic.capacity_ranks < 0)
    return refuse("the " + std::string(j.launcher->name()) + " launcher cannot say: " + j.elastic.capacity_error);
  if (j.elastic.capacity_ranks == planned) return planned;
  shard::ElasticDecision d = shard::DecideElasticWorld(j.config, j.elastic.capacity_ranks);
  if (d.world > 0 && d.world < planned) d = DecideFitWorld(j, j.elastic.capacity_ranks);  // a shrink: not to a refused size
  if (d.world == 0) return j.elastic.capacity_ranks < planned ? refuse(Placeable(j) + ": " + d.refusal) : planned;
  if (d.world == planned) return planned;
  const bool grow = d.world > planned;
  table->Emit(j, grow ? "elastic_grow" : "elastic_shrink",
              (grow ? "growing back to " : "continuing on ") + std::to_string(d.world) + " of " +
                  std::to_string(full) + " ranks at the restart: " + Placeable(j) + "; " +
                  MicroBatchChange(j, planned, d.world));
  j.elastic.next_world = d.world < full ? d.world : 0;
  return d.world;
}

bool MaybeGrowLaunched(Job& j, int64_t step, int64_t now, AttemptLifecycle* attempts) {
  const int full = j.config.parallel.world_size, world = static_cast<int>(j.ranks.size());
  if (!Launched(j) || j.state != v1::RUNNING || world >= full) return false;
  if (step >= j.config.train.steps) return false;  // the last step: finishing beats regrowing
  if (j.elastic.capacity_ranks < 0 || now - j.elastic.capacity_ms > kCapacityFreshMs) return false;
  const shard::ElasticDecision d = shard::DecideElasticWorld(j.config, j.elastic.capacity_ranks);
  if (d.world <= world) return false;
  attempts->Resize(j, d.world, "elastic_grow",
                   "growing back to " + std::to_string(d.world) + " of " + std::to_string(full) + " ranks after step " +
                       std::to_string(step) + ": " + Placeable(j) + "; " + MicroBatchChange(j, world, d.world));
  return true;
}

}  // namespace shardd::elastic
