// NF4 dequantisation (QLoRA's frozen base: Backend::DequantizeNf4). Block by
// block: the block's scale first (one multiply-add under double
// quantisation), then the codes through a 16-entry table. The inner loop is a
// table lookup per nibble that GCC vectorises with AVX2 gathers
// (-march=native); blocks are spread over the pool in fixed chunks. Under a
// two-byte compute dtype the result is rounded in a second pass, or (a
// two-byte output) each block is narrowed from a stack buffer as it is done.
#include <vector>

#include "shard/backend/cpu/cpu_kernels.h"
#include "shard/backend/cpu/cpu_math.h"
#include "shard/tensor/nf4.h"

namespace shard::cpu {
namespace {

constexpr int64_t kNf4Grain = 1 << 15;  // elements per ParallelFor chunk, at least

inline float BlockScale(const Nf4Run& run, int64_t b) {
  if (run.absmax) return run.absmax[b];
  return static_cast<float>(run.absmax_q[b]) * run.absmax_scale[b / kNf4DoubleQuantBlock] + *run.absmax_mean;
}

}  // namespace

void DequantizeNf4(const Nf4Run& run, void* out, DType round_to, DType out_dtype) {
  if (run.numel <= 0) return;
  const int64_t bs = run.block_size;
  const int64_t blocks = run.numel / bs;
  const int64_t grain = std::max<int64_t>(1, kNf4Grain / bs);
  const bool narrow = out_dtype != DType::kF32;
  ParallelFor(blocks, grain, [&](int64_t b0, int64_t b1) {
    std::vector<float> block(narrow ? static_cast<size_t>(bs) : 0);
    for (int64_t b = b0; b < b1; ++b) {
      const float s = BlockScale(run, b);
      const uint8_t* c = run.codes + b * bs / 2;
      float* o = narrow ? block.data() : static_cast<float*>(out) + b * bs;
#pragma omp simd
      for (int64_t p = 0; p < bs / 2; ++p) {
        o[2 * p] = kNf4Codebook[c[p] >> 4] * s;
        o[2 * p + 1] = kNf4Codebook[c[p] & 15] * s;
      }
      if (narrow) NarrowSerial(o, static_cast<uint16_t*>(out) + b * bs, bs, out_dtype);
    }
  });
  // ParallelFor is not reentrant: the rounding is a second pass.
  if (!narrow && round_to != DType::kF32) {
    auto* f = static_cast<float*>(out);
    RoundThrough(f, f, run.numel, round_to);
  }
}

}  // namespace shard::cpu
