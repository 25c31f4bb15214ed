// Internal to shard/backend/cpu: the kernels behind CpuBackend, as free
// functions grouped by the file that defines them. Semantics are exactly those
// of the matching shard::Backend methods (see shard/backend/backend.h).
#pragma once

#include <cstdint>

#include "shard/backend/backend.h"

namespace shard::cpu {

// cpu_gemm.cc
void Gemm(const GemmArgs& args);
// C[m,n] (+)= A(m,k) * B[k,n] for the attention kernels: A(i,p) = a[i*a_rs + p*a_cs]
// (so A may be read transposed), B row-major with ldb, n a multiple of 8.
// Single-threaded: called from inside ParallelFor tasks.
void SmallGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
               const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);

// cpu_elementwise.cc
void Fill(float* x, int64_t n, float value);
void Add(const float* a, const float* b, float* out, int64_t n);
void Scale(float* x, int64_t n, float s);
void Dropout(const float* x, float* out, int64_t n, float p, uint64_t seed);
double SumSquares(const float* x, int64_t n);
void EmbeddingForward(const int32_t* tokens, int64_t rows, const float* table, DType table_dtype, int dim, float* out);
void EmbeddingBackward(const int32_t* tokens, int64_t rows, const float* dout, int dim, float* dtable);
void SwiGluForward(const float* gu, int64_t rows, int ffn, float* h);
void SwiGluBackward(const float* dh, const float* gu, int64_t rows, int ffn, float* dgu);

// cpu_moe.cc
void MoeRoute(const float* logits, const MoeRouting& r);
void MoeRouteBackward(const MoeRouting& r, const float* d_weight, const float* d_probs, float* d_logits);
void MoePermute(const float* x, const int32_t* perm, int64_t n, int k, int64_t dim, float* out);
void MoeUnpermute(const float* y, const int32_t* perm, const float* weight, int64_t n, int k, int64_t dim, float* out);
void MoeUnpermuteBackward(const float* dout, const float* y, const int32_t* perm, const float* weight, int64_t n,
                          int k, int64_t dim, float* dy, float* d_weight);

// cpu_cast.cc
void CastFromF32(const float* src, void* dst, int64_t n, DType to);
void CastToF32(const void* src, float* dst, int64_t n, DType from);
// CastToF32 on the calling thread only (for use inside a ParallelFor task).
void WidenSerial(const void* src, float* dst, int64_t n, DType from);
// dst = src rounded to `t` and widened back (the value a two-byte operand
// holds); dst may alias src. kF32 copies.
void RoundThrough(const float* src, float* dst, int64_t n, DType t);
// cpu_nf4.cc: Backend::DequantizeNf4.
void DequantizeNf4(const Nf4Run& run, void* out, DType round_to, DType out_dtype);
// CastFromF32 on the calling thread only (for use inside a ParallelFor task).
void NarrowSerial(const float* src, void* dst, int64_t n, DType to);

// cpu_norm_rope.cc
void RmsNormForward(const float* x, const float* w, int64_t rows, int dim, float eps, float* y,
                    float* rstd);
void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd,
                     int64_t rows, int dim, float* dx, float* dw);
void Rope(float* x, int64_t rows, int64_t row_stride, int n_heads, int head_dim,
          const int32_t* pos, const float* cos_sin, bool inverse);

// cpu_attention.cc
void AttentionForward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                      float* out, float* lse);
void AttentionBackward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                       const float* out, const float* lse, const float* dout, float* dqkv);
void AttentionChunkForward(const AttentionShape& shape, const AttentionChunk& c, const float* q, const float* kv,
                           const int32_t* segment_ids, float* out, float* lse);
void AttentionChunkBackward(const AttentionShape& shape, const AttentionChunk& c, const float* q, const float* kv,
                            const int32_t* segment_ids, const float* out, const float* lse, const float* dout,
                            float* dq, float* dkv);

// cpu_cross_entropy.cc
double CrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab,
                    float grad_scale, bool grad);

// cpu_adamw.cc
void AdamW(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& args);

}  // namespace shard::cpu
