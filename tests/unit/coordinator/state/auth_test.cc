// The admin token: created once with mode 0600 and reused; a token file that
// others can read is refused with the fix in the message; comparison is exact.
#include "coordinator/state/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

class AuthTest : public ScratchTest {};

TEST_F(AuthTest, CreatesAPrivateTokenOnceAndReusesIt) {
  const std::string state = Path("state/nested");  // created if missing
  auto t1 = LoadOrCreateAdminToken(state);
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  EXPECT_EQ(t1->size(), 48u);
  EXPECT_EQ(t1->find_first_not_of("0123456789abcdef"), std::string::npos) << *t1;
  struct stat st;
  ASSERT_EQ(::stat((state + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto t2 = LoadOrCreateAdminToken(state);
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(*t2, *t1);
  auto read = ReadAdminToken(state);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, *t1);

  auto other = LoadOrCreateAdminToken(Path("other"));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *t1);
}

TEST_F(AuthTest, TokenFileReadableByOthersIsRefused) {
  ASSERT_TRUE(LoadOrCreateAdminToken(Path("state")).ok());
  const std::string file = Path("state/admin.token");
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  for (auto st : {LoadOrCreateAdminToken(Path("state")), ReadAdminToken(Path("state"))}) {
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), StatusCode::kPermissionDenied);
    EXPECT_TRUE(Contains(st.status().message(), file)) << st.status().ToString();
    EXPECT_TRUE(Contains(st.status().message(), "chmod 600")) << st.status().ToString();
  }
}

TEST_F(AuthTest, MissingOrTooShortTokens) {
  auto missing = ReadAdminToken(Path("state"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  const std::string file = Path("state/admin.token");
  WriteBytes(file, "abc\n");
  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
  auto short_token = LoadOrCreateAdminToken(Path("state"));
  ASSERT_FALSE(short_token.ok());
  EXPECT_EQ(short_token.status().code(), StatusCode::kDataLoss);

  // A hand-written token with a trailing newline is read without it.
  WriteBytes(file, std::string(40, 'k') + "\n");
  auto ok = ReadAdminToken(Path("state"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, std::string(40, 'k'));
}

TEST(TokensEqualTest, ExactMatchOnly) {
  const std::string t(48, 'a');
  EXPECT_TRUE(TokensEqual(t, t));
  EXPECT_TRUE(TokensEqual("", ""));
  EXPECT_FALSE(TokensEqual(t, t.substr(0, 47)));
  EXPECT_FALSE(TokensEqual(t, t + "a"));
  EXPECT_FALSE(TokensEqual(t, ""));
  std::string last = t;
  last.back() = 'b';
  EXPECT_FALSE(TokensEqual(t, last));
  std::string first = t;
  first.front() = 'A';
  EXPECT_FALSE(TokensEqual(t, first));
}

TEST_F(AuthTest, WorkerTokensAreStoredAsHashes) {
  const std::string token = "00112233445566778899aabbccddeeff0011223344556677";
  const std::string hash = HashToken(token);
  EXPECT_EQ(hash.rfind("sha256:", 0), 0u) << hash;
  EXPECT_EQ(hash.size(), 7u + 64u);
  EXPECT_TRUE(IsTokenHash(hash));
  EXPECT_FALSE(IsTokenHash(token));
  // SHA-256 of "abc" (FIPS 180-2 test vector).
  EXPECT_EQ(HashToken("abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(TokenMatchesHash(token, hash));
  EXPECT_FALSE(TokenMatchesHash(token + "0", hash));
  EXPECT_FALSE(TokenMatchesHash("", HashToken("")));  // an empty token never matches
  EXPECT_FALSE(TokenMatchesHash(hash, hash));          // the stored hash is no password
}

TEST_F(AuthTest, ExternalWorkerTokensFollowTheJoinTokenAndAttempt) {
  const std::string a1 = ExternalWorkerToken("join-a", 1);
  EXPECT_EQ(a1.size(), 48u);
  EXPECT_EQ(a1, ExternalWorkerToken("join-a", 1));
  EXPECT_NE(a1, ExternalWorkerToken("join-a", 2));
  EXPECT_NE(a1, ExternalWorkerToken("join-b", 1));
}

TEST_F(AuthTest, AdminTokenCreatesAPrivateStateDir) {
  ASSERT_TRUE(LoadOrCreateAdminToken(Path("fresh")).ok());
  struct stat st;
  ASSERT_EQ(::stat(Path("fresh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

}  // namespace
}  // namespace shardd::testing
