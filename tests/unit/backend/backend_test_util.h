// Test helpers for Backend tests: a fixture that owns a backend and moves data
// in and out of its memory (so the same tests can later run on other
// backends), random inputs, tolerance checks, and finite-difference gradients.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/common/thread_pool.h"

namespace shard::testing {

inline std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// |actual - expected| <= atol + rtol * |expected| everywhere; reports the worst few.
inline void ExpectAllNear(const std::vector<float>& actual, const std::vector<double>& expected,
                          double rtol, double atol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(actual[i] - expected[i]);
    if (!(err <= atol + rtol * std::fabs(expected[i]))) {
      if (reported++ < 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << actual[i] << ", want " << expected[i]
                      << " (err " << err << ")";
    }
  }
  EXPECT_EQ(reported, 0) << what << ": " << reported << " of " << actual.size() << " mismatched";
}

// Checks analytic[i] against central differences of `loss` at x for every i
// in `indices` (all of x when empty).
inline void ExpectGradientMatches(const std::vector<float>& analytic, std::vector<double> x,
                                  const std::function<double(const std::vector<double>&)>& loss,
                                  const std::string& what, std::vector<size_t> indices = {},
                                  double rtol = 1e-3, double atol = 1e-4, double eps = 1e-4) {
  ASSERT_EQ(analytic.size(), x.size()) << what;
  if (indices.empty())
    for (size_t i = 0; i < x.size(); ++i) indices.push_back(i);
  int reported = 0;
  for (size_t i : indices) {
    const double x0 = x[i];
    x[i] = x0 + eps;
    const double up = loss(x);
    x[i] = x0 - eps;
    const double down = loss(x);
    x[i] = x0;
    const double fd = (up - down) / (2 * eps);
    const double err = std::fabs(analytic[i] - fd);
    if (!(err <= atol + rtol * std::fabs(fd))) {
      if (reported++ < 5)
        ADD_FAILURE() << what << " gradient[" << i << "]: analytic " << analytic[i]
                      << ", finite difference " << fd << " (err " << err << ")";
    }
  }
  EXPECT_EQ(reported, 0) << what << ": " << reported << " of " << indices.size()
                         << " gradient entries mismatched";
}

inline double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Owns a "cpu" backend; Up/Down move host vectors into and out of its memory.
class BackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = CreateBackend("cpu");
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    be_ = std::move(b.value());
  }

  DeviceBuffer Up(const std::vector<float>& host) {
    auto d = DeviceBuffer::Create(be_.get(), static_cast<int64_t>(host.size()));
    EXPECT_TRUE(d.ok());
    be_->CopyToDevice(d->data(), host.data(), host.size() * sizeof(float));
    return std::move(d.value());
  }
  DeviceBuffer UpInt(const std::vector<int32_t>& host) {
    auto d = DeviceBuffer::Create(be_.get(), static_cast<int64_t>(host.size()));
    EXPECT_TRUE(d.ok());
    be_->CopyToDevice(d->data(), host.data(), host.size() * sizeof(int32_t));
    return std::move(d.value());
  }
  DeviceBuffer Filled(int64_t n, float value) {
    return Up(std::vector<float>(static_cast<size_t>(n), value));
  }
  std::vector<float> Down(const DeviceBuffer& d) {
    std::vector<float> host(static_cast<size_t>(d.size()));
    be_->CopyToHost(host.data(), d.data(), host.size() * sizeof(float));
    return host;
  }

  std::unique_ptr<Backend> be_;
};

// Sets the ParallelFor pool size for a scope (tests of thread-count independence).
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(NumComputeThreads()) { SetNumComputeThreads(n); }
  ~ScopedThreads() { SetNumComputeThreads(saved_); }

 private:
  int saved_;
};

inline bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace shard::testing
