// Elastic restarts, the coordinator's side (elastic_resize.h).
#include "coordinator/jobs/elastic_resize.h"

#include <algorithm>
#include <set>

#include "coordinator/jobs/elastic_rules.h"
#include "coordinator/jobs/job_manager_internal.h"
#include "shard/spec/elastic_world.h"

namespace shardd::elastic {
namespace {

using internal::Fmt;

// A rank whose worker joined this attempt is coming even before it
// registers (starting up takes a while on a busy host): not a lost host.
bool Present(const JobRank& r) { return r.registered || r.joined_ms > 0; }

int CountPresent(const Job& j) { return static_cast<int>(std::count_if(j.ranks.begin(), j.ranks.end(), Present)); }

std::string JoinList(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::string DescribeShrink(const Job& j, int to, double waited_s) {
  const int full = j.config.parallel.world_size, now = static_cast<int>(j.ranks.size());
  std::vector<std::string> missing;
  std::set<std::string> lost_hosts, live_hosts;
  for (int r = 0; r < now; ++r) {
    if (Present(j.ranks[r])) {
      live_hosts.insert(j.ranks[r].hostname);
      continue;
    }
    missing.push_back(std::to_string(r));
    if (r < static_cast<int>(j.elastic.last_hosts.size()) && !j.elastic.last_hosts[r].empty()) lost_hosts.insert(j.elastic.last_hosts[r]);
  }
  std::vector<std::string> lost;
  for (const std::string& h : lost_hosts)
    if (!live_hosts.count(h)) lost.push_back(h);
  const std::string ranks = (missing.size() == 1 ? "rank " : "ranks ") + JoinList(missing) + " did not join within " +
                            Fmt(waited_s, "%.0f") + " s";
  const std::string cause =
      lost.empty() ? ranks : (lost.size() == 1 ? "host " : "hosts ") + JoinList(lost) + " lost (" + ranks + ")";
  return "continuing on " + std::to_string(to) + " of " + std::to_string(full) + " ranks: " + cause + "; " +
         MicroBatchChange(j, now, to);
}

bool MaybeShrink(Job& j, int64_t now, JobTable* table, AttemptLifecycle* attempts) {
  // Restarts only: a job's first attempt waits for all its ranks (a slow
  // start is not a lost host; the registration deadline judges it).
  if (!IsExternal(j) || !shard::ElasticEnabled(j.config) || j.state != v1::LAUNCHING || j.attempt < 2) return false;
  const int have = CountPresent(j), world = static_cast<int>(j.ranks.size());
  if (have == 0 || have >= world) return false;
  // Join set every rank's launched_ms at the attempt's first join.
  int64_t first = now;
  for (const JobRank& r : j.ranks) first = std::min(first, r.launched_ms);
  const double waited_s = (now - first) / 1000.0;
  if (waited_s < j.config.restart.elastic_wait_s) return false;
  const shard::ElasticDecision d = DecideFitWorld(j, have);
  if (d.world == 0 || d.world >= world)
    return RefuseShrinkOnce(
        j, d.world == 0 ? d.refusal : "the " + std::to_string(have) + " joined rank(s) allow no smaller world", world,
        table);
  attempts->Resize(j, d.world, "elastic_shrink", DescribeShrink(j, d.world, waited_s));
  return true;
}

bool MaybeGrow(Job& j, int64_t step, int64_t now, AttemptLifecycle* attempts) {
  const int full = j.config.parallel.world_size, world = static_cast<int>(j.ranks.size());
  if (!IsExternal(j) || world >= full || !IsActive(j)) return false;
  int standing = 0;
  for (auto it = j.elastic.standby.begin(); it != j.elastic.standby.end();) {
    if (now - it->second > kStandbyFreshMs) {
      it = j.elastic.standby.erase(it);
    } else {
      ++standing;
      ++it;
    }
  }
  if (standing == 0 || step >= j.config.train.steps) return false;  // the last step: finishing beats regrowing
  const shard::ElasticDecision d = shard::DecideElasticWorld(j.config, world + standing);
  if (d.world <= world) return false;
  attempts->Resize(j, d.world, "elastic_grow",
                   "growing back to " + std::to_string(d.world) + " of " + std::to_string(full) + " ranks after step " +
                       std::to_string(step) + ": " + std::to_string(standing) + " worker(s) stand by; " +
                       MicroBatchChange(j, world, d.world));
  return true;
}

StatusOr<int> RankForJoin(Job& j, int rank, const std::string& host, int64_t now) {
  const int world = static_cast<int>(j.ranks.size());
  // A full-size attempt: every worker takes the rank it asked for (a second
  // worker for a taken rank is told so by the caller, never given another).
  if (world >= j.config.parallel.world_size) return rank;
  auto claimed = [&](const JobRank& r) { return r.claimed_ms > 0 && now - r.claimed_ms < kClaimHoldMs; };
  auto taken = [&](const JobRank& r) { return (r.registered && !r.exited) || claimed(r); };
  const std::string key = host + "/" + std::to_string(rank);
  if (rank < world && !taken(j.ranks[rank])) {
    j.elastic.standby.erase(key);
    return rank;
  }
  // For elastic_wait_s after the attempt begins its ranks are kept for the
  // workers that ask for them by number (the surviving host's, usually), so
  // ranks move only when their own workers do not come.
  const bool reserved = now < j.attempt_began_ms + static_cast<int64_t>(j.config.restart.elastic_wait_s * 1000);
  for (int r = 0; r < world && !reserved; ++r) {
    JobRank& cand = j.ranks[r];
    if (taken(cand)) continue;
    // Held for this worker's Register, so a second join meanwhile (or the
    // rank's own worker, asking for it by number) takes another.
    cand.claimed_ms = now;
    j.elastic.standby.erase(key);
    return r;
  }
  j.elastic.standby[key] = now;
  return shard::Unavailable("job " + j.id + " runs on " + std::to_string(world) + " of " +
                            std::to_string(j.config.parallel.world_size) + " ranks in attempt " +
                            std::to_string(j.attempt) + "; rank " + std::to_string(rank) +
                            " stands by and joins when the job grows back at its next committed checkpoint");
}

void RefuseUnfit(Job& j, int world, const std::string& why, JobTable* table) {
  j.elastic.unfit = std::max(j.elastic.unfit, world);
  j.elastic.next_world = 0;
  table->Emit(j, "elastic_refused",
              "cannot continue on " + std::to_string(world) + " of " + std::to_string(j.config.parallel.world_size) +
                  " ranks: " + why + "; the next attempt waits for all " +
                  std::to_string(j.config.parallel.world_size));
}

}  // namespace shardd::elastic
