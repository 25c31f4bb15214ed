// The daemon's TLS flags together: mutual TLS only with a certificate for
// the workers, a client CA only over TLS, each certificate with its key. The
// files themselves: tests/unit/proto/rpc/tls_files_test.cc.
#include <gtest/gtest.h>

#include "coordinator/daemon/coordinator.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

CoordinatorOptions Tls(const std::string& client_ca, const std::string& worker_cert, const std::string& worker_key) {
  CoordinatorOptions o;
  o.server.tls_cert = "server.pem";
  o.server.tls_key = "server.key";
  o.server.tls_client_ca = client_ca;
  o.worker_tls_cert = worker_cert;
  o.worker_tls_key = worker_key;
  return o;
}

TEST(CheckTlsOptionsTest, MutualTlsNeedsACertificateForTheWorkers) {
  EXPECT_TRUE(CheckTlsOptions(CoordinatorOptions()).ok()) << "plaintext";
  EXPECT_TRUE(CheckTlsOptions(Tls("", "", "")).ok()) << "server TLS";
  EXPECT_TRUE(CheckTlsOptions(Tls("ca.pem", "w.pem", "w.key")).ok()) << "mutual TLS";
  EXPECT_TRUE(CheckTlsOptions(Tls("", "w.pem", "w.key")).ok()) << "workers may present one the server ignores";

  auto no_worker_cert = CheckTlsOptions(Tls("ca.pem", "", ""));
  EXPECT_EQ(no_worker_cert.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(no_worker_cert.message(), "--tls-client-ca needs --worker-tls-cert/--worker-tls-key"))
      << no_worker_cert.ToString();

  auto half = CheckTlsOptions(Tls("ca.pem", "w.pem", ""));
  EXPECT_TRUE(Contains(half.message(), "--worker-tls-cert without --worker-tls-key")) << half.ToString();

  CoordinatorOptions server_half = Tls("", "", "");
  server_half.server.tls_key.clear();
  EXPECT_TRUE(Contains(CheckTlsOptions(server_half).message(), "--tls-cert without --tls-key"));

  CoordinatorOptions plain_with_ca;
  plain_with_ca.server.tls_client_ca = "ca.pem";
  plain_with_ca.worker_tls_cert = "w.pem";
  plain_with_ca.worker_tls_key = "w.key";
  auto no_tls = CheckTlsOptions(plain_with_ca);
  EXPECT_EQ(no_tls.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(no_tls.message(), "--tls-client-ca needs --tls-cert/--tls-key")) << no_tls.ToString();

  CoordinatorOptions plain_worker_cert;
  plain_worker_cert.worker_tls_cert = "w.pem";
  plain_worker_cert.worker_tls_key = "w.key";
  EXPECT_FALSE(CheckTlsOptions(plain_worker_cert).ok()) << "a client certificate over plaintext";
}

}  // namespace
}  // namespace shardd::testing
