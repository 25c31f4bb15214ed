// How an FsdpRuntime (fsdp_runtime.h) shards, stores and moves the model's
// units: the strategy, where gradients and moments live, the dtypes on the
// wire and in the shards, a frozen base and its NF4 units (which the model
// converters, shard/train/model_converter.h, set), and the collectives'
// options. Plain data: what the trainer and the converters write.
#pragma once

#include <vector>

#include "shard/comm/communicator.h"
#include "shard/fsdp/nf4_shard.h"
#include "shard/spec/shard_layout.h"
#include "shard/tensor/dtype.h"

namespace shard {

struct FsdpOptions {
  ShardStrategy strategy = ShardStrategy::kFullShard;
  bool prefetch = true;  // all-gather the next unit while computing this one
  // false under optimizer offload: the AdamW moments live in host memory
  // (shard/train/optimizer_state.h) and the runtime allocates no m, v shards.
  bool moments_on_device = true;
  // false under optimizer offload too: the runtime allocates no device gradient
  // shards; each reduce-scatter result is copied to the host and added into a
  // host fp32 gradient shard attached by the optimizer state (AttachHostGrads).
  // Unsharded units (a shard group of one rank) get a transient device gradient
  // buffer per micro-batch: it is loaded from the host shard when earlier
  // micro-batches left gradients there, the model accumulates into it in place
  // as it would into a device shard, and GradsDone copies it back — so the sums
  // are bitwise the on-device ones. The replicas' all-reduce then runs on the
  // host shards (host pointers: the local and gloo communicators read them
  // directly, nccl stages them through device scratch).
  bool grads_on_device = true;
  DType param_dtype = DType::kF32;   // weights on the wire and their compute rounding
  // How the device parameter shard is stored: kF32 (the shard is the master),
  // or param_dtype when the fp32 master lives elsewhere (optimizer offload
  // with a two-byte precision): the all-gather sends the shard as stored, an
  // unsharded unit widens it, and GatherUnit needs the master passed in.
  DType param_shard_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;  // gradients on the reduce-scatter wire
  // Under a two-byte param_dtype: the compute copy the model gets is in that
  // type (ParamsDType) — a sharded unit's gathered values as they came off
  // the wire, an unsharded one's two-byte shard as it is (or its fp32 master
  // rounded into a two-byte copy) — rather than those values widened to fp32.
  // The model's GEMMs take it as their B operand (GemmArgs::b_dtype), so the
  // products are the same; a held unit costs 2 B per element instead of 4 (6
  // while widening). NF4 units are dequantised straight into a two-byte copy
  // (their kept norm values rounded too, unlike the fp32 decode).
  // precision.h's ApplyPrecision turns it on.
  bool two_byte_compute_copy = false;
  // A frozen base (LoRA, shard/model/lora_linear.h): units are sharded and
  // gathered as ever but carry no gradient and no optimizer state — no
  // gradient or moment shards are allocated, GradBuffer is refused, nothing is
  // reduce-scattered or all-reduced, the gradient norm is 0. Under
  // shard_grad_op a unit gathered in the forward is freed after its backward
  // use (the second release of the micro-batch) instead of at GradsDone.
  bool frozen = false;
  // QLoRA (frozen only): per unit, whether its shard is stored as NF4 and which
  // ranges stay unquantised (nf4_shard.h); empty = no unit is. A quantised
  // unit's layout is aligned to nf4.block_size; its shard is one packed record
  // (WriteFrozenShard sets it), the all-gather moves the records, and the unit is
  // dequantised into a compute copy (rounded to param_dtype; two-byte under
  // two_byte_compute_copy) on acquire
  // and freed on release like any gathered unit.
  std::vector<Nf4UnitSpec> nf4_units;
  Nf4Options nf4;
  CommOptions comm;
};

}  // namespace shard
