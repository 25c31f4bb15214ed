#include "shard/ckpt/partner_map.h"

#include <algorithm>
#include <map>

namespace shard {
namespace {

struct Ring {
  std::vector<std::string> hosts;                // by lowest rank
  std::map<std::string, std::vector<int>> ranks;  // per host, by rank
  std::map<std::string, int> index;              // host -> place in hosts
};

Ring MakeRing(const std::vector<std::string>& host_of_rank) {
  Ring ring;
  for (int r = 0; r < static_cast<int>(host_of_rank.size()); ++r) {
    const std::string& h = host_of_rank[r];
    if (!ring.index.count(h)) {
      ring.index[h] = static_cast<int>(ring.hosts.size());
      ring.hosts.push_back(h);
    }
    ring.ranks[h].push_back(r);
  }
  return ring;
}

}  // namespace

std::vector<int> PartnerRanks(const std::vector<std::string>& host_of_rank) {
  std::vector<int> partner(host_of_rank.size(), -1);
  const Ring ring = MakeRing(host_of_rank);
  const int hosts = static_cast<int>(ring.hosts.size());
  if (hosts < 2) return partner;
  for (int h = 0; h < hosts; ++h) {
    const std::vector<int>& mine = ring.ranks.at(ring.hosts[h]);
    const std::vector<int>& next = ring.ranks.at(ring.hosts[(h + 1) % hosts]);
    for (size_t i = 0; i < mine.size(); ++i) partner[mine[i]] = next[i % next.size()];
  }
  return partner;
}

std::vector<int> HostsToAsk(const std::vector<std::string>& host_of_rank, int me) {
  std::vector<int> out;
  if (me < 0 || me >= static_cast<int>(host_of_rank.size())) return out;
  const Ring ring = MakeRing(host_of_rank);
  const int hosts = static_cast<int>(ring.hosts.size());
  const int h = ring.index.at(host_of_rank[me]);
  const int partner = PartnerRanks(host_of_rank)[me];
  if (partner >= 0) out.push_back(partner);
  for (int k = 1; k < hosts; ++k) {
    const std::vector<int>& there = ring.ranks.at(ring.hosts[(h + k) % hosts]);
    const int local = static_cast<int>(
        std::find(ring.ranks.at(host_of_rank[me]).begin(), ring.ranks.at(host_of_rank[me]).end(), me) -
        ring.ranks.at(host_of_rank[me]).begin());
    const int ask = there[local % there.size()];
    if (ask != partner) out.push_back(ask);
  }
  return out;
}

std::string MemoryHostFolder(const std::string& host) {
  std::string out = "host-";
  for (char c : host) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    out += ok ? c : '_';
  }
  if (host.empty() || host == "." || host == "..") out += "_";
  return out;
}

}  // namespace shard
