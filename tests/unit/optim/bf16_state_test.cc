// Low-memory optimizer state (shard/optim/bf16_state.h): stochastic rounding
// alone (exact where bf16 is, unbiased, deterministic per seed), and AdamW
// over bf16 state against an fp64 reference — with round-to-nearest as the
// control that loses the small updates stochastic rounding keeps.
#include "shard/optim/bf16_state.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace shard {
namespace {

TEST(StochasticRoundingTest, ValuesBf16HoldsStayExact) {
  std::mt19937 rng(1);
  for (int i = 0; i < 20000; ++i) {
    const uint16_t h = static_cast<uint16_t>(rng());
    const float f = BF16ToF32(h);
    if (!std::isfinite(f)) continue;
    for (uint32_t bits : {0u, 1u, 0x7fffu, 0x8000u, 0xffffu, static_cast<uint32_t>(rng() & 0xffff)})
      ASSERT_EQ(F32ToBF16Stochastic(f, bits), h) << f;
  }
  EXPECT_EQ(F32ToBF16Stochastic(INFINITY, 0xffff), F32ToBF16(INFINITY));
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16Stochastic(NAN, 0xffff))));
}

TEST(StochasticRoundingTest, RoundsToANeighbourAndIsUnbiased) {
  const uint64_t key = SrStreamKey(1234, 7, 3, 0);
  for (float x : {1.0f + 0.3f / 128, -3.0f - 0.9f * 3.0f / 128, 0.0123f, 1e-30f, -7.7e5f}) {
    const float down = BF16ToF32(static_cast<uint16_t>(
        [&] { uint32_t b; std::memcpy(&b, &x, 4); return b >> 16; }()));  // truncation: toward zero
    const float up = std::nextafter(down, std::copysign(INFINITY, x));
    const float up16 = BF16ToF32(static_cast<uint16_t>([&] { uint32_t b; std::memcpy(&b, &up, 4); return (b >> 16) + 1; }()));
    const int n = 200000;
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const float r = BF16ToF32(F32ToBF16Stochastic(x, SrBits(key, i)));
      ASSERT_TRUE(r == down || r == up16) << x << " rounded to " << r;
      sum += r;
    }
    // E[SR(x)] = x: the mean is within 6 standard errors of x.
    const double ulp = std::fabs(static_cast<double>(up16) - down);
    const double p = (std::fabs(static_cast<double>(x)) - std::fabs(static_cast<double>(down))) / ulp;
    const double se = ulp * std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(sum / n, x, 6 * se + 1e-12 * std::fabs(x)) << "x=" << x << " p=" << p;
  }
}

TEST(StochasticRoundingTest, DrawsAreDeterministicPerSeedStepUnitAndElement) {
  EXPECT_EQ(SrStreamKey(1, 2, 3, 0), SrStreamKey(1, 2, 3, 0));
  int differ_seed = 0, differ_step = 0, differ_unit = 0, differ_which = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    const uint32_t b = SrBits(SrStreamKey(1, 2, 3, 0), i);
    EXPECT_EQ(b, SrBits(SrStreamKey(1, 2, 3, 0), i));
    EXPECT_LT(b, 65536u);
    differ_seed += b != SrBits(SrStreamKey(9, 2, 3, 0), i);
    differ_step += b != SrBits(SrStreamKey(1, 3, 3, 0), i);
    differ_unit += b != SrBits(SrStreamKey(1, 2, 4, 0), i);
    differ_which += b != SrBits(SrStreamKey(1, 2, 3, 1), i);
  }
  for (int d : {differ_seed, differ_step, differ_unit, differ_which}) EXPECT_GT(d, 990);
}

// Same element, same draw, however the work is split: a slice starting at
// element 1000 draws what elements 1000.. of the whole unit drew.
TEST(AdamWBf16Test, SlicesDrawLikeTheWholeUnit) {
  const int n = 3000;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  std::vector<uint16_t> p(n), m(n), v(n);
  std::vector<float> g(n);
  for (int i = 0; i < n; ++i) {
    p[i] = F32ToBF16(nd(rng));
    m[i] = F32ToBF16(0.1f * nd(rng));
    v[i] = F32ToBF16(0.01f * std::fabs(nd(rng)));
    g[i] = nd(rng);
  }
  auto p2 = p, m2 = m, v2 = v;
  AdamWArgs a;
  a.lr = 1e-3f;
  a.step = 4;
  a.weight_decay = 0.1f;
  AdamWBf16(p.data(), g.data(), m.data(), v.data(), n, a, {42, 1, 0});
  AdamWBf16(p2.data(), g.data(), m2.data(), v2.data(), 1000, a, {42, 1, 0});
  AdamWBf16(p2.data() + 1000, g.data() + 1000, m2.data() + 1000, v2.data() + 1000, n - 1000, a, {42, 1, 1000});
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
}

// Many small AdamW steps (each far below half a bf16 ulp of the weight): the
// bf16-state run tracks an fp64 reference on average and within the random
// walk of its rounding errors; round-to-nearest, the control, never moves at all.
TEST(AdamWBf16Test, TracksAnFp64ReferenceWhereRoundToNearestStalls) {
  const int n = 4096, steps = 60;
  const double lr = 1e-4, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.0;
  std::mt19937 rng(11);
  std::normal_distribution<double> nd(0, 1);
  std::vector<uint16_t> p(n), m(n, 0), v(n, 0), p_rne(n), m_rne(n, 0), v_rne(n, 0);
  std::vector<double> rp(n), rm(n, 0), rv(n, 0), p0(n);
  for (int i = 0; i < n; ++i) {
    p[i] = p_rne[i] = F32ToBF16(static_cast<float>(1.0 + 0.5 * nd(rng)));
    rp[i] = p0[i] = BF16ToF32(p[i]);
  }
  std::vector<float> g(n);
  for (int s = 1; s <= steps; ++s) {
    for (int i = 0; i < n; ++i) g[i] = static_cast<float>(1.0 + 0.5 * nd(rng));  // a consistent direction
    AdamWArgs a;
    a.lr = static_cast<float>(lr);
    a.beta1 = static_cast<float>(b1);
    a.beta2 = static_cast<float>(b2);
    a.eps = static_cast<float>(eps);
    a.weight_decay = static_cast<float>(wd);
    a.step = s;
    AdamWBf16(p.data(), g.data(), m.data(), v.data(), n, a, {7, 0, 0});
    // Round-to-nearest control: the same update, written back with F32ToBF16.
    for (int i = 0; i < n; ++i) {
      const double gi = g[i];
      const double mi = b1 * BF16ToF32(m_rne[i]) + (1 - b1) * gi, vi = b2 * BF16ToF32(v_rne[i]) + (1 - b2) * gi * gi;
      const double upd = lr * (mi / (1 - std::pow(b1, s))) / (std::sqrt(vi / (1 - std::pow(b2, s))) + eps);
      m_rne[i] = F32ToBF16(static_cast<float>(mi));
      v_rne[i] = F32ToBF16(static_cast<float>(vi));
      p_rne[i] = F32ToBF16(static_cast<float>(BF16ToF32(p_rne[i]) * (1 - lr * wd) - upd));
      // fp64 reference.
      rm[i] = b1 * rm[i] + (1 - b1) * gi;
      rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
      rp[i] = rp[i] * (1 - lr * wd) - lr * (rm[i] / (1 - std::pow(b1, s))) / (std::sqrt(rv[i] / (1 - std::pow(b2, s))) + eps);
    }
  }
  double moved = 0, bias_sr = 0, bias_rne = 0, sq_ulps = 0;
  for (int i = 0; i < n; ++i) {
    const double ulp = std::ldexp(1.0, std::ilogb(rp[i]) - 7);
    moved += rp[i] - p0[i];
    bias_sr += BF16ToF32(p[i]) - rp[i];
    bias_rne += BF16ToF32(p_rne[i]) - rp[i];
    const double e = (BF16ToF32(p[i]) - rp[i]) / ulp;
    sq_ulps += e * e;
  }
  moved /= n;
  bias_sr /= n;
  bias_rne /= n;
  ASSERT_LT(moved, -0.005) << "the reference moved the weights by ~lr per step";
  EXPECT_LT(std::fabs(bias_sr), 0.05 * std::fabs(moved)) << "stochastic rounding tracks the reference on average";
  // Each write adds an independent error of variance <= ulp^2/4: after
  // `steps` writes a random walk of RMS <= sqrt(steps)/2 ulps (3.9 here).
  EXPECT_LE(std::sqrt(sq_ulps / n), 0.5 * std::sqrt(static_cast<double>(steps)) + 0.5)
      << "each weight within the random walk's few bf16 ulps";
  EXPECT_GT(std::fabs(bias_rne), 0.9 * std::fabs(moved)) << "round-to-nearest loses the updates (the control)";
}

}  // namespace
}  // namespace shard
