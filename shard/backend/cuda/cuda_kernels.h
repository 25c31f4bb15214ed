// Internal to shard/backend/cuda: host-side launchers of the kernels, one
// .cu file per op family as in cpu/ (cuda_elementwise, cuda_norm_rope,
// cuda_cross_entropy, cuda_adamw, cuda_cast, cuda_nf4, cuda_attention and
// cuda_attention_tc_{fwd,bwd}). Every launcher queues work on
// `stream` and returns at once; semantics are those of the matching
// shard::Backend methods (backend.h). C++17 (shared with nvcc) and free of
// CUDA types, so cuda_backend.cc needs no device code.
#pragma once

#include <cstdint>

#include "shard/backend/adamw_math.h"
#include "shard/backend/backend.h"

namespace shard::cuda {

using Stream = void*;  // cudaStream_t

// cuda_elementwise.cu
void LaunchFill(float* x, int64_t n, float value, Stream s);
// Backend::Dropout (the same bits as the CPU backend's).
void LaunchDropout(const float* x, float* out, int64_t n, float p, uint64_t seed, Stream s);
void LaunchAdd(const float* a, const float* b, float* out, int64_t n, Stream s);
void LaunchScale(float* x, int64_t n, float v, Stream s);
// cuda_cast.cu
void LaunchCastFromF32(const float* src, void* dst, int64_t n, DType to, Stream s);
void LaunchCastToF32(const void* src, float* dst, int64_t n, DType from, Stream s);
// dst = src rounded to `through` (nearest even) and widened back: the values
// an op with compute = `through` sees (kF32 copies). dst may equal src.
void LaunchRoundThrough(const float* src, float* dst, int64_t n, DType through, Stream s);
// cuda_nf4.cu: Backend::DequantizeNf4.
// out_dtype kF32: fp32 values (rounded through round_to); else two-byte round_to values.
void LaunchDequantizeNf4(const Nf4Run& run, void* out, DType round_to, DType out_dtype, Stream s);
// cuda_elementwise.cu
// C[m, n] (row stride ldc) = beta * C (0 when beta == 0): GEMMs with k == 0.
void LaunchScaleMatrix(float* c, int64_t m, int64_t n, int64_t ldc, float beta, Stream s);
// Fixed-shape partial sums (the same for a given n on any GPU): writes
// kSumSquaresBlocks doubles to `partials`, then their ordered sum to *result.
constexpr int kSumSquaresBlocks = 1024;
void LaunchSumSquares(const float* x, int64_t n, double* partials, double* result, Stream s);
// The table holds table_dtype values (widened to fp32 in `out`).
void LaunchEmbeddingForward(const int32_t* tokens, int64_t rows, const void* table, DType table_dtype, int dim,
                            float* out, Stream s);
void LaunchEmbeddingBackward(const int32_t* tokens, int64_t rows, const float* dout, int dim, float* dtable,
                             Stream s);
// cuda_norm_rope.cu
void LaunchRmsNormForward(const float* x, const float* w, int64_t rows, int dim, float eps, float* y,
                          float* rstd, Stream s);
// partial: scratch of RmsNormPartialFloats(rows, dim) floats.
int64_t RmsNormPartialFloats(int64_t rows, int dim);
void LaunchRmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd, int64_t rows,
                           int dim, float* dx, float* dw, float* partial, Stream s);
void LaunchRope(float* x, int64_t rows, int64_t row_stride, int n_heads, int head_dim, const int32_t* pos,
                const float* cos_sin, bool inverse, Stream s);
// cuda_elementwise.cu
void LaunchSwiGluForward(const float* gu, int64_t rows, int ffn, float* h, Stream s);
void LaunchSwiGluBackward(const float* dh, const float* gu, int64_t rows, int ffn, float* dgu, Stream s);
// cuda_cross_entropy.cu. row_loss: scratch of `rows` doubles; *result = their ordered sum; *bad_target
// is set to 1 + the first out-of-range target's row when a target >= vocab.
void LaunchCrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab, float grad_scale,
                        bool grad, double* row_loss, double* result, int64_t* bad_target, Stream s);
// cuda_adamw.cu. f from AdamWFactorsFor (adamw_math.h), as the CPU backend computes it.
void LaunchAdamW(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWFactors& f,
                 Stream s);

// cuda_attention.cu. Scratch: starts [batch*seq] int32 (only with segment_ids),
// delta [batch*n_heads*seq] floats (backward).
bool AttentionHeadDimSupported(int head_dim);  // head_dim <= 128
void LaunchAttentionForward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                            int32_t* starts, float* out, float* lse, Stream s);
void LaunchAttentionBackward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                             const float* out, const float* lse, const float* dout, float* dqkv,
                             int32_t* starts, float* delta, Stream s);
// The same fp32 kernels for a chunk of queries over the whole key range
// (Backend::AttentionChunkForward/Backward, context parallelism). Scratch:
// starts [batch*seq] (only with segment_ids), delta [batch*n_heads*q_len].
void LaunchAttentionChunkForward(const AttentionShape& shape, const AttentionChunk& chunk, const float* q,
                                 const float* kv, const int32_t* segment_ids, int32_t* starts, float* out,
                                 float* lse, Stream s);
void LaunchAttentionChunkBackward(const AttentionShape& shape, const AttentionChunk& chunk, const float* q,
                                  const float* kv, const int32_t* segment_ids, const float* out, const float* lse,
                                  const float* dout, float* dq, float* dkv, int32_t* starts, float* delta,
                                  Stream s);
// Shared by both attention implementations: starts[b*seq + t] = first token
// of t's segment; returns starts, or null without segment_ids.
const int32_t* LaunchAttentionSegmentStarts(const AttentionShape& shape, const int32_t* segment_ids,
                                            int32_t* starts, Stream s);

// cuda_attention_tc_{fwd,bwd}.cu: the same two operations on tensor cores for
// shape.compute bf16/fp16 (q, k, v, dout, P and dS rounded to it; scores,
// softmax statistics and accumulation fp32), same arguments and scratch.
// Supported: compute kBF16 (compute capability >= 8.0 on the current device)
// or kF16 (>= 7.0), head_dim a multiple of 16 up to 128.
bool AttentionTcSupported(const AttentionShape& shape);
void LaunchAttentionForwardTc(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                              int32_t* starts, float* out, float* lse, Stream s);
void LaunchAttentionBackwardTc(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                               const float* out, const float* lse, const float* dout, float* dqkv,
                               int32_t* starts, float* delta, Stream s);

// cuda_backend.cc: raises a CHECK failure naming `what` if the last launch failed.
// Mixture of experts (cuda_moe.cu): Backend::MoeRoute and friends.
// LaunchMoeUnpermute needs an int32 scratch of n entries (the inverse permutation).
void LaunchMoeRoute(const float* logits, const MoeRouting& r, Stream s);
void LaunchMoeRouteBackward(const MoeRouting& r, const float* d_weight, const float* d_probs, float* d_logits,
                            Stream s);
void LaunchMoePermute(const float* x, const int32_t* perm, int64_t n, int k, int64_t dim, float* out, Stream s);
void LaunchMoeUnpermute(const float* y, const int32_t* perm, const float* weight, int64_t n, int k, int64_t dim,
                        float* out, int32_t* pos_scratch, Stream s);
void LaunchMoeUnpermuteBackward(const float* dout, const float* y, const int32_t* perm, const float* weight, int64_t n,
                                int k, int64_t dim, float* dy, float* d_weight, Stream s);

void CheckLaunch(const char* what);

}  // namespace shard::cuda
