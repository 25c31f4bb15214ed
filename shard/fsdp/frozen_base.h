// A frozen base's storage in the FSDP runtime (LoRA, QLoRA): what the model
// converters (shard/train/model_converter.h) asked for through FsdpOptions
// (frozen, nf4_units), kept apart from FsdpRuntime's gather/reduce protocol.
// Each frozen unit's shard is written once at load — as an NF4 record
// (nf4_shard.h) for a quantised unit, else in the shard dtype (fp32, or the
// two-byte compute dtype: there is no master) — gathered records are decoded
// into a unit's compute copy, and export gathers a unit that has no fp32 master.
//
// Thread-safety: the runtime's thread (Decode may also run where the runtime
// decodes).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/comm/communicator.h"
#include "shard/common/status.h"
#include "shard/fsdp/nf4_shard.h"
#include "shard/spec/shard_layout.h"
#include "shard/tensor/dtype.h"

namespace shard {

class FrozenBase {
 public:
  // nf4_units: one entry per unit (empty: nothing quantised); shard_comm null when unsharded.
  FrozenBase(Backend* backend, Communicator* shard_comm, int shard_size, int shard_rank, DType param_dtype,
             DType param_shard_dtype, std::vector<Nf4UnitSpec> nf4_units, const Nf4Options& nf4);

  // Whether unit u is held as NF4 records (qlora): its shards start on
  // block_size() boundaries, so the blocks do not depend on the sharding.
  bool quantized(int u) const { return !nf4_units_.empty() && nf4_units_[u].quantize; }
  int block_size() const { return nf4_.block_size; }
  const Nf4ShardFormat& format(int u) const { return formats_[u]; }
  // A quantised unit's shard: its record format and kept runs, and the
  // zeroed record buffer (it decodes to zeros until Write).
  Status InitQuantized(int u, const ShardLayout& layout, DeviceBuffer* params);
  // This rank's shard of unit u, from fp32 host values, into params.
  Status Write(int u, const ShardLayout& layout, const float* host_shard, float* params);
  // Every rank's records of unit u (shard_size of them, back to back) into
  // its full values, rounded to round_to, written in out_dtype.
  void Decode(int u, const ShardLayout& layout, const float* records, float* out, DType round_to, DType out_dtype);
  // Export: unit u's full values (fp32, as the model computes with them) into
  // out, gathered from every rank's shard; out null: take part, keep nothing.
  Status Gather(int u, const ShardLayout& layout, const float* params, std::vector<float>* out,
                const CommOptions& options);

 private:
  Backend* backend_;
  Communicator* shard_comm_;
  int shard_size_, shard_rank_;
  DType param_dtype_, param_shard_dtype_;
  std::vector<Nf4UnitSpec> nf4_units_;
  Nf4Options nf4_;
  std::vector<Nf4ShardFormat> formats_;                                           // per unit (quantised ones)
  std::vector<std::vector<std::vector<std::pair<int64_t, int64_t>>>> kept_runs_;  // per unit, per shard rank
};

}  // namespace shard
