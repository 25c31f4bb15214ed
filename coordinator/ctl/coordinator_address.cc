#include "coordinator/ctl/coordinator_address.h"

namespace shardctl {

shard::Status CheckCoordinatorAddress(const std::string& address) {
  for (const char* scheme : {"dns:", "unix:", "unix-abstract:", "ipv4:", "ipv6:", "vsock:"})
    if (address.rfind(scheme, 0) == 0) return shard::OkStatus();
  const std::string what = "--coordinator '" + address + "': ";
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return shard::InvalidArgument(what + "expected HOST:PORT, e.g. 127.0.0.1:7070");
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.empty() || host == "[]") return shard::InvalidArgument(what + "no host before the port");
  if (host.find(':') != std::string::npos && !(host.front() == '[' && host.back() == ']'))
    return shard::InvalidArgument(what + "an IPv6 address goes in brackets: [ADDRESS]:PORT");
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return shard::InvalidArgument(what + "the port '" + port + "' is not a number from 1 to 65535");
  const int p = std::stoi(port);
  if (p < 1 || p > 65535)
    return shard::InvalidArgument(what + "port " + port + " is outside 1..65535");
  return shard::OkStatus();
}

}  // namespace shardctl
