// NF4 (shard/tensor/nf4.h): the 16 codebook values re-derived from the normal
// quantiles as the QLoRA paper builds them, the block layout (absmax per block,
// two codes per byte, high nibble first, a partial last block, any dequantised
// sub-range), nearest-value encoding against a brute-force search, and the
// Gaussian round trip: NF4's error is below a uniform 4-bit absmax format's
// (the point of the format) and double quantisation adds almost nothing to it.
#include "shard/tensor/nf4.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace shard {
namespace {

// Inverse of the standard normal CDF by bisection on erfc: slow and plain.
double NormPpf(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 200; ++i) {
    double mid = 0.5 * (lo + hi);
    double cdf = 0.5 * std::erfc(-mid / std::sqrt(2.0));
    (cdf < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

TEST(Nf4, CodebookIsTheNormalQuantilesOfTheQloraPaper) {
  // Appendix E: offset 0.9677083; 8 positive quantiles from linspace(offset,
  // 0.5, 9) and 7 negative ones from linspace(offset, 0.5, 8) (dropping 0.5),
  // plus an exact zero; normalised by the largest.
  const double offset = 0.9677083;
  std::vector<double> v;
  for (int i = 0; i < 8; ++i) v.push_back(NormPpf(offset + (0.5 - offset) * i / 8.0));
  for (int i = 0; i < 7; ++i) v.push_back(-NormPpf(offset + (0.5 - offset) * i / 7.0));
  v.push_back(0.0);
  std::sort(v.begin(), v.end());
  const double top = v.back();
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(kNf4Codebook[i], v[i] / top, 2e-6) << "code " << i;
  EXPECT_EQ(kNf4Codebook[7], 0.0f);
  EXPECT_EQ(kNf4Codebook[0], -1.0f);
  EXPECT_EQ(kNf4Codebook[15], 1.0f);
}

TEST(Nf4, EncodesToTheNearestValue) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) {
    float v = i < 16 ? kNf4Codebook[i] : u(rng);
    int best = 0;
    for (int c = 1; c < 16; ++c)
      if (std::fabs(v - kNf4Codebook[c]) < std::fabs(v - kNf4Codebook[best])) best = c;
    uint8_t got = Nf4Encode(v);
    EXPECT_LE(std::fabs(v - kNf4Codebook[got]), std::fabs(v - kNf4Codebook[best]) + 1e-7f) << v;
    if (i < 16) {
      EXPECT_EQ(got, i);
    }
  }
}

TEST(Nf4, BlockLayout) {
  // 2.5 blocks of 16: absmax per block, codes packed high nibble first.
  std::vector<float> x(40);
  for (int i = 0; i < 40; ++i) x[i] = (i % 16 == 5) ? (i < 16 ? 2.0f : (i < 32 ? -4.0f : 0.5f)) : 0.0f;
  x[1] = 1.0f;   // half of block 0's absmax
  x[2] = -2.0f;  // -1 exactly
  auto t = QuantizeNf4(x.data(), 40, {.block_size = 16});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->num_blocks(), 3);
  ASSERT_EQ(t->absmax.size(), 3u);
  EXPECT_EQ(t->absmax[0], 2.0f);
  EXPECT_EQ(t->absmax[1], 4.0f);
  EXPECT_EQ(t->absmax[2], 0.5f);
  ASSERT_EQ(t->codes.size(), 20u);
  // Element 0 (zero → code 7) high, element 1 (0.5 → nearest 0.4407, code 12) low.
  EXPECT_EQ(t->codes[0], (7 << 4) | 12);
  EXPECT_EQ(t->codes[1] >> 4, 0);        // element 2: -1
  EXPECT_EQ(t->codes[2] & 15, 15);       // element 5: +absmax
  EXPECT_EQ(t->codes[(16 + 5) / 2] & 15, 0);  // element 21: -absmax of block 1
  EXPECT_EQ(t->bytes(), 20 + 3 * 4);
  // Every sub-range (odd starts and ends, across blocks) matches the whole.
  std::vector<float> all(40);
  DequantizeNf4(*t, 0, 40, all.data());
  EXPECT_EQ(all[2], -2.0f);
  EXPECT_EQ(all[21], -4.0f);
  EXPECT_NEAR(all[1], 0.44070982933044434f * 2.0f, 1e-6f);
  for (int b = 0; b < 40; ++b)
    for (int e = b + 1; e <= 40; e += 3) {
      std::vector<float> part(e - b);
      DequantizeNf4(*t, b, e, part.data());
      for (int i = b; i < e; ++i) ASSERT_EQ(part[i - b], all[i]) << b << ".." << e << " at " << i;
    }
}

TEST(Nf4, RefusesBadInput) {
  std::vector<float> x(64, 1.0f);
  EXPECT_FALSE(QuantizeNf4(x.data(), 64, {.block_size = 48}).ok());
  x[37] = NAN;
  auto t = QuantizeNf4(x.data(), 64, {});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("element 37"), std::string::npos) << t.status().ToString();
}

// Uniform symmetric 4-bit absmax quantisation (levels -7..7 / 7), the baseline
// NF4 improves on for normally distributed weights.
double Int4Mse(const std::vector<float>& x, int block) {
  double se = 0;
  for (size_t b = 0; b < x.size(); b += block) {
    float amax = 0;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    for (int i = 0; i < block; ++i) {
      double q = std::nearbyint(x[b + i] / amax * 7.0) / 7.0 * amax;
      se += (q - x[b + i]) * (q - x[b + i]);
    }
  }
  return se / x.size();
}

TEST(Nf4, GaussianRoundTrip) {
  const int64_t n = 64 * 8192;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 0.02f);  // a typical weight scale
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  auto plain = QuantizeNf4(x.data(), n, {});
  auto dq = QuantizeNf4(x.data(), n, {.block_size = 64, .double_quant = true});
  ASSERT_TRUE(plain.ok() && dq.ok());
  std::vector<float> y(n), ydq(n);
  DequantizeNf4(*plain, 0, n, y.data());
  DequantizeNf4(*dq, 0, n, ydq.data());
  float max_gap = 0;
  for (int c = 0; c < 15; ++c) max_gap = std::max(max_gap, kNf4Codebook[c + 1] - kNf4Codebook[c]);
  double se = 0, se_dq = 0, var = 0;
  for (int64_t i = 0; i < n; ++i) {
    // Every element is the nearest codebook value times its block's absmax.
    const float s = plain->absmax[i / 64];
    ASSERT_LE(std::fabs(y[i] - x[i]), s * 0.5f * max_gap * (1 + 1e-6f)) << i;
    se += (y[i] - x[i]) * (y[i] - x[i]);
    se_dq += (ydq[i] - x[i]) * (ydq[i] - x[i]);
    var += static_cast<double>(x[i]) * x[i];
  }
  const double rel = std::sqrt(se / var), rel_dq = std::sqrt(se_dq / var);
  const double rel_int4 = std::sqrt(Int4Mse(x, 64) * n / var);
  std::printf("relative RMS error: nf4 %.4f, nf4+dq %.4f, int4 absmax %.4f\n", rel, rel_dq, rel_int4);
  // The Gaussian-optimal codebook beats the uniform one by a clear margin.
  EXPECT_LT(rel, 0.9 * rel_int4);
  // Around 0.1 of the signal for blocks of 64 (the absmax of 64 normals is ~2.4 sigma).
  EXPECT_GT(rel, 0.07);
  EXPECT_LT(rel, 0.12);
  // DQ: scales within half an int8 step; total error within 1% of plain NF4.
  EXPECT_LT(rel_dq, 1.01 * rel);
  // Storage: 4.5 bits per weight plain, ~4.127 with DQ (plus one fp32 mean).
  EXPECT_EQ(plain->bytes(), n / 2 + n / 64 * 4);
  EXPECT_EQ(dq->bytes(), n / 2 + n / 64 + (n / 64 / 256) * 4 + 4);
  for (int64_t b = 0; b < plain->num_blocks(); ++b) {
    const float step = dq->absmax_scale[b / 256];
    ASSERT_LE(std::fabs(dq->BlockScale(b) - plain->absmax[b]), 0.5f * step + 1e-7f) << b;
  }
}

}  // namespace
}  // namespace shard
