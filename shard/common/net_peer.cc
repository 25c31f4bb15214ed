#include "shard/common/net_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>

namespace shard {

std::string PeerOfAddress(const std::string& address) {
  std::string a = address;
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  in6_addr v6{};
  if (inet_pton(AF_INET6, a.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return "loopback";
    if (!IN6_IS_ADDR_V4MAPPED(&v6)) return a;
    char v4[INET_ADDRSTRLEN] = "";
    if (!inet_ntop(AF_INET, &v6.s6_addr[12], v4, sizeof v4)) return a;
    a = v4;
  }
  in_addr v4{};
  if (inet_pton(AF_INET, a.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127) return "loopback";
  return a;
}

std::string PeerOfSockaddr(const sockaddr_storage& addr) {
  char ip[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, ip, sizeof(ip));
    return PeerOfAddress(ip);
  }
  if (addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, ip, sizeof(ip));
    return PeerOfAddress(ip);
  }
  return "unknown";
}

}  // namespace shard
