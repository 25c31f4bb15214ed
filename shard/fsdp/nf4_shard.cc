#include "shard/fsdp/nf4_shard.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace shard {
namespace {
int64_t Align4(int64_t x) { return (x + 3) / 4 * 4; }
}  // namespace

std::vector<std::pair<int64_t, int64_t>> Nf4KeptRuns(const ShardLayout& layout, const Nf4UnitSpec& spec, int r) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  const int64_t b = layout.begin(r), e = layout.end(r);
  for (const auto& [off, count] : spec.keep) {
    const int64_t lo = std::max(b, off), hi = std::min(e, off + count);
    if (lo < hi) runs.emplace_back(lo, hi - lo);
  }
  return runs;
}

StatusOr<Nf4ShardFormat> Nf4ShardFormat::For(const ShardLayout& layout, const Nf4UnitSpec& spec, const Nf4Options& o) {
  if (o.block_size < 16 || (o.block_size & (o.block_size - 1)) != 0)
    return InvalidArgument("nf4 shard: block size " + std::to_string(o.block_size) + " is not a power of two >= 16");
  if (layout.shard_numel % o.block_size != 0)
    return InvalidArgument("nf4 shard: shard of " + std::to_string(layout.shard_numel) +
                           " elements is not a whole number of blocks of " + std::to_string(o.block_size));
  Nf4ShardFormat f;
  f.shard_numel = layout.shard_numel;
  f.block_size = o.block_size;
  f.double_quant = o.double_quant;
  f.blocks = layout.shard_numel / o.block_size;
  f.groups = o.double_quant ? (f.blocks + kNf4DoubleQuantBlock - 1) / kNf4DoubleQuantBlock : 0;
  for (int r = 0; r < layout.shards; ++r) {
    int64_t n = 0;
    for (const auto& run : Nf4KeptRuns(layout, spec, r)) n += run.second;
    f.keep_capacity = std::max(f.keep_capacity, n);
  }
  int64_t at = Align4(f.shard_numel / 2);
  if (!o.double_quant) {
    f.absmax_off = at;
    at += f.blocks * 4;
  } else {
    f.absmax_q_off = at;
    at = Align4(at + f.blocks);
    f.scale_off = at;
    at += f.groups * 4;
    f.mean_off = at;
    at += 4;
  }
  f.keep_off = at;
  f.bytes = at + f.keep_capacity * 4;
  return f;
}

Status EncodeNf4Shard(const Nf4ShardFormat& f, const ShardLayout& layout, const Nf4UnitSpec& spec, int r,
                      const float* shard, DType keep_dtype, uint8_t* blob) {
  const int64_t begin = layout.begin(r);
  const auto runs = Nf4KeptRuns(layout, spec, r);
  std::vector<float> x(shard, shard + f.shard_numel);
  std::vector<float> kept;
  for (const auto& [off, count] : runs) {
    float* p = x.data() + (off - begin);
    kept.insert(kept.end(), p, p + count);
    std::fill_n(p, count, 0.0f);
  }
  if (keep_dtype != DType::kF32) {
    std::vector<uint16_t> lp(kept.size());
    ConvertFromF32(keep_dtype, kept.data(), lp.data(), kept.size());
    ConvertToF32(keep_dtype, lp.data(), kept.data(), kept.size());
  }
  Nf4Options o;
  o.block_size = f.block_size;
  o.double_quant = f.double_quant;
  ASSIGN_OR_RETURN(Nf4Tensor t, QuantizeNf4(x.data(), f.shard_numel, o));
  std::memset(blob, 0, static_cast<size_t>(f.bytes));
  std::memcpy(blob, t.codes.data(), t.codes.size());
  if (!f.double_quant) {
    std::memcpy(blob + f.absmax_off, t.absmax.data(), t.absmax.size() * sizeof(float));
  } else {
    std::memcpy(blob + f.absmax_q_off, t.absmax_q.data(), t.absmax_q.size());
    std::memcpy(blob + f.scale_off, t.absmax_scale.data(), t.absmax_scale.size() * sizeof(float));
    std::memcpy(blob + f.mean_off, &t.absmax_mean, sizeof(float));
  }
  std::memcpy(blob + f.keep_off, kept.data(), kept.size() * sizeof(float));
  return OkStatus();
}

Nf4Run Nf4RunOf(const Nf4ShardFormat& f, const void* blob) {
  const auto* p = static_cast<const uint8_t*>(blob);
  Nf4Run run;
  run.codes = p;
  run.numel = f.shard_numel;
  run.block_size = f.block_size;
  if (!f.double_quant) {
    run.absmax = reinterpret_cast<const float*>(p + f.absmax_off);
  } else {
    run.absmax_q = reinterpret_cast<const int8_t*>(p + f.absmax_q_off);
    run.absmax_scale = reinterpret_cast<const float*>(p + f.scale_off);
    run.absmax_mean = reinterpret_cast<const float*>(p + f.mean_off);
  }
  return run;
}

}  // namespace shard
