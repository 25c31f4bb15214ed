// The shape half of an attention kernel's parameter block, shared by the
// scalar kernels (cuda_attention.cu) and the tensor-core ones
// (cuda_attention_tc_*.cu): the same fields, filled the same way.
#pragma once

#include <cmath>
#include <cstdint>

#include "shard/backend/backend.h"

namespace shard::cuda {

// Sets start, batch, seq, n_heads, n_kv, hd, group, out_stride and the
// softmax scale 1/sqrt(head_dim) of `p` from `sh`.
template <typename P>
void SetAttentionShape(const AttentionShape& sh, const int32_t* start, P* p) {
  p->start = start;
  p->batch = static_cast<int>(sh.batch);
  p->seq = static_cast<int>(sh.seq);
  p->n_heads = sh.n_heads;
  p->n_kv = sh.n_kv_heads;
  p->hd = sh.head_dim;
  p->group = sh.n_heads / sh.n_kv_heads;
  p->out_stride = sh.out_stride();
  p->scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.head_dim)));
}

}  // namespace shard::cuda
