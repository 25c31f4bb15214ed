// shardctl --coordinator: a malformed HOST:PORT is a usage error naming the
// flag (127.0.0.1:99999 was taken for "no coordinator" and showed an offline
// view), while names, IPv4, [IPv6] and gRPC target URIs pass.
#include <gtest/gtest.h>

#include "coordinator/ctl/coordinator_address.h"

namespace shardctl {
namespace {

TEST(CoordinatorAddressTest, MalformedAddressesAreUsageErrors) {
  for (auto [address, part] : std::vector<std::pair<std::string, std::string>>{
           {"127.0.0.1:99999", "port 99999 is outside 1..65535"},
           {"127.0.0.1:0", "port 0 is outside 1..65535"},
           {"127.0.0.1", "expected HOST:PORT"},
           {"127.0.0.1:", "the port '' is not a number"},
           {"127.0.0.1:70x", "the port '70x' is not a number"},
           {"127.0.0.1:-1", "the port '-1' is not a number"},
           {":7070", "no host before the port"},
           {"::1:7070", "an IPv6 address goes in brackets"},
           {"host:123456", "the port '123456' is not a number from 1 to 65535"}}) {
    shard::Status st = CheckCoordinatorAddress(address);
    EXPECT_EQ(st.code(), shard::StatusCode::kInvalidArgument) << address;
    EXPECT_NE(st.message().find("--coordinator '" + address + "': " + part), std::string::npos) << st.ToString();
  }
  for (const char* ok : {"127.0.0.1:7070", "localhost:1", "shardd.ns.svc:65535", "[::1]:7070", "dns:///shardd:7070",
                         "unix:/tmp/shardd.sock"})
    EXPECT_TRUE(CheckCoordinatorAddress(ok).ok()) << ok;
}

}  // namespace
}  // namespace shardctl
