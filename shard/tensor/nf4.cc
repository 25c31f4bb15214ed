#include "shard/tensor/nf4.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace shard {

namespace {

// Decision boundaries: the midpoints between neighbouring codebook values.
struct Nf4Midpoints {
  float m[15];
  constexpr Nf4Midpoints() : m{} {
    for (int i = 0; i < 15; ++i) m[i] = (kNf4Codebook[i] + kNf4Codebook[i + 1]) * 0.5f;
  }
};
constexpr Nf4Midpoints kMid;

// Branch-free: the index is the number of midpoints v lies above, so a loop
// of these vectorises (15 compares and adds per element).
inline uint8_t Encode(float v) {
  int code = 0;
  for (int i = 0; i < 15; ++i) code += v > kMid.m[i] ? 1 : 0;
  return static_cast<uint8_t>(code);
}

void QuantizeScales(Nf4Tensor* t, const std::vector<float>& absmax) {
  const int64_t nb = static_cast<int64_t>(absmax.size());
  double sum = 0;
  for (float a : absmax) sum += a;
  t->absmax_mean = nb > 0 ? static_cast<float>(sum / nb) : 0.0f;
  t->absmax_q.resize(nb);
  t->absmax_scale.resize((nb + kNf4DoubleQuantBlock - 1) / kNf4DoubleQuantBlock);
  for (size_t g = 0; g < t->absmax_scale.size(); ++g) {
    const int64_t b0 = static_cast<int64_t>(g) * kNf4DoubleQuantBlock;
    const int64_t b1 = std::min<int64_t>(nb, b0 + kNf4DoubleQuantBlock);
    float amax = 0;
    for (int64_t b = b0; b < b1; ++b) amax = std::max(amax, std::fabs(absmax[b] - t->absmax_mean));
    const float step = amax / 127.0f;
    t->absmax_scale[g] = step;
    const float inv = step > 0 ? 1.0f / step : 0.0f;
    for (int64_t b = b0; b < b1; ++b) {
      const float q = std::nearbyint((absmax[b] - t->absmax_mean) * inv);
      t->absmax_q[b] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

}  // namespace

uint8_t Nf4Encode(float v) { return Encode(v); }

float Nf4Tensor::BlockScale(int64_t b) const {
  if (!double_quant) return absmax[b];
  return static_cast<float>(absmax_q[b]) * absmax_scale[b / kNf4DoubleQuantBlock] + absmax_mean;
}

int64_t Nf4Tensor::bytes() const {
  return static_cast<int64_t>(codes.size()) + static_cast<int64_t>(absmax.size()) * 4 +
         static_cast<int64_t>(absmax_q.size()) + static_cast<int64_t>(absmax_scale.size()) * 4 +
         (double_quant ? 4 : 0);
}

StatusOr<Nf4Tensor> QuantizeNf4(const float* x, int64_t n, const Nf4Options& o) {
  if (o.block_size < 16 || o.block_size > 4096 || (o.block_size & (o.block_size - 1)) != 0)
    return InvalidArgument("nf4: block_size must be a power of two in [16, 4096], got " +
                           std::to_string(o.block_size));
  if (n < 0) return InvalidArgument("nf4: negative element count");
  Nf4Tensor t;
  t.numel = n;
  t.block_size = o.block_size;
  t.double_quant = o.double_quant;
  t.codes.assign(static_cast<size_t>((n + 1) / 2), 0);
  std::vector<float> absmax(static_cast<size_t>(t.num_blocks()));
  std::vector<uint8_t> block_codes(static_cast<size_t>(o.block_size));
  for (int64_t b = 0; b < t.num_blocks(); ++b) {
    const int64_t i0 = b * o.block_size, len = std::min<int64_t>(o.block_size, n - i0);
    const float* xb = x + i0;
    float amax = 0;
    bool finite = true;
    for (int64_t i = 0; i < len; ++i) {
      amax = std::max(amax, std::fabs(xb[i]));
      finite &= std::isfinite(xb[i]);
    }
    if (!finite) {
      for (int64_t i = 0; i < len; ++i)
        if (!std::isfinite(xb[i]))
          return InvalidArgument("nf4: element " + std::to_string(i0 + i) + " is not finite");
    }
    absmax[b] = amax;
    const float inv = amax > 0 ? 1.0f / amax : 0.0f;
    for (int64_t i = 0; i < len; ++i) block_codes[i] = Encode(xb[i] * inv);
    // Blocks have an even size, so pairs never straddle two blocks.
    for (int64_t i = 0; i < len; i += 2) {
      const uint8_t lo = i + 1 < len ? block_codes[i + 1] : 0;
      t.codes[(i0 + i) / 2] = static_cast<uint8_t>(block_codes[i] << 4 | lo);
    }
  }
  if (o.double_quant) {
    QuantizeScales(&t, absmax);
  } else {
    t.absmax = std::move(absmax);
  }
  return t;
}

void DequantizeNf4(const Nf4Tensor& t, int64_t begin, int64_t end, float* out) {
  int64_t i = begin;
  while (i < end) {
    const int64_t b = i / t.block_size;
    const int64_t stop = std::min(end, (b + 1) * t.block_size);
    const float s = t.BlockScale(b);
    // An odd start takes one low nibble; then whole bytes, two outputs each.
    if (i & 1) {
      out[i - begin] = kNf4Codebook[t.codes[i / 2] & 15] * s;
      ++i;
    }
    const int64_t pairs = (stop - i) / 2;
    const uint8_t* c = t.codes.data() + i / 2;
    float* o = out + (i - begin);
    for (int64_t p = 0; p < pairs; ++p) {
      o[2 * p] = kNf4Codebook[c[p] >> 4] * s;
      o[2 * p + 1] = kNf4Codebook[c[p] & 15] * s;
    }
    i += 2 * pairs;
    if (i < stop) {
      out[i - begin] = kNf4Codebook[t.codes[i / 2] >> 4] * s;
      ++i;
    }
  }
}

}  // namespace shard
