// NF4: the 4-bit NormalFloat format of QLoRA (Dettmers et al. 2023, section 3
// and appendix E). Weights are cut into blocks of block_size (64 by default);
// each block keeps its absmax, and each weight keeps the index (4 bits) of the
// codebook value nearest to weight / absmax. The 16 codebook values are the
// quantiles of N(0, 1) that give equal-area bins with an exact zero, scaled to
// [-1, 1] (kNf4Codebook).
//
// Packing: two codes per byte, element 2i in the high nibble and 2i+1 in the
// low one (bitsandbytes' order); a partial last block is allowed.
//
// Double quantisation (QLoRA's "DQ"): the per-block fp32 absmax values are
// centred on their mean and stored as int8 with one fp32 scale per 256 of
// them (symmetric, round to nearest): 4 + 8/64 + 32/(64*256) ≈ 4.127 bits per
// weight instead of 4.5. The 8-bit format is shardd's own (bitsandbytes uses
// its "dynamic" 8-bit map): quantised state never leaves a run — checkpoints
// hold adapters, exports hold dequantised or merged weights.
//
// Pure host code with vectorisable loops: the reference format. QLoRA's FSDP
// shards pack it into records (shard/fsdp/nf4_shard.h); backends decode those
// with Backend::DequantizeNf4 (bitwise DequantizeNf4 below).
// Thread-safety: functions are reentrant.
#pragma once

#include <cstdint>
#include <vector>

#include "shard/common/status.h"

namespace shard {

inline constexpr float kNf4Codebook[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f};

inline constexpr int kNf4DoubleQuantBlock = 256;  // absmax values per int8 group

struct Nf4Options {
  int block_size = 64;        // a power of two in [16, 4096]
  bool double_quant = false;  // absmax values in 8 bits (see above)
};

// One quantised tensor (or one rank's shard of one).
struct Nf4Tensor {
  int64_t numel = 0;
  int block_size = 64;
  bool double_quant = false;
  std::vector<uint8_t> codes;   // (numel + 1) / 2 bytes
  std::vector<float> absmax;    // per block; empty with double_quant
  // double_quant: absmax[b] ≈ absmax_q[b] * absmax_scale[b / 256] + absmax_mean
  std::vector<int8_t> absmax_q;
  std::vector<float> absmax_scale;
  float absmax_mean = 0;

  int64_t num_blocks() const { return (numel + block_size - 1) / block_size; }
  // The scale of block b, as dequantisation uses it.
  float BlockScale(int64_t b) const;
  // Bytes of storage (codes + scales), what memory accounting charges.
  int64_t bytes() const;
};

// The nearest codebook index of v in [-1, 1] (ties go to the lower index).
uint8_t Nf4Encode(float v);

// Quantises x[0, n). Non-finite inputs are refused (naming the index).
StatusOr<Nf4Tensor> QuantizeNf4(const float* x, int64_t n, const Nf4Options& options);

// out[0, end - begin) = the dequantised elements [begin, end) of t.
void DequantizeNf4(const Nf4Tensor& t, int64_t begin, int64_t end, float* out);

}  // namespace shard
