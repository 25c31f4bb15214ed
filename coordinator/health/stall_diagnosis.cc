#include "coordinator/health/stall_diagnosis.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>

namespace shardd {
namespace {

std::string Secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s >= 10 ? "%.0f s" : "%.1f s", std::max(0.0, s));
  return buf;
}

std::string Who(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + RankList(ranks);
}

// "all_gather #4121 (unit 17)", with ", group shard0" when the job has several groups.
std::string What(const CollectiveSeen& c, bool with_group) {
  std::string s = c.op + " #" + std::to_string(c.seq);
  std::string paren;
  if (c.unit >= 0) paren = "unit " + std::to_string(c.unit);
  if (with_group) paren += (paren.empty() ? "group " : ", group ") + c.group;
  return paren.empty() ? s : s + " (" + paren + ")";
}

const CollectiveSeen* NewestIn(const RankFlight& r, const std::string& group) {
  const CollectiveSeen* best = nullptr;
  for (const CollectiveSeen& c : r.collectives)
    if (c.group == group && (!best || c.seq > best->seq)) best = &c;
  return best;
}

const CollectiveSeen* NewestOverall(const RankFlight& r) {
  const CollectiveSeen* best = nullptr;
  for (const CollectiveSeen& c : r.collectives)
    if (!best || c.start_ms > best->start_ms || (c.start_ms == best->start_ms && c.seq > best->seq)) best = &c;
  return best;
}

bool Waiting(const CollectiveSeen& c) { return c.in_flight() || c.failed; }

double WaitedS(const CollectiveSeen& c, int64_t now) {
  return ((c.in_flight() ? now : c.end_ms) - c.start_ms) / 1000.0;
}

std::string Died(const RankFlight& r) { return r.dead_how.empty() ? "it died" : "it " + r.dead_how; }

// What rank r was last doing, as far as its recorder said.
std::string LastDoing(const RankFlight& r, bool with_group, int64_t now) {
  const CollectiveSeen* c = NewestOverall(r);
  if (!c) return "it has run no collective yet";
  if (c->in_flight())
    return std::string(r.dead ? "it was inside " : "it is inside ") + What(*c, with_group) + ", entered " +
           Secs((now - c->start_ms) / 1000.0) + " ago";
  return "its last collective was " + What(*c, with_group) + (c->failed ? ", failed " : ", ended ") +
         Secs((now - c->end_ms) / 1000.0) + " ago";
}

// The first call number two ranks disagree on, said; "" when none.
std::string Desync(const StallInput& in, bool with_group) {
  std::map<std::pair<std::string, int64_t>, std::vector<std::pair<int, const CollectiveSeen*>>> calls;
  for (const RankFlight& r : in.ranks)
    for (const CollectiveSeen& c : r.collectives) calls[{c.group, c.seq}].push_back({r.rank, &c});
  const std::pair<std::string, int64_t>* first = nullptr;
  std::map<std::string, std::vector<int>> first_by_sig;
  for (const auto& [key, seen] : calls) {
    std::map<std::string, std::vector<int>> by_sig;
    for (const auto& [rank, c] : seen) {
      std::string sig = c->op + " (";
      if (c->unit >= 0) sig += "unit " + std::to_string(c->unit) + ", ";
      sig += std::to_string(c->bytes) + " B)";
      auto& ranks = by_sig[sig];
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
    }
    if (by_sig.size() < 2 || (first && first->second <= key.second)) continue;
    first = &key;
    first_by_sig = std::move(by_sig);
  }
  if (!first) return "";
  std::vector<std::pair<std::vector<int>, std::string>> sides;
  for (auto& [sig, ranks] : first_by_sig) {
    std::sort(ranks.begin(), ranks.end());
    sides.push_back({ranks, sig});
  }
  std::sort(sides.begin(), sides.end());
  std::string s = "ranks disagree on collective #" + std::to_string(first->second) +
                  (with_group ? " of group " + first->first : "") + ": ";
  for (size_t i = 0; i < sides.size(); ++i)
    s += (i ? ", " : "") + Who(sides[i].first) + " called " + sides[i].second;
  return s + "; their code paths diverged (a desync)";
}

struct Stuck {
  std::string group;
  int64_t seq = 0;
  int64_t oldest_start = 0;
};

// The group whose live waiters have waited longest, and its newest call they wait in.
bool FindStuck(const StallInput& in, const std::set<std::string>& groups, Stuck* out) {
  bool found = false;
  for (const std::string& g : groups) {
    int64_t seq = 0;
    for (const RankFlight& r : in.ranks)
      if (const CollectiveSeen* c = NewestIn(r, g); c && !r.dead && Waiting(*c)) seq = std::max(seq, c->seq);
    if (seq == 0) continue;
    int64_t oldest = INT64_MAX;
    for (const RankFlight& r : in.ranks)
      if (const CollectiveSeen* c = NewestIn(r, g); c && !r.dead && c->seq == seq && Waiting(*c))
        oldest = std::min(oldest, c->start_ms);
    if (!found || oldest < out->oldest_start) *out = {g, seq, oldest};
    found = true;
  }
  return found;
}

// Who stands where around a stuck call: inside it (waiters), died inside
// it, or short of it (missing: they never entered it).
struct StuckParts {
  // gone: dead ranks of the group past the call (their record, last heard,
  // shows it finished or never reached): its peers wait on a rank that left.
  std::vector<int> waiters, died_inside, missing, gone;
  const CollectiveSeen* call = nullptr;
  double waited = 0;
  bool all_failed = true;
};

StuckParts ClassifyStuck(const StallInput& in, const Stuck& st) {
  StuckParts p;
  std::set<int> members;
  int size = 0;
  for (const RankFlight& r : in.ranks) {
    const CollectiveSeen* c = NewestIn(r, st.group);
    if (!c) continue;
    members.insert(r.rank);
    size = std::max(size, c->group_size);
    if (c->seq == st.seq && Waiting(*c) && !r.dead) {
      p.waiters.push_back(r.rank);
      p.waited = std::max(p.waited, WaitedS(*c, in.now_ms));
      p.all_failed = p.all_failed && c->failed;
      if (!p.call) p.call = c;
    } else if (c->seq == st.seq && c->in_flight()) {
      p.died_inside.push_back(r.rank);
    } else if (c->seq < st.seq) {
      p.missing.push_back(r.rank);
    } else if (r.dead) {
      p.gone.push_back(r.rank);
    }
  }
  // A rank that never ran a collective at all belongs to the group when
  // the group is short of members.
  for (const RankFlight& r : in.ranks)
    if (r.collectives.empty() && static_cast<int>(members.size()) < size) p.missing.push_back(r.rank);
  std::sort(p.missing.begin(), p.missing.end());
  return p;
}

std::string StuckSentence(const StallInput& in, const Stuck& st, bool with_group) {
  const StuckParts p = ClassifyStuck(in, st);
  const std::vector<int>& missing = p.missing;
  std::string s = Who(p.waiters) + " waited " + Secs(p.waited) + " in " + What(*p.call, with_group) +
                  (p.all_failed ? " until it failed" : "");
  auto flight = [&](int rank) -> const RankFlight& {
    return *std::find_if(in.ranks.begin(), in.ranks.end(), [&](const RankFlight& x) { return x.rank == rank; });
  };
  // Dead ranks are named with what they did (their exit, their error).
  auto deaths = [&](const std::vector<int>& ranks, const std::string& where) {
    std::string t = "; " + Who(ranks) + " " + where, hows;
    for (int r : ranks)
      if (const RankFlight& f = flight(r); !f.dead_how.empty())
        hows += (hows.empty() ? "" : "; ") + (ranks.size() > 1 ? "rank " + std::to_string(r) + ": " : "") + Died(f);
    if (hows.empty()) return t;
    return ranks.size() == 1 ? t + ": " + hows : t + " (" + hows + ")";
  };
  if (!p.died_inside.empty()) s += deaths(p.died_inside, "died inside it");
  if (missing.empty()) {
    if (!p.gone.empty()) s += deaths(p.gone, "is gone from the group");
    else if (p.died_inside.empty())
      s += "; no rank of the group is missing: the collective itself is stuck (the network or the backend)";
    return s;
  }
  auto detail = [&](int rank) {
    const RankFlight& r = flight(rank);
    return (r.dead ? Died(r) + "; " : std::string()) + LastDoing(r, with_group, in.now_ms);
  };
  if (missing.size() == 1)
    return s + "; rank " + std::to_string(missing[0]) + " never entered it: " + detail(missing[0]);
  s += "; " + Who(missing) + " never entered it (";
  constexpr size_t kNamed = 4;
  for (size_t i = 0; i < missing.size() && i < kNamed; ++i)
    s += (i ? "; rank " : "rank ") + std::to_string(missing[i]) + ": " + detail(missing[i]);
  if (missing.size() > kNamed) s += "; and " + std::to_string(missing.size() - kNamed) + " more";
  return s + ")";
}

// Nobody is inside a collective: each group of ranks by the call they last finished.
std::string OutsideSentence(const StallInput& in, bool with_group) {
  std::map<std::pair<std::string, int64_t>, std::vector<int>> by_last;
  std::map<std::pair<std::string, int64_t>, const CollectiveSeen*> call;
  std::vector<int> none, dead;
  for (const RankFlight& r : in.ranks) {
    if (r.dead) dead.push_back(r.rank);
    const CollectiveSeen* c = NewestOverall(r);
    if (!c) {
      none.push_back(r.rank);
      continue;
    }
    by_last[{c->group, c->seq}].push_back(r.rank);
    auto& kept = call[{c->group, c->seq}];
    if (!kept || c->end_ms > kept->end_ms) kept = c;  // the latest end: "ended N s ago" for the group
  }
  std::string s = "no rank is inside a collective, so the stall is outside them (data, checkpoint I/O or compute)";
  if (!dead.empty()) s += "; " + Who(dead) + " died";
  std::vector<std::pair<int64_t, std::pair<std::string, int64_t>>> order;  // newest call first
  for (const auto& [key, c] : call) order.push_back({-c->seq, key});
  std::sort(order.begin(), order.end());
  for (const auto& [neg, key] : order) {
    const CollectiveSeen* c = call[key];
    s += "; " + Who(by_last[key]) + " last finished " + What(*c, with_group) + ", " +
         Secs((in.now_ms - c->end_ms) / 1000.0) + " ago";
  }
  if (!none.empty()) s += "; " + Who(none) + " ran no collective yet";
  return s;
}

}  // namespace

const char* StallTriggerName(StallTrigger t) {
  switch (t) {
    case StallTrigger::kCollectiveTimeout: return "collective_timeout";
    case StallTrigger::kHang: return "hang";
    case StallTrigger::kRankDied: return "rank_died";
  }
  return "stall";
}

std::string RankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ",";
    if (j - i >= 2) {
      s += std::to_string(ranks[i]);
      s += '-';
      s += std::to_string(ranks[j]);
    } else {
      for (size_t k = i; k <= j; ++k) {
        if (k > i) s += ',';
        s += std::to_string(ranks[k]);
      }
    }
    i = j + 1;
  }
  return s;
}

std::string DescribeLatest(const std::vector<CollectiveSeen>& collectives, int64_t now_ms) {
  RankFlight r;
  r.collectives = collectives;
  const CollectiveSeen* c = NewestOverall(r);
  if (!c) return "";
  if (c->in_flight()) return "in " + What(*c, false) + " for " + Secs((now_ms - c->start_ms) / 1000.0);
  return What(*c, false) + (c->failed ? " failed " : " ended ") + Secs((now_ms - c->end_ms) / 1000.0) + " ago";
}

std::vector<int> StalledRanks(const StallInput& in) {
  std::set<std::string> groups;
  for (const RankFlight& r : in.ranks)
    for (const CollectiveSeen& c : r.collectives) groups.insert(c.group);
  Stuck st;
  if (groups.empty() || !Desync(in, groups.size() > 1).empty() || !FindStuck(in, groups, &st)) return {};
  std::vector<int> live;
  for (int rank : ClassifyStuck(in, st).missing) {
    auto r = std::find_if(in.ranks.begin(), in.ranks.end(), [&](const RankFlight& x) { return x.rank == rank; });
    if (r != in.ranks.end() && !r->dead) live.push_back(rank);
  }
  return live;
}

std::string DiagnoseStall(const StallInput& in) {
  std::set<std::string> groups;
  for (const RankFlight& r : in.ranks)
    for (const CollectiveSeen& c : r.collectives) groups.insert(c.group);
  if (groups.empty()) return "";
  const bool with_group = groups.size() > 1;
  if (std::string d = Desync(in, with_group); !d.empty()) return d;
  Stuck st;
  if (FindStuck(in, groups, &st)) return StuckSentence(in, st, with_group);
  return OutsideSentence(in, with_group);
}

}  // namespace shardd
