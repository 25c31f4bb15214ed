// CpuBackend: host memory management plus dispatch to the kernels in
// cpu_kernels.h. Everything is synchronous, so Synchronize() has nothing to do.
#include "shard/backend/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shard/backend/cpu/cpu_kernels.h"

namespace shard::cpu {
namespace {

// 64 bytes: a cache line and a full AVX-512 register, so kernels may assume
// aligned starts and no two buffers share a line (no false sharing).
constexpr size_t kAlignment = 64;

// Buffers of 2 MiB and more start on a 2 MiB boundary and ask for transparent
// huge pages (MADV_HUGEPAGE; Debian's default THP mode is "madvise", so
// without the hint they get 4 KiB pages). Activations, weights and gradients
// are streamed through by the GEMMs' packing and the elementwise kernels; with
// 4 KiB pages that walk misses the TLB every page. On the 2-core build machine
// the bench model's median step went from 94 to 109 GFLOP/s (7 alternating
// pairs of runs). Where THP is off the hint is ignored and costs nothing.
constexpr size_t kHugePage = size_t(2) << 20;

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  StatusOr<void*> Allocate(size_t bytes) override {
    // aligned_alloc wants a multiple of the alignment; 0 bytes still gets a
    // unique pointer so callers need no special case.
    const size_t rounded = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded < bytes) return ResourceExhausted("cpu backend: allocation size overflows");
    if (rounded >= kHugePage) {
      // Only the whole huge pages inside the buffer get the hint: a partly
      // used last one would become resident in full (2 MiB per buffer of
      // memory no kernel touches), so the tail stays on 4 KiB pages.
      void* p = nullptr;
      if (posix_memalign(&p, kHugePage, rounded) == 0) {
        (void)madvise(p, rounded / kHugePage * kHugePage, MADV_HUGEPAGE);  // a hint: failure means 4 KiB pages
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr)
      return ResourceExhausted("cpu backend: cannot allocate " + std::to_string(bytes) +
                               " bytes of host memory");
    return p;
  }
  void Free(void* ptr) override { std::free(ptr); }
  void CopyToDevice(void* dst, const void* host_src, size_t bytes) override {
    if (bytes) std::memcpy(dst, host_src, bytes);
  }
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(host_dst, src, bytes);
  }
  void Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void Fill(float* x, int64_t n, float value) override { cpu::Fill(x, n, value); }
  void CastFromF32(const float* src, void* dst, int64_t n, DType to) override { cpu::CastFromF32(src, dst, n, to); }
  void CastToF32(const void* src, float* dst, int64_t n, DType from) override { cpu::CastToF32(src, dst, n, from); }
  void Synchronize() override {}

  void Gemm(const GemmArgs& args) override { cpu::Gemm(args); }
  void Add(const float* a, const float* b, float* out, int64_t n) override { cpu::Add(a, b, out, n); }
  void Scale(float* x, int64_t n, float s) override { cpu::Scale(x, n, s); }
  void Dropout(const float* x, float* out, int64_t n, float p, uint64_t seed) override {
    cpu::Dropout(x, out, n, p, seed);
  }
  double SumSquares(const float* x, int64_t n) override { return cpu::SumSquares(x, n); }
  void DequantizeNf4(const Nf4Run& run, float* out, DType round_to, DType out_dtype) override {
    CheckNf4Output(round_to, out_dtype);
    cpu::DequantizeNf4(run, out, round_to, out_dtype);
  }

  void EmbeddingForward(const int32_t* tokens, int64_t rows, const float* table, DType table_dtype, int dim,
                        float* out) override {
    cpu::EmbeddingForward(tokens, rows, table, table_dtype, dim, out);
  }
  void EmbeddingBackward(const int32_t* tokens, int64_t rows, const float* dout, int dim,
                         float* dtable) override {
    cpu::EmbeddingBackward(tokens, rows, dout, dim, dtable);
  }
  void RmsNormForward(const float* x, const float* w, int64_t rows, int dim, float eps, float* y,
                      float* rstd) override {
    cpu::RmsNormForward(x, w, rows, dim, eps, y, rstd);
  }
  void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd,
                       int64_t rows, int dim, float* dx, float* dw) override {
    cpu::RmsNormBackward(dy, x, w, rstd, rows, dim, dx, dw);
  }
  void Rope(float* x, int64_t rows, int64_t row_stride, int n_heads, int head_dim,
            const int32_t* pos, const float* cos_sin, bool inverse) override {
    cpu::Rope(x, rows, row_stride, n_heads, head_dim, pos, cos_sin, inverse);
  }
  void AttentionForward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                        float* out, float* lse) override {
    cpu::AttentionForward(Fp32Shape(shape), RoundedQkv(shape, qkv), segment_ids, out, lse);
  }
  void AttentionBackward(const AttentionShape& shape, const float* qkv,
                         const int32_t* segment_ids, const float* out, const float* lse,
                         const float* dout, float* dqkv) override {
    cpu::AttentionBackward(Fp32Shape(shape), RoundedQkv(shape, qkv), segment_ids, out, lse, dout, dqkv);
  }
  Status AttentionChunkForward(const AttentionShape& shape, const AttentionChunk& c, const float* q, const float* kv,
                               const int32_t* segment_ids, float* out, float* lse) override {
    cpu::AttentionChunkForward(Fp32Shape(shape), c, Rounded(shape, q, shape.batch * c.q_len * shape.out_stride(), 0),
                               Rounded(shape, kv, shape.batch * shape.seq * KvWidth(shape), 1), segment_ids, out, lse);
    return OkStatus();
  }
  Status AttentionChunkBackward(const AttentionShape& shape, const AttentionChunk& c, const float* q, const float* kv,
                                const int32_t* segment_ids, const float* out, const float* lse, const float* dout,
                                float* dq, float* dkv) override {
    cpu::AttentionChunkBackward(Fp32Shape(shape), c, Rounded(shape, q, shape.batch * c.q_len * shape.out_stride(), 0),
                                Rounded(shape, kv, shape.batch * shape.seq * KvWidth(shape), 1), segment_ids, out,
                                lse, dout, dq, dkv);
    return OkStatus();
  }
  void SwiGluForward(const float* gu, int64_t rows, int ffn, float* h) override {
    cpu::SwiGluForward(gu, rows, ffn, h);
  }
  void SwiGluBackward(const float* dh, const float* gu, int64_t rows, int ffn, float* dgu) override {
    cpu::SwiGluBackward(dh, gu, rows, ffn, dgu);
  }
  Status MoeRoute(const float* logits, const MoeRouting& r) override {
    cpu::MoeRoute(logits, r);
    return OkStatus();
  }
  Status MoeRouteBackward(const MoeRouting& r, const float* dw, const float* dp, float* dl) override {
    cpu::MoeRouteBackward(r, dw, dp, dl);
    return OkStatus();
  }
  Status MoePermute(const float* x, const int32_t* perm, int64_t n, int k, int64_t dim, float* out) override {
    cpu::MoePermute(x, perm, n, k, dim, out);
    return OkStatus();
  }
  Status MoeUnpermute(const float* y, const int32_t* perm, const float* w, int64_t n, int k, int64_t dim,
                      float* out) override {
    cpu::MoeUnpermute(y, perm, w, n, k, dim, out);
    return OkStatus();
  }
  Status MoeUnpermuteBackward(const float* dout, const float* y, const int32_t* perm, const float* w, int64_t n, int k,
                              int64_t dim, float* dy, float* dw) override {
    cpu::MoeUnpermuteBackward(dout, y, perm, w, n, k, dim, dy, dw);
    return OkStatus();
  }
  double CrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab,
                      float grad_scale, bool grad) override {
    return cpu::CrossEntropy(logits, targets, rows, vocab, grad_scale, grad);
  }
  void AdamW(float* param, const float* grad, float* m, float* v, int64_t n,
             const AdamWArgs& args) override {
    cpu::AdamW(param, grad, m, v, n, args);
  }

 private:
  // AttentionShape::compute bf16/fp16: q, k and v rounded to that type (a
  // copy; the caller's qkv is a saved activation), then fp32 attention.
  const float* RoundedQkv(const AttentionShape& shape, const float* qkv) {
    if (shape.compute == DType::kF32) return qkv;
    const int64_t n = shape.batch * shape.seq * shape.qkv_stride();
    rounded_qkv_.resize(static_cast<size_t>(std::max<int64_t>(n, 0)));
    cpu::RoundThrough(qkv, rounded_qkv_.data(), n, shape.compute);
    return rounded_qkv_.data();
  }
  // The same for a chunk's q (slot 0) and kv (slot 1).
  const float* Rounded(const AttentionShape& shape, const float* x, int64_t n, int slot) {
    if (shape.compute == DType::kF32) return x;
    std::vector<float>& copy = rounded_chunk_[slot];
    copy.resize(static_cast<size_t>(std::max<int64_t>(n, 0)));
    cpu::RoundThrough(x, copy.data(), n, shape.compute);
    return copy.data();
  }
  static int64_t KvWidth(const AttentionShape& shape) {
    return 2 * static_cast<int64_t>(shape.n_kv_heads) * shape.head_dim;
  }
  static AttentionShape Fp32Shape(AttentionShape shape) {
    shape.compute = DType::kF32;
    return shape;
  }

  std::vector<float> rounded_qkv_;
  std::vector<float> rounded_chunk_[2];
};

}  // namespace

Backend* CreateBackend() { return new CpuBackend(); }

}  // namespace shard::cpu
