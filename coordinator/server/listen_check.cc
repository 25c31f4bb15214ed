#include "coordinator/server/listen_check.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace shardd {

shard::Status ParseHostPort(const std::string& address, const std::string& flag, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos)
    return shard::InvalidArgument(flag + " " + address + ": expected host:port");
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = address.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos || std::stoi(p) > 65535)
    return shard::InvalidArgument(flag + " " + address + ": the port must be a number in 0..65535");
  *host = h;
  *port = std::stoi(p);
  return shard::OkStatus();
}

shard::Status CheckPortFree(const std::string& address, const std::string& what, const std::string& flag) {
  if (address.rfind("unix:", 0) == 0) return shard::OkStatus();
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(ParseHostPort(address, flag, &host, &port));
  if (port == 0) return shard::OkStatus();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res) != 0)
    return shard::InvalidArgument(flag + " " + address + ": cannot resolve '" + host + "'");
  int bound = 0, in_use = 0, other_errno = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR as the servers set it (a port in TIME_WAIT is free), but
    // never SO_REUSEPORT: a port some socket listens on is taken.
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ++bound;
    } else if (errno == EADDRINUSE) {
      ++in_use;
    } else {
      other_errno = errno;
    }
    ::close(fd);
  }
  freeaddrinfo(res);
  if (in_use > 0)
    return shard::Unavailable("cannot listen on " + address + what +
                              ": port taken (another process, perhaps another shardd, listens there; stop it or "
                              "choose another " + flag + ")");
  if (bound == 0 && other_errno != 0)
    return shard::Unavailable("cannot listen on " + address + what + ": " + std::strerror(other_errno));
  return shard::OkStatus();
}

}  // namespace shardd
