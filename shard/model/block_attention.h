// How a decoder block's attention is computed over the rows the model holds:
// the seam LlamaModel calls for the attention of every block. The default is
// the backend's fused attention over whole sequences (FusedAttention); under
// context parallelism the trainer hands the model a CpAttention
// (cp_attention.h), whose rows are a rank's two chunks of each sequence and
// whose segment ids are the whole sequences'. The model never branches on it.
//
// Thread-safety: as the model (one thread at a time).
#pragma once

#include <cstdint>

#include "shard/backend/backend.h"
#include "shard/common/status.h"

namespace shard {

class BlockAttention {
 public:
  virtual ~BlockAttention() = default;
  // qkv: the fused rows of `shape` (roped); out: [rows, n_heads * head_dim];
  // lse: batch * n_heads * seq floats, kept for Backward.
  virtual Status Forward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids, float* out,
                         float* lse) = 0;
  // dqkv (the fused rows) is overwritten.
  virtual Status Backward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                          const float* out, const float* lse, const float* dout, float* dqkv) = 0;
};

// Whole sequences on this rank: Backend::AttentionForward/Backward.
class FusedAttention : public BlockAttention {
 public:
  explicit FusedAttention(Backend* backend) : backend_(backend) {}
  Status Forward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids, float* out,
                 float* lse) override {
    backend_->AttentionForward(shape, qkv, segment_ids, out, lse);
    return OkStatus();
  }
  Status Backward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids, const float* out,
                  const float* lse, const float* dout, float* dqkv) override {
    backend_->AttentionBackward(shape, qkv, segment_ids, out, lse, dout, dqkv);
    return OkStatus();
  }

 private:
  Backend* backend_;
};

}  // namespace shard
