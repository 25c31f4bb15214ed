#include "coordinator/jobs/stall_explainer.h"

#include "shard/common/logging.h"

namespace shardd {

bool IsCollectiveTimeout(const std::string& error) { return error.find("DEADLINE_EXCEEDED") != std::string::npos; }

namespace {

// A worker's error, as much as one sentence of a stall account holds.
std::string Bounded(const std::string& error) {
  constexpr size_t kMax = 240;
  return error.size() <= kMax ? error : error.substr(0, kMax) + "…";
}

StallInput InputOf(const Job& j, StallTrigger trigger, int64_t now_ms, int dead_rank, const std::string& dead_how) {
  StallInput in;
  in.trigger = trigger;
  in.now_ms = now_ms;
  for (size_t r = 0; r < j.ranks.size(); ++r) {
    const JobRank& rk = j.ranks[r];
    RankFlight f;
    f.rank = static_cast<int>(r);
    // A rank that failed by itself (its report is not a collective's
    // timeout: a full disk, a bad file) is a cause its peers wait on, named
    // with its error; one that reported a timeout is one of the waiters.
    const bool failed_itself = !rk.error.empty() && !IsCollectiveTimeout(rk.error);
    f.dead = static_cast<int>(r) == dead_rank || (rk.exited && !rk.done && rk.error.empty()) || failed_itself;
    const std::string error = failed_itself ? Bounded(rk.error) : "";
    if (static_cast<int>(r) == dead_rank)
      f.dead_how = dead_how + (error.empty() ? "" : " after reporting: " + error);
    else if (failed_itself)
      f.dead_how = "failed: " + error;
    f.heard_ms = rk.last_heartbeat_ms;
    f.collectives = rk.collectives;
    in.ranks.push_back(std::move(f));
  }
  return in;
}

}  // namespace

void ExplainStall(JobTable* table, Job& j, StallTrigger trigger, int64_t now_ms, int dead_rank,
                  const std::string& dead_how) {
  if (j.ranks.size() < 2 || (j.health.stall.attempt() == j.attempt && !j.health.stall.text().empty())) return;
  const std::string text = DiagnoseStall(InputOf(j, trigger, now_ms, dead_rank, dead_how));
  if (text.empty()) return;
  j.health.stall.set_text(text);
  j.health.stall.set_attempt(j.attempt);
  j.health.stall.set_unix_ms(now_ms);
  j.health.stall.set_trigger(StallTriggerName(trigger));
  table->Emit(j, "stall_cause", text);
}

std::vector<int> StalledRanksOf(const Job& j, int64_t now_ms) {
  if (j.ranks.size() < 2) return {};
  return StalledRanks(InputOf(j, StallTrigger::kHang, now_ms, -1, ""));
}

}  // namespace shardd
