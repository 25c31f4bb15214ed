// Attention under context parallelism (parallel.context_parallel C): each of
// the C ranks of a CP group holds two chunks of every sequence (head-tail,
// shard/spec/context_parallel.h) and attends with its own queries over the
// whole causal context. Per layer the group all-gathers K and V (the
// collective FSDP already uses), each rank runs the chunk attention of its two
// chunks (Backend::AttentionChunk*), and the backward reduce-scatters dK/dV
// back to the ranks that own those rows. The backward gathers K and V again
// rather than keeping the gathered copy (one layer's K/V at the whole length
// is live only inside the call).
#pragma once

#include <cstdint>

#include "shard/backend/backend.h"
#include "shard/model/block_attention.h"
#include "shard/common/status.h"

namespace shard {

// The CP group's collectives; shard/train implements it over a Communicator
// (shard/model does not talk to the wire). Members are numbered 0..size-1 in
// CP-rank order.
class CpExchange {
 public:
  virtual ~CpExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // recv[size * count]: member m's send at recv + m * count.
  virtual Status AllGather(const float* send, float* recv, int64_t count) = 0;
  // send[size * count]; recv[count] = the sum over members of their block `rank`.
  virtual Status ReduceScatter(const float* send, float* recv, int64_t count) = 0;
};

// The model's BlockAttention under context parallelism (LlamaModel::SetAttention).
class CpAttention : public BlockAttention {
 public:
  CpAttention(Backend* backend, CpExchange* group) : backend_(backend), group_(group) {}

  // local: the rank's shape (local.seq = 2 * chunk length, rows of sequence b
  // at b * local.seq: head chunk, then tail chunk). qkv: fused local rows, roped
  // at their global positions. segment_ids: the whole sequences' ids
  // ([batch * C * local.seq]) or null. out: [batch * local.seq, n_heads *
  // head_dim]; lse: batch * n_heads * local.seq floats (the head chunk's, then
  // the tail chunk's), kept for Backward.
  Status Forward(const AttentionShape& local, const float* qkv, const int32_t* segment_ids, float* out,
                 float* lse) override;
  // dqkv (the fused local rows) is overwritten: dQ of the rank's queries and
  // dK/dV of its rows summed over every rank's queries.
  Status Backward(const AttentionShape& local, const float* qkv, const int32_t* segment_ids, const float* out,
                  const float* lse, const float* dout, float* dqkv) override;

 private:
  struct Dims;
  // kv_full_ = the whole sequences' K/V rows, gathered from the group.
  Status GatherKv(const Dims& d, const float* qkv);
  // Copies rows [first, first + len) of every sequence between a fused or
  // packed local buffer and a chunk buffer (one block per sequence).
  void ChunkRows(const Dims& d, const float* src, int64_t src_stride, int64_t col, int64_t width, int chunk,
                 float* dst) const;
  void UnchunkRows(const Dims& d, const float* src, int64_t width, int chunk, float* dst, int64_t dst_stride,
                   int64_t col) const;
  Status Ensure(DeviceBuffer* buf, int64_t n);

  Backend* backend_;
  CpExchange* group_;
  // Three buffers of the whole sequences' K/V (kv_gathered_, kv_full_,
  // dkv_sum_): the backward puts the tail chunk's dK/dV in kv_gathered_ and
  // the reduce-scatter's send blocks in kv_full_ once they are free.
  DeviceBuffer kv_local_, kv_gathered_, kv_full_, q_, o_, do_, dq_, dkv_sum_, dkv_mine_;
};

}  // namespace shard
