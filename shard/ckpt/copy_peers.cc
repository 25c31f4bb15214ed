#include "shard/ckpt/copy_peers.h"

#include <cstring>

#include "shard/common/net_peer.h"

namespace shard {

std::string CopyPeerOf(const sockaddr_storage& addr) { return PeerOfSockaddr(addr); }

std::map<uint64_t, CopyConnections::Conn>::iterator CopyConnections::OldestUnkeyed(const std::string& peer) {
  for (auto it = conns_.begin(); it != conns_.end(); ++it)
    if (!it->second.keyed && (peer.empty() || it->second.peer == peer)) return it;
  return conns_.end();
}

void CopyConnections::Forget(std::map<uint64_t, Conn>::iterator it) {
  if (it->second.keyed) {
    --keyed_;
  } else {
    --unkeyed_;
    if (--unkeyed_per_peer_[it->second.peer] == 0) unkeyed_per_peer_.erase(it->second.peer);
  }
  conns_.erase(it);
}

CopyConnections::Admission CopyConnections::Admit(const std::string& peer, int fd) {
  Admission a;
  auto victim = conns_.end();
  if (auto it = unkeyed_per_peer_.find(peer); it != unkeyed_per_peer_.end() && it->second >= max_per_peer_) {
    victim = OldestUnkeyed(peer);
  } else if (unkeyed_ >= max_total_) {
    victim = OldestUnkeyed("");
  }
  if (victim != conns_.end()) {
    a.evict_fd = victim->second.fd;
    Forget(victim);
    ++evicted_;
  }
  a.id = next_id_++;
  conns_[a.id] = Conn{peer, fd, false};
  ++unkeyed_;
  ++unkeyed_per_peer_[peer];
  return a;
}

bool CopyConnections::MarkKeyed(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end() || keyed_ >= max_keyed_) return false;
  if (it->second.keyed) return true;
  --unkeyed_;
  if (--unkeyed_per_peer_[it->second.peer] == 0) unkeyed_per_peer_.erase(it->second.peer);
  it->second.keyed = true;
  ++keyed_;
  return true;
}

void CopyConnections::Release(uint64_t id) {
  if (auto it = conns_.find(id); it != conns_.end()) Forget(it);  // an evicted one is already forgotten
}

}  // namespace shard
