#include "coordinator/server/connection_table.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "shard/common/net_peer.h"

namespace shardd {

std::string PeerKey(const std::string& address) { return shard::PeerOfAddress(address); }

int ConnectionTable::OldestInHeaders(const std::string& peer, const HeadersArrived& arrived) {
  std::vector<std::pair<uint64_t, int>> candidates;  // (since, id)
  for (const auto& [id, c] : conns_)
    if (!c.evicted && c.in_headers && (peer.empty() || c.peer == peer)) candidates.emplace_back(c.since, id);
  std::sort(candidates.begin(), candidates.end());
  for (const auto& [since, id] : candidates) {
    if (!arrived || !arrived(id)) return id;
    conns_.at(id).in_headers = false;  // a prompt client whose request waits to be read
  }
  return -1;
}

void ConnectionTable::Evict(int id) {
  Conn& c = conns_.at(id);
  c.evicted = true;
  --counted_;
  if (--per_peer_count_[c.peer] <= 0) per_peer_count_.erase(c.peer);
}

ConnectionTable::Admission ConnectionTable::Admit(int id, const std::string& peer, const HeadersArrived& arrived) {
  Admission a;
  if (count(peer) >= per_peer_) {
    a.evicted = OldestInHeaders(peer, arrived);
    if (a.evicted < 0) {
      a.reason = "more than " + std::to_string(per_peer_) + " connections from " + peer +
                 ", every one of them past its request headers";
      return a;
    }
    a.reason = "peer " + peer + " at its cap of " + std::to_string(per_peer_) + " connections";
  } else if (counted_ >= max_) {
    a.evicted = OldestInHeaders("", arrived);
    if (a.evicted < 0) {
      a.reason = "the server holds " + std::to_string(max_) + " connections, every one past its request headers";
      return a;
    }
    a.reason = "the server at its cap of " + std::to_string(max_) + " connections";
  }
  if (a.evicted >= 0) Evict(a.evicted);
  if (conns_.count(id)) Release(id);  // an fd number the owner closed without Release (never expected)
  conns_[id] = Conn{peer, true, false, next_since_++};
  ++counted_;
  ++per_peer_count_[peer];
  a.admitted = true;
  return a;
}

void ConnectionTable::Serving(int id) {
  auto it = conns_.find(id);
  if (it != conns_.end()) it->second.in_headers = false;
}

void ConnectionTable::AwaitingRequest(int id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  it->second.in_headers = true;
  it->second.since = next_since_++;
}

void ConnectionTable::Release(int id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (!it->second.evicted) Evict(id);
  conns_.erase(id);
}

bool ConnectionTable::evicted(int id) const {
  auto it = conns_.find(id);
  return it != conns_.end() && it->second.evicted;
}

int ConnectionTable::count(const std::string& peer) const {
  auto it = per_peer_count_.find(peer);
  return it == per_peer_count_.end() ? 0 : it->second;
}

}  // namespace shardd
