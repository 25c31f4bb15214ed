// ProfilingBackend: results identical to the wrapped backend, one table row per
// op kind with its calls and GEMM FLOP rate, reset, and the env switch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/backend/profiling_backend.h"

namespace shard {
namespace {

TEST(ProfilingBackend, PassesResultsThroughAndCountsCalls) {
  auto plain = CreateBackend("cpu");
  auto inner = CreateBackend("cpu");
  ASSERT_TRUE(plain.ok() && inner.ok());
  std::unique_ptr<Backend> prof = WrapWithProfiler(std::move(*inner), nullptr);
  EXPECT_STREQ(prof->name(), "cpu");

  std::vector<float> a(6 * 4), b(4 * 5), c1(6 * 5, 1.0f), c2(6 * 5, 1.0f);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
  GemmArgs g{false, false, 6, 5, 4, 1.0f, a.data(), 4, b.data(), 5, 1.0f, nullptr, 5};
  g.c = c1.data();
  (*plain)->Gemm(g);
  g.c = c2.data();
  prof->Gemm(g);
  prof->Gemm(g);
  (*plain)->Gemm(GemmArgs{g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, c1.data(), 5});
  EXPECT_EQ(c1, c2);
  EXPECT_DOUBLE_EQ(prof->SumSquares(a.data(), 4), (*plain)->SumSquares(a.data(), 4));

  const std::string report = ProfileReport(prof.get());
  EXPECT_NE(report.find("gemm 6x5x4 NN +="), std::string::npos) << report;
  EXPECT_NE(report.find("sum_squares"), std::string::npos) << report;
  // The gemm row says 2 calls.
  const size_t row = report.find("gemm 6x5x4 NN +=");
  ASSERT_NE(row, std::string::npos);
  EXPECT_NE(report.substr(row, report.find('\n', row) - row).find(" 2 "), std::string::npos) << report;

  ResetProfile(prof.get());
  EXPECT_EQ(ProfileReport(prof.get()).find("gemm"), std::string::npos);
  // Not a profiler: no report, reset does nothing.
  EXPECT_EQ(ProfileReport(plain->get()), "");
  ResetProfile(plain->get());
}

// Device memory: the bytes in use and their peak (cp_bench reads the peak).
TEST(ProfilingBackend, CountsDeviceMemoryAndItsPeak) {
  auto inner = CreateBackend("cpu");
  ASSERT_TRUE(inner.ok());
  std::unique_ptr<Backend> prof = WrapWithProfiler(std::move(*inner), nullptr);
  EXPECT_EQ(ProfilePeakBytes(prof.get()), 0);
  auto a = prof->Allocate(1000);
  auto b = prof->Allocate(3000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ProfileBytesInUse(prof.get()), 4000);
  prof->Free(*b);
  EXPECT_EQ(ProfileBytesInUse(prof.get()), 1000);
  auto c = prof->Allocate(500);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ProfileBytesInUse(prof.get()), 1500);
  EXPECT_EQ(ProfilePeakBytes(prof.get()), 4000);
  prof->Free(*a);
  prof->Free(*c);
  EXPECT_EQ(ProfileBytesInUse(prof.get()), 0);
  EXPECT_EQ(ProfilePeakBytes(prof.get()), 4000);
  auto plain = CreateBackend("cpu");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(ProfilePeakBytes(plain->get()), -1);
}

TEST(ProfilingBackend, EnvironmentSwitchWrapsTheFactory) {
  setenv("SHARDD_PROFILE_OPS", "1", 1);
  auto on = CreateBackend("cpu");
  setenv("SHARDD_PROFILE_OPS", "0", 1);
  auto off = CreateBackend("cpu");
  unsetenv("SHARDD_PROFILE_OPS");
  ASSERT_TRUE(on.ok() && off.ok());
  std::vector<float> x(8, 0.0f);
  (*on)->Fill(x.data(), 8, 2.0f);
  EXPECT_EQ(x[7], 2.0f);
  EXPECT_NE(ProfileReport(on->get()).find("fill"), std::string::npos);
  EXPECT_EQ(ProfileReport(off->get()), "");
  ResetProfile(on->get());  // destroyed without rows: prints nothing
}

}  // namespace
}  // namespace shard
