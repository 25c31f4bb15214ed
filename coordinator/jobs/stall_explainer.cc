#include "coordinator/jobs/stall_explainer.h"

#include "shard/common/logging.h"

namespace shardd {

bool IsCollectiveTimeout(const std::string& error) { return error.find("DEADLINE_EXCEEDED") != std::string::npos; }

namespace {

StallInput InputOf(const Job& j, StallTrigger trigger, int64_t now_ms, int dead_rank, const std::string& dead_how) {
  StallInput in;
  in.trigger = trigger;
  in.now_ms = now_ms;
  for (size_t r = 0; r < j.ranks.size(); ++r) {
    const JobRank& rk = j.ranks[r];
    RankFlight f;
    f.rank = static_cast<int>(r);
    f.dead = static_cast<int>(r) == dead_rank || (rk.exited && !rk.done && rk.error.empty());
    if (static_cast<int>(r) == dead_rank) f.dead_how = dead_how;
    f.heard_ms = rk.last_heartbeat_ms;
    f.collectives = rk.collectives;
    in.ranks.push_back(std::move(f));
  }
  return in;
}

}  // namespace

void ExplainStall(JobTable* table, Job& j, StallTrigger trigger, int64_t now_ms, int dead_rank,
                  const std::string& dead_how) {
  if (j.ranks.size() < 2 || (j.stall.attempt() == j.attempt && !j.stall.text().empty())) return;
  const std::string text = DiagnoseStall(InputOf(j, trigger, now_ms, dead_rank, dead_how));
  if (text.empty()) return;
  j.stall.set_text(text);
  j.stall.set_attempt(j.attempt);
  j.stall.set_unix_ms(now_ms);
  j.stall.set_trigger(StallTriggerName(trigger));
  table->Emit(j, "stall_cause", text);
}

std::vector<int> StalledRanksOf(const Job& j, int64_t now_ms) {
  if (j.ranks.size() < 2) return {};
  return StalledRanks(InputOf(j, StallTrigger::kHang, now_ms, -1, ""));
}

}  // namespace shardd
