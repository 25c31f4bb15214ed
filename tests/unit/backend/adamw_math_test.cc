// The one AdamW arithmetic (shard/backend/adamw_math.h) alone: the step's
// factors, torch's update on hand-computed values, and the CPU backend's AdamW
// as a loop over it.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "shard/backend/adamw_math.h"

namespace shard {
namespace {

AdamWArgs Args(int64_t step, float wd) {
  AdamWArgs a;
  a.lr = 0.1f;
  a.beta1 = 0.9f;
  a.beta2 = 0.999f;
  a.eps = 1e-8f;
  a.weight_decay = wd;
  a.step = step;
  return a;
}

TEST(AdamWMathTest, FactorsAreTorchsBiasCorrections) {
  AdamWArgs a = Args(3, 0.01f);
  a.grad_scale = 0.25f;
  const AdamWFactors f = AdamWFactorsFor(a);
  EXPECT_FLOAT_EQ(f.decay, 1.0f - 0.1f * 0.01f);
  EXPECT_FLOAT_EQ(f.step_size, static_cast<float>(0.1f / (1.0 - std::pow(0.9f, 3.0))));
  EXPECT_FLOAT_EQ(f.bc2_sqrt, static_cast<float>(std::sqrt(1.0 - std::pow(0.999f, 3.0))));
  EXPECT_FLOAT_EQ(f.one_minus_b1, static_cast<float>(1.0 - 0.9f));
  EXPECT_EQ(f.grad_scale, 0.25f);
  EXPECT_EQ(f.eps, 1e-8f);
}

// One scalar through three torch.optim.AdamW steps (the values of
// cpu_basic_test.cc's AdamWMatchesHandComputedTorchSteps, computed in double).
TEST(AdamWMathTest, UpdateMatchesHandComputedTorchSteps) {
  const float grads[3] = {0.5f, -0.25f, 1.0f};
  const double want_p[3] = {0.899000002, 0.8714672987058463, 0.804784672376384};
  const double want_m[3] = {0.05, 0.02, 0.118};
  AdamWElement e{1.0f, 0.0f, 0.0f};
  for (int s = 0; s < 3; ++s) {
    e = AdamWUpdate(e.param, grads[s], e.m, e.v, AdamWFactorsFor(Args(s + 1, 0.01f)));
    EXPECT_NEAR(e.param, want_p[s], 2e-6) << "step " << s + 1;
    EXPECT_NEAR(e.m, want_m[s], 1e-7) << "step " << s + 1;
  }
}

TEST(AdamWMathTest, ZeroGradientOnlyDecays) {
  const AdamWElement e = AdamWUpdate(2.0f, 0.0f, 0.0f, 0.0f, AdamWFactorsFor(Args(1, 0.5f)));
  EXPECT_FLOAT_EQ(e.param, 2.0f * (1.0f - 0.1f * 0.5f));
  EXPECT_EQ(e.m, 0.0f);
  EXPECT_EQ(e.v, 0.0f);
}

// The backend's AdamW is this function applied per element (compiled under
// the CPU backend's flags, so agreement is to an FMA's rounding, not bitwise).
TEST(AdamWMathTest, CpuBackendAppliesTheSameUpdate) {
  auto be = CreateBackend("cpu");
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  const int n = 1000;
  std::vector<float> p(n), g(n), m(n, 0.01f), v(n, 1e-4f);
  for (int i = 0; i < n; ++i) p[i] = std::sin(0.1f * i), g[i] = std::cos(0.37f * i);
  std::vector<float> p2 = p, m2 = m, v2 = v;
  AdamWArgs a = Args(5, 0.1f);
  a.grad_scale = 0.5f;
  (*be)->AdamW(p.data(), g.data(), m.data(), v.data(), n, a);  // CPU backend: host memory
  const AdamWFactors f = AdamWFactorsFor(a);
  for (int i = 0; i < n; ++i) {
    const AdamWElement e = AdamWUpdate(p2[i], g[i], m2[i], v2[i], f);
    EXPECT_NEAR(p[i], e.param, 1e-6f * std::fabs(e.param) + 1e-9f) << i;
    EXPECT_NEAR(m[i], e.m, 1e-6f * std::fabs(e.m) + 1e-9f) << i;
    EXPECT_NEAR(v[i], e.v, 1e-6f * std::fabs(e.v) + 1e-12f) << i;
  }
}

}  // namespace
}  // namespace shard
