// TLS files (proto/rpc/tls_files.h, shared by every gRPC side): a certificate
// and its key come together, a client certificate only over TLS; PEM files
// are checked for the kind they should hold (a swapped certificate and key is
// caught before any handshake); errors name the flag or variable and the path.
#include "proto/rpc/tls_files.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/unit/scratch_dir_test.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;
using shard::testing::ScratchDirTest;

const char kCert[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const char kKey[] = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";
const char kRsaKey[] = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n";

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class TlsFilesTest : public ScratchDirTest {
 protected:
  static void WriteBytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
};

TEST(CheckCertKeyPairTest, BothOrNeitherAndTheErrorNamesWhatIsMissing) {
  EXPECT_TRUE(CheckCertKeyPair("", "", "--tls-cert", "--tls-key").ok());
  EXPECT_TRUE(CheckCertKeyPair("c.pem", "k.pem", "--tls-cert", "--tls-key").ok());

  auto no_key = CheckCertKeyPair("c.pem", "", "--tls-cert", "--tls-key");
  EXPECT_EQ(no_key.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(no_key.message(), "--tls-cert without --tls-key")) << no_key.ToString();
  auto no_cert = CheckCertKeyPair("", "k.pem", "SHARDD_TLS_CERT", "SHARDD_TLS_KEY");
  EXPECT_EQ(no_cert.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(no_cert.message(), "SHARDD_TLS_KEY without SHARDD_TLS_CERT")) << no_cert.ToString();
}

TEST(CheckPemTest, AcceptsTheKindAskedFor) {
  EXPECT_TRUE(CheckPem(kCert, kPemCertificate, "--tls-cert", "c.pem").ok());
  EXPECT_TRUE(CheckPem(kKey, kPemPrivateKey, "--tls-key", "k.pem").ok());
  EXPECT_TRUE(CheckPem(kRsaKey, kPemPrivateKey, "--tls-key", "k.pem").ok());
  EXPECT_TRUE(CheckPem(std::string("-----BEGIN EC PARAMETERS-----\nBggq\n-----END EC PARAMETERS-----\n") +
                           "-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n",
                       kPemPrivateKey, "--tls-key", "k.pem")
                  .ok())
      << "openssl ecparam writes the parameters first";
  EXPECT_TRUE(CheckPem(std::string(kCert) + kCert, kPemCertificate, "--tls-ca", "bundle.pem").ok());
}

TEST(CheckPemTest, RefusesASwappedCertificateAndKeyAndNonPem) {
  auto swapped = CheckPem(kCert, kPemPrivateKey, "--tls-key", "/etc/shardd/cert.pem");
  EXPECT_EQ(swapped.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(swapped.message(), "--tls-key /etc/shardd/cert.pem: no PEM private key")) << swapped.ToString();
  EXPECT_TRUE(Contains(swapped.message(), "swapped")) << swapped.ToString();

  auto key_as_cert = CheckPem(kKey, kPemCertificate, "--tls-cert", "key.pem");
  EXPECT_EQ(key_as_cert.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(key_as_cert.message(), "--tls-cert key.pem: no PEM certificate")) << key_as_cert.ToString();

  EXPECT_FALSE(CheckPem("", kPemCertificate, "--tls-ca", "empty.pem").ok());
  EXPECT_FALSE(CheckPem(std::string("\x30\x82\x03\x0b", 4), kPemCertificate, "--tls-ca", "ca.der").ok()) << "DER";
  EXPECT_FALSE(CheckPem("-----BEGIN CERTIFICATE REQUEST-----\nMIIC\n-----END CERTIFICATE REQUEST-----\n",
                        kPemCertificate, "--tls-cert", "req.csr")
                   .ok())
      << "a signing request is not a certificate";
  EXPECT_FALSE(CheckPem("-----BEGIN CERTIFICATE", kPemCertificate, "--tls-cert", "cut.pem").ok());
}

TEST(CheckTlsClientFilesTest, ACertificateNeedsItsKeyAndTls) {
  EXPECT_TRUE(CheckTlsClientFiles({}).ok()) << "plaintext";
  EXPECT_TRUE(CheckTlsClientFiles({"ca.pem", "", ""}).ok()) << "server TLS only";
  EXPECT_TRUE(CheckTlsClientFiles({"ca.pem", "c.pem", "k.pem"}).ok()) << "mutual TLS";

  auto half = CheckTlsClientFiles({"ca.pem", "c.pem", ""});
  EXPECT_EQ(half.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(half.message(), "--tls-cert without --tls-key")) << half.ToString();

  auto no_ca = CheckTlsClientFiles({"", "c.pem", "k.pem"});
  EXPECT_EQ(no_ca.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(no_ca.message(), "--tls-cert/--tls-key need --tls-ca")) << no_ca.ToString();
}

TEST_F(TlsFilesTest, ReadsTheTextsOrNamesTheFileItCannotRead) {
  WriteBytes(Path("ca.pem"), kCert);
  WriteBytes(Path("client.pem"), std::string(kCert) + kCert);
  WriteBytes(Path("client.key"), kRsaKey);

  auto plain = ReadTlsClientFiles({});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->has_value());

  auto server_only = ReadTlsClientFiles({Path("ca.pem"), "", ""});
  ASSERT_TRUE(server_only.ok()) << server_only.status().ToString();
  ASSERT_TRUE(server_only->has_value());
  EXPECT_EQ((*server_only)->root_certs, kCert);
  EXPECT_EQ((*server_only)->cert_chain, "");
  EXPECT_EQ((*server_only)->private_key, "");

  auto mutual = ReadTlsClientFiles({Path("ca.pem"), Path("client.pem"), Path("client.key")});
  ASSERT_TRUE(mutual.ok()) << mutual.status().ToString();
  ASSERT_TRUE(mutual->has_value());
  EXPECT_EQ((*mutual)->cert_chain, std::string(kCert) + kCert);
  EXPECT_EQ((*mutual)->private_key, kRsaKey);

  TlsClientFiles from_env{Path("ca.pem"), Path("client.pem"), Path("missing.key")};
  from_env.key_name = "SHARDD_TLS_KEY";
  auto missing = ReadTlsClientFiles(from_env);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "SHARDD_TLS_KEY " + Path("missing.key") + ": "))
      << missing.status().ToString();
  EXPECT_EQ(missing.status().message().find('\n'), std::string::npos) << "one line";

  auto swapped = ReadTlsClientFiles({Path("ca.pem"), Path("client.key"), Path("client.pem")});
  ASSERT_FALSE(swapped.ok());
  EXPECT_TRUE(Contains(swapped.status().message(), "--tls-cert " + Path("client.key"))) << swapped.status().ToString();
}

}  // namespace
}  // namespace shardd::testing
