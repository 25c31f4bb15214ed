// CPU backend: cross-entropy loss and its in-place gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "shard/backend/backend.h"
#include "tests/unit/backend/backend_test_util.h"
#include "tests/unit/backend/reference_ops.h"

namespace shard {
namespace {

using testing::BackendTest;
using testing::ExpectAllNear;
using testing::RandomFloats;
using testing::ToDouble;

class CpuCrossEntropyTest : public BackendTest {
 protected:
  // Runs the backend; returns the loss and (if grad) the rewritten logits.
  double Run(const std::vector<float>& logits, const std::vector<int32_t>& targets, int vocab,
             float grad_scale, bool grad, std::vector<float>* out) {
    DeviceBuffer bl = Up(logits), bt = UpInt(targets);
    const double loss = be_->CrossEntropy(bl.data(), bt.as_int(), targets.size(), vocab, grad_scale, grad);
    if (out) *out = Down(bl);
    return loss;
  }
};

TEST_F(CpuCrossEntropyTest, LossAndGradientWithIgnoredRows) {
  const int vocab = 37;
  const std::vector<int32_t> targets = {3, -1, 0, 36, -1, 10};
  const int64_t rows = targets.size();
  std::vector<float> logits = RandomFloats(rows * vocab, 1, -3.0f, 3.0f);
  for (int j = 0; j < vocab; ++j) logits[2 * vocab + j] += 1000.0f;  // stability: huge logits
  for (int j = 0; j < vocab; ++j) logits[3 * vocab + j] -= 1000.0f;
  const float grad_scale = 0.37f;
  const std::vector<double> ld = ToDouble(logits);
  const double want = ref::CrossEntropy(ld.data(), targets.data(), rows, vocab);

  std::vector<float> unchanged;
  EXPECT_NEAR(Run(logits, targets, vocab, grad_scale, false, &unchanged), want, 1e-6 * want);
  EXPECT_TRUE(testing::BitwiseEqual(unchanged, logits)) << "grad=false must not touch logits";

  std::vector<float> grad;
  EXPECT_NEAR(Run(logits, targets, vocab, grad_scale, true, &grad), want, 1e-6 * want);
  for (int j = 0; j < vocab; ++j) {
    EXPECT_EQ(grad[1 * vocab + j], 0.0f);
    EXPECT_EQ(grad[4 * vocab + j], 0.0f);
  }
  testing::ExpectGradientMatches(
      grad, ld,
      [&](const std::vector<double>& x) {
        return grad_scale * ref::CrossEntropy(x.data(), targets.data(), rows, vocab);
      },
      "cross-entropy", {}, 1e-3, 1e-5);
}

// A NaN logit must surface as a NaN loss (the trainer skips such steps), even
// though the kernel's clamped exp would otherwise hide it.
TEST_F(CpuCrossEntropyTest, NaNLogitGivesNaNLoss) {
  std::vector<float> logits = RandomFloats(2 * 40, 5);
  logits[40 + 17] = std::numeric_limits<float>::quiet_NaN();
  for (bool grad : {false, true}) EXPECT_TRUE(std::isnan(Run(logits, {3, 5}, 40, 1.0f, grad, nullptr)));
}

TEST_F(CpuCrossEntropyTest, AllRowsIgnoredGivesZero) {
  std::vector<float> grad;
  EXPECT_EQ(Run(RandomFloats(3 * 8, 2), {-1, -1, -1}, 8, 1.0f, true, &grad), 0.0);
  for (float g : grad) EXPECT_EQ(g, 0.0f);
}

// Benchmark-width vocabulary, many rows: the vectorised exp and the chunked
// double sum against the exact softmax gradient grad_scale * (p - onehot).
TEST_F(CpuCrossEntropyTest, WideVocabularyMatchesSoftmax) {
  const int vocab = 4096;
  const int64_t rows = 64;
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = r % 9 == 4 ? -1 : static_cast<int32_t>((r * 997) % vocab);
  const std::vector<float> logits = RandomFloats(rows * vocab, 3, -8.0f, 8.0f);
  const float grad_scale = 1.0f / 50;
  std::vector<float> grad;
  const double loss = Run(logits, targets, vocab, grad_scale, true, &grad);
  const std::vector<double> ld = ToDouble(logits);
  const double want = ref::CrossEntropy(ld.data(), targets.data(), rows, vocab);
  EXPECT_NEAR(loss, want, 1e-7 * want);
  std::vector<double> want_grad(rows * vocab, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] < 0) continue;
    const double* x = ld.data() + r * vocab;
    double mx = x[0], sum = 0.0;
    for (int j = 0; j < vocab; ++j) mx = std::max(mx, x[j]);
    for (int j = 0; j < vocab; ++j) sum += std::exp(x[j] - mx);
    for (int j = 0; j < vocab; ++j)
      want_grad[r * vocab + j] = grad_scale * (std::exp(x[j] - mx) / sum - (j == targets[r] ? 1.0 : 0.0));
  }
  ExpectAllNear(grad, want_grad, 1e-5, 1e-12, "softmax gradient");
}

TEST_F(CpuCrossEntropyTest, SameBitsForAnyThreadCount) {
  const int vocab = 1000;
  const int64_t rows = 96;
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = static_cast<int32_t>((r * 31) % vocab);
  const std::vector<float> logits = RandomFloats(rows * vocab, 4, -5.0f, 5.0f);
  std::vector<float> g1, g2;
  double l1, l2;
  {
    testing::ScopedThreads one(1);
    l1 = Run(logits, targets, vocab, 0.5f, true, &g1);
  }
  {
    testing::ScopedThreads two(2);
    l2 = Run(logits, targets, vocab, 0.5f, true, &g2);
  }
  EXPECT_EQ(l1, l2);
  EXPECT_TRUE(testing::BitwiseEqual(g1, g2));
}

}  // namespace
}  // namespace shard
