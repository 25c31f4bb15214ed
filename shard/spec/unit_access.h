// How the model reaches its parameters and gradients, one unit at a time.
//
// The model calls these in execution order and never asks where the bytes come
// from: in a single process they are the full flat buffers; under FSDP,
// AcquireParams all-gathers the unit (and may prefetch the next one),
// ReleaseParams frees it, and GradsDone reduce-scatters the unit's gradient into
// its owner shard. This is the only seam between shard/model and shard/fsdp.
#pragma once

#include "shard/common/status.h"
#include "shard/tensor/dtype.h"

namespace shard {

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // The unit's full flat parameters (layout: ParamLayout), valid until ReleaseParams.
  // A unit may be acquired again while held (tied embeddings); calls nest.
  virtual StatusOr<const float*> AcquireParams(int unit) = 0;
  // The type of the values AcquireParams hands out for `unit`: kF32, or a
  // two-byte type (behind the float*) when the access keeps its compute copy
  // in the precision's type (FsdpRuntime under train.precision bf16|fp16).
  // The model reads such a unit through UnitWeights (shard/model/unit_weights.h).
  virtual DType ParamsDType(int /*unit*/) const { return DType::kF32; }
  virtual Status ReleaseParams(int unit) = 0;
  // The unit's full flat gradient buffer; the model only ever adds into it.
  virtual StatusOr<float*> GradBuffer(int unit) = 0;
  // Every contribution to the unit's gradient for this micro-batch is in.
  virtual Status GradsDone(int unit) = 0;
  // For a unit whose every gradient element the model produces exactly once
  // per micro-batch, in fp32, and then only stores (a decoder block): an
  // access that keeps the unsharded gradient in a two-byte type (FSDP with a
  // two-byte reduce_dtype, which would round it there anyway) hands out that
  // buffer, zeroed, and sets *dtype; the model stores each element rounded to
  // nearest even (CastFromF32), so no fp32 copy of the whole unit exists.
  // Otherwise (the default) it is GradBuffer with *dtype = kF32: add into it.
  // Use one of the two per unit and micro-batch, not both.
  virtual StatusOr<void*> GradBufferStoreOnce(int unit, DType* dtype) {
    *dtype = DType::kF32;
    ASSIGN_OR_RETURN(float* g, GradBuffer(unit));
    return static_cast<void*>(g);
  }
};

}  // namespace shard
