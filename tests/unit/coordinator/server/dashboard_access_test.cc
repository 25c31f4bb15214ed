// The HTTP side's access rules as pure functions (dashboard_access.h): the
// token from every peer unless loopback is trusted by choice, the Host check
// against DNS rebinding, where a login may redirect to, and single-use,
// expiring, bounded login nonces.
#include "coordinator/server/dashboard_access.h"

#include <gtest/gtest.h>

namespace shardd::testing {
namespace {

TEST(HttpAuthTest, EveryPeerNeedsTheTokenUnlessLoopbackIsTrusted) {
  EXPECT_FALSE(HttpAuthorized("127.0.0.1", "", "", "t0k", false));
  EXPECT_FALSE(HttpAuthorized("::1", "", "", "t0k", false));
  EXPECT_FALSE(HttpAuthorized("::ffff:127.0.0.1", "", "", "t0k", false));
  EXPECT_TRUE(HttpAuthorized("127.0.0.1", "", "", "t0k", true));
  EXPECT_TRUE(HttpAuthorized("::1", "", "", "t0k", true));
  EXPECT_FALSE(HttpAuthorized("10.1.2.3", "", "", "t0k", true));
  EXPECT_TRUE(HttpAuthorized("127.0.0.1", "Bearer t0k", "", "t0k", false));
  EXPECT_TRUE(HttpAuthorized("10.1.2.3", "Bearer t0k", "", "t0k", false));
  EXPECT_FALSE(HttpAuthorized("10.1.2.3", "Bearer t0kk", "", "t0k", false));
  EXPECT_FALSE(HttpAuthorized("10.1.2.3", "t0k", "", "t0k", false));
  EXPECT_TRUE(HttpAuthorized("127.0.0.1", "", "a=1; shardd_token=t0k; b=2", "t0k", false));
  EXPECT_FALSE(HttpAuthorized("10.1.2.3", "", "xshardd_token=t0k", "t0k", false));
  EXPECT_FALSE(HttpAuthorized("10.1.2.3", "Bearer ", "shardd_token=", "", false));
}

TEST(HostCheckTest, AddressesLocalhostAndConfiguredNamesOnly) {
  const std::vector<std::string> names = {"shardd.example.org", "proxy.lan:8443"};
  for (const char* ok : {"", "127.0.0.1", "127.0.0.1:7080", "10.0.0.7:9090", "[::1]:7080", "[fe80::1]", "::1",
                         "localhost", "LocalHost:7080", "localhost.", "shardd.example.org", "Shardd.Example.Org:443",
                         "proxy.lan"})
    EXPECT_TRUE(HostAllowed(ok, names)) << ok;
  for (const char* bad : {"evil.example", "evil.example:7080", "127.0.0.1.nip.io", "localhost.evil.example",
                          "example.org", "[", ":7080", "shardd.example.org.evil"})
    EXPECT_FALSE(HostAllowed(bad, names)) << bad;
  EXPECT_EQ(HostHeaderName("[::1]:80"), "::1");
  EXPECT_EQ(HostHeaderName("A.B:1"), "a.b");
}

TEST(LoginRedirectTest, StaysOnThisServer) {
  EXPECT_EQ(SafeNextPath("/#/job/j-1"), "/#/job/j-1");
  EXPECT_EQ(SafeNextPath("/"), "/");
  for (const char* bad : {"", "//evil.example", "/\\evil.example", "http://evil.example", "evil", "/a\r\nSet-Cookie: x",
                          "/a\\b"})
    EXPECT_EQ(SafeNextPath(bad), "/") << bad;
}

TEST(LoginNoncesTest, SingleUseExpiringAndBounded) {
  using namespace std::chrono_literals;
  const auto t0 = LoginNonces::Clock::now();
  LoginNonces n(/*capacity=*/2);
  auto a = n.Issue(60s, t0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size(), 32u);
  EXPECT_TRUE(n.Redeem(*a, t0 + 1s));
  EXPECT_FALSE(n.Redeem(*a, t0 + 2s)) << "redeemed twice";
  auto b = n.Issue(60s, t0);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(n.Redeem(*b, t0 + 61s)) << "redeemed after expiry";
  EXPECT_EQ(n.outstanding(), 0u);
  ASSERT_TRUE(n.Issue(60s, t0).ok());
  ASSERT_TRUE(n.Issue(60s, t0).ok());
  auto full = n.Issue(60s, t0);
  EXPECT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("outstanding"), std::string::npos);
  EXPECT_TRUE(n.Issue(60s, t0 + 61s).ok()) << "expired nonces are not pruned";
  EXPECT_FALSE(n.Issue(0s, t0).ok());
  EXPECT_FALSE(n.Issue(LoginNonces::kMaxTtl + 1s, t0).ok());
  EXPECT_FALSE(n.Redeem("", t0));
  EXPECT_FALSE(n.Redeem("not-issued", t0));
}

}  // namespace
}  // namespace shardd::testing
