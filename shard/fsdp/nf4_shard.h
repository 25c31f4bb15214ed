// How QLoRA's frozen base is held under FSDP: one rank's shard of a unit as
// NF4 (shard/tensor/nf4.h) packed into one byte record ("blob") of the same
// size on every rank, so an all-gather moves the packed bytes and each rank's
// record is decoded where it lands.
//
// Blocks: the shard layout of a quantised unit is aligned to the block size
// (ComputeShardLayout with align = block_size), so every shard starts on a
// block boundary and block b covers unit elements [b*bs, (b+1)*bs) whatever
// the world size: the codes and fp32 absmax values do not depend on how the
// unit is sharded. Double quantisation groups 256 block scales from the start
// of each shard and centres them on the shard's mean, so its 8-bit scales do
// (slightly) depend on the sharding.
//
// Kept elements: the unit's 1-D tensors (RMSNorm weights, biases) are not
// quantised — QLoRA quantises the linear layers only. They are zeroed before
// quantisation (so they do not inflate a block's absmax; zero is exact in
// NF4) and stored after the scales as values of the compute dtype's rounding
// in fp32, then written over the dequantised positions.
//
// Record layout (byte offsets, each 4-byte aligned):
//   codes     shard_numel / 2 bytes, two codes per byte, high nibble first
//   absmax    blocks fp32                   (no double quant)
//   absmax_q  blocks int8, padded to 4      (double quant)
//   scale     groups fp32, mean one fp32    (double quant)
//   kept      keep_capacity fp32: this shard's kept elements in unit order
//             (the capacity is the most any rank holds; unused tail zero)
// Pure arithmetic and host encoding; decoding is Backend::DequantizeNf4 plus
// copies (FsdpRuntime). Thread-safety: functions are reentrant.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/common/status.h"
#include "shard/spec/shard_layout.h"
#include "shard/tensor/nf4.h"

namespace shard {

// Per unit: whether it is stored as NF4 and which element ranges
// [offset, offset + count) of its flat buffer stay in higher precision.
struct Nf4UnitSpec {
  bool quantize = false;
  std::vector<std::pair<int64_t, int64_t>> keep;  // (offset, count), sorted, disjoint
};

struct Nf4ShardFormat {
  int64_t shard_numel = 0;
  int block_size = 64;
  bool double_quant = false;
  int64_t blocks = 0, groups = 0;
  int64_t keep_capacity = 0;
  int64_t absmax_off = 0, absmax_q_off = 0, scale_off = 0, mean_off = 0, keep_off = 0;
  int64_t bytes = 0;  // a multiple of 4

  int64_t floats() const { return bytes / 4; }
  // Bytes per element of the shard this record costs (what memory plans charge).
  double bytes_per_param() const { return shard_numel ? static_cast<double>(bytes) / shard_numel : 0.0; }
  // layout must be aligned to the block size (see above).
  static StatusOr<Nf4ShardFormat> For(const ShardLayout& layout, const Nf4UnitSpec& spec, const Nf4Options& o);
};

// The kept runs (unit offset, count) that fall inside shard r, in unit order:
// their values follow each other in shard r's kept area.
std::vector<std::pair<int64_t, int64_t>> Nf4KeptRuns(const ShardLayout& layout, const Nf4UnitSpec& spec, int r);

// Encodes shard r's values (layout.shard_numel floats, host memory) into
// `blob` (format.bytes). Kept values are stored rounded to keep_dtype (the
// compute dtype, so the decoded unit equals a rounded gather bit for bit).
Status EncodeNf4Shard(const Nf4ShardFormat& f, const ShardLayout& layout, const Nf4UnitSpec& spec, int r,
                      const float* shard, DType keep_dtype, uint8_t* blob);

// A view of one record (in any memory) for Backend::DequantizeNf4.
Nf4Run Nf4RunOf(const Nf4ShardFormat& f, const void* blob);

}  // namespace shard
