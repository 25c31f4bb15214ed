#include "shard/ckpt/copy_peers.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

namespace shard {

std::string CopyPeerOf(const sockaddr_storage& addr) {
  char ip[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) return "loopback";
    ::inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    return ip;
  }
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    const in6_addr& v6 = a->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return "loopback";
    if (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127) return "loopback";
    ::inet_ntop(AF_INET6, &v6, ip, sizeof(ip));
    return ip;
  }
  return "unknown";
}

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
