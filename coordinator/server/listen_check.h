// Listeners never share a port. gRPC and cpp-httplib both set SO_REUSEPORT on
// Linux by default, which lets a second daemon bind a port the first one
// serves and the kernel split the clients between them (issue 28 item 1);
// both servers turn it off, and a taken port is refused up front with one
// line that says so (gRPC's own bind failure prints several lines of its
// log first).
#pragma once

#include <string>

#include "shard/common/status.h"

namespace shardd {

// Splits "host:port" or "[v6]:port". INVALID_ARGUMENT naming `flag` when there
// is no port or it is not a number in 0..65535.
shard::Status ParseHostPort(const std::string& address, const std::string& flag, std::string* host, int* port);

// OK when `address` (host:port) can be bound now (port 0 always can; unix:
// addresses are not checked). UNAVAILABLE "cannot listen on ADDR<what>: port
// taken (...)" when another socket holds the port, or the bind's own error.
// `what` follows the address in the message (" for HTTP"), `flag` names the
// flag that chooses it.
shard::Status CheckPortFree(const std::string& address, const std::string& what, const std::string& flag);

}  // namespace shardd
