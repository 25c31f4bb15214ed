#include "shard/model/cp_attention.h"

#include <utility>

#include "shard/spec/context_parallel.h"

namespace shard {

// The shapes of one call: C ranks, chunk length L, the whole length S = 2CL.
struct CpAttention::Dims {
  Dims(const AttentionShape& local, int c)
      : batch(local.batch),
        c(c),
        len(local.seq / 2),
        local_seq(local.seq),
        seq(local.seq * c),
        hq(local.out_stride()),
        kvw(2LL * local.n_kv_heads * local.head_dim),
        qs(local.qkv_stride()) {
    whole = local;
    whole.seq = seq;
  }
  int64_t batch;
  int c;
  int64_t len, local_seq, seq, hq, kvw, qs;
  AttentionShape whole;  // the shape of the whole sequences (keys)
};

Status CpAttention::Ensure(DeviceBuffer* buf, int64_t n) {
  if (buf->data() != nullptr && buf->size() >= n) return OkStatus();
  ASSIGN_OR_RETURN(*buf, DeviceBuffer::Create(backend_, n));
  return OkStatus();
}

void CpAttention::ChunkRows(const Dims& d, const float* src, int64_t src_stride, int64_t col, int64_t width,
                            int chunk, float* dst) const {
  for (int64_t b = 0; b < d.batch; ++b)
    backend_->Copy2D(dst + b * d.len * width, width * sizeof(float),
                     src + (b * d.local_seq + chunk * d.len) * src_stride + col, src_stride * sizeof(float),
                     width * sizeof(float), d.len);
}

void CpAttention::UnchunkRows(const Dims& d, const float* src, int64_t width, int chunk, float* dst,
                              int64_t dst_stride, int64_t col) const {
  for (int64_t b = 0; b < d.batch; ++b)
    backend_->Copy2D(dst + (b * d.local_seq + chunk * d.len) * dst_stride + col, dst_stride * sizeof(float),
                     src + b * d.len * width, width * sizeof(float), width * sizeof(float), d.len);
}

Status CpAttention::GatherKv(const Dims& d, const float* qkv) {
  const int64_t local_n = d.batch * d.local_seq * d.kvw;
  RETURN_IF_ERROR(Ensure(&kv_local_, local_n));
  RETURN_IF_ERROR(Ensure(&kv_gathered_, local_n * d.c));
  RETURN_IF_ERROR(Ensure(&kv_full_, d.batch * d.seq * d.kvw));
  backend_->Copy2D(kv_local_.data(), d.kvw * sizeof(float), qkv + d.hq, d.qs * sizeof(float), d.kvw * sizeof(float),
                   d.batch * d.local_seq);
  RETURN_IF_ERROR(group_->AllGather(kv_local_.data(), kv_gathered_.data(), local_n));
  // Member m's rows of sequence b: its head chunk, then its tail chunk.
  const int64_t block = d.len * d.kvw;
  for (int m = 0; m < d.c; ++m) {
    const auto chunks = HeadTailChunks(d.seq, d.c, m);
    for (int64_t b = 0; b < d.batch; ++b)
      for (int i = 0; i < 2; ++i)
        backend_->Copy(kv_full_.data() + (b * d.seq + chunks[i].offset) * d.kvw,
                       kv_gathered_.data() + m * local_n + (b * d.local_seq + i * d.len) * d.kvw,
                       block * sizeof(float));
  }
  return OkStatus();
}

Status CpAttention::Forward(const AttentionShape& local, const float* qkv, const int32_t* segment_ids, float* out,
                            float* lse) {
  const Dims d(local, group_->size());
  RETURN_IF_ERROR(GatherKv(d, qkv));
  RETURN_IF_ERROR(Ensure(&q_, d.batch * d.len * d.hq));
  RETURN_IF_ERROR(Ensure(&o_, d.batch * d.len * d.hq));
  const auto chunks = HeadTailChunks(d.seq, d.c, group_->rank());
  for (int i = 0; i < 2; ++i) {
    ChunkRows(d, qkv, d.qs, 0, d.hq, i, q_.data());
    float* lse_i = lse + i * d.batch * local.n_heads * d.len;
    RETURN_IF_ERROR(backend_->AttentionChunkForward(d.whole, {chunks[i].offset, d.len}, q_.data(), kv_full_.data(),
                                                    segment_ids, o_.data(), lse_i));
    UnchunkRows(d, o_.data(), d.hq, i, out, d.hq, 0);
  }
  return OkStatus();
}

Status CpAttention::Backward(const AttentionShape& local, const float* qkv, const int32_t* segment_ids,
                             const float* out, const float* lse, const float* dout, float* dqkv) {
  const Dims d(local, group_->size());
  RETURN_IF_ERROR(GatherKv(d, qkv));
  const int64_t chunk_n = d.batch * d.len * d.hq, full_n = d.batch * d.seq * d.kvw;
  const int64_t local_n = d.batch * d.local_seq * d.kvw;
  for (DeviceBuffer* b : {&q_, &o_, &do_, &dq_}) RETURN_IF_ERROR(Ensure(b, chunk_n));
  RETURN_IF_ERROR(Ensure(&dkv_sum_, full_n));
  // kv_gathered_ (c * local_n = full_n floats) is free once reordered into
  // kv_full_: the tail chunk's dK/dV goes there.
  float* dkv_tail = kv_gathered_.data();
  const auto chunks = HeadTailChunks(d.seq, d.c, group_->rank());
  for (int i = 0; i < 2; ++i) {
    ChunkRows(d, qkv, d.qs, 0, d.hq, i, q_.data());
    ChunkRows(d, out, d.hq, 0, d.hq, i, o_.data());
    ChunkRows(d, dout, d.hq, 0, d.hq, i, do_.data());
    const float* lse_i = lse + i * d.batch * local.n_heads * d.len;
    float* dkv_i = i == 0 ? dkv_sum_.data() : dkv_tail;
    RETURN_IF_ERROR(backend_->AttentionChunkBackward(d.whole, {chunks[i].offset, d.len}, q_.data(),
                                                     kv_full_.data(), segment_ids, o_.data(), lse_i, do_.data(),
                                                     dq_.data(), dkv_i));
    if (i == 1) backend_->Add(dkv_sum_.data(), dkv_tail, dkv_sum_.data(), full_n);
    UnchunkRows(d, dq_.data(), d.hq, i, dqkv, d.qs, 0);
  }
  // Block m of the send buffer: member m's rows, laid out as its local rows.
  // kv_full_ (full_n = c * local_n floats) is free once both chunks are done.
  float* send = kv_full_.data();
  RETURN_IF_ERROR(Ensure(&dkv_mine_, local_n));
  for (int m = 0; m < d.c; ++m) {
    const auto mc = HeadTailChunks(d.seq, d.c, m);
    for (int64_t b = 0; b < d.batch; ++b)
      for (int i = 0; i < 2; ++i)
        backend_->Copy(send + m * local_n + (b * d.local_seq + i * d.len) * d.kvw,
                       dkv_sum_.data() + (b * d.seq + mc[i].offset) * d.kvw, d.len * d.kvw * sizeof(float));
  }
  RETURN_IF_ERROR(group_->ReduceScatter(send, dkv_mine_.data(), local_n));
  backend_->Copy2D(dqkv + d.hq, d.qs * sizeof(float), dkv_mine_.data(), d.kvw * sizeof(float), d.kvw * sizeof(float),
                   d.batch * d.local_seq);
  return OkStatus();
}

}  // namespace shard
