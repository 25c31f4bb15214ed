// Cross-entropy over [rows, vocab] logits with the softmax gradient written in
// place. Parallel over rows; the loss sums in double over fixed row chunks, so
// it is bitwise the same for any thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "shard/backend/cpu/cpu_kernels.h"
#include "shard/backend/cpu/cpu_math.h"

namespace shard::cpu {
namespace {
constexpr int64_t kChunkRows = 8;

// -log softmax(x)[target]; with `grad`, x becomes grad_scale * (softmax - onehot).
double RowLoss(float* x, int32_t target, int vocab, float grad_scale, bool grad) {
  const float mx = MaxOf(x, vocab);
  const float xt = x[target];
  // Without grad the exponentials go to scratch so logits stay untouched.
  float* e = grad ? x : ThreadScratch(static_cast<size_t>(vocab));
  const double sum = ExpShiftSum(x, e, vocab, mx);
  if (grad) {
    const float s = static_cast<float>(grad_scale / sum);
#pragma omp simd
    for (int j = 0; j < vocab; ++j) x[j] *= s;
    x[target] -= grad_scale;
  }
  return std::log(sum) + (static_cast<double>(mx) - xt);
}
}  // namespace

double CrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab,
                    float grad_scale, bool grad) {
  if (rows <= 0) return 0.0;
  std::vector<double> partial(static_cast<size_t>(NumChunks(rows, kChunkRows)), 0.0);
  ForEachChunk(rows, kChunkRows, [&](int64_t c, int64_t b, int64_t e) {
    double acc = 0.0;
    for (int64_t r = b; r < e; ++r) {
      float* x = logits + r * vocab;
      const int32_t t = targets[r];
      if (t < 0) {
        if (grad) std::fill(x, x + vocab, 0.0f);
        continue;
      }
      SHARD_CHECK_MSG(t < vocab, "cross-entropy target " + std::to_string(t) +
                                     " is outside the vocabulary of " + std::to_string(vocab));
      acc += RowLoss(x, t, vocab, grad_scale, grad);
    }
    partial[c] = acc;
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace shard::cpu
