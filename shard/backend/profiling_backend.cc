#include "shard/backend/profiling_backend.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>
#include <vector>

namespace shard {
namespace {

struct OpStats {
  double seconds = 0;
  int64_t calls = 0;
  double flops = 0;  // 0 where a FLOP count means nothing (memory-bound ops)
};

class ProfilingBackend final : public Backend {
 public:
  ProfilingBackend(std::unique_ptr<Backend> inner, FILE* out) : inner_(std::move(inner)), out_(out) {}
  ~ProfilingBackend() override {
    if (out_ && !stats_.empty()) std::fprintf(out_, "%s", Report().c_str());
  }

  std::string Report() const {
    std::vector<std::pair<std::string, OpStats>> rows(stats_.begin(), stats_.end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (auto& r : rows) total += r.second.seconds;
    std::string s = "backend profile (" + std::string(inner_->name()) + "): " + Fmt("%.1f", total * 1e3) +
                    " ms in backend ops\n";
    s += Fmt("  %-34s %10s %8s %6s %9s\n", "op", "ms", "calls", "share", "GFLOP/s");
    for (auto& [name, st] : rows) {
      std::string rate = st.flops > 0 && st.seconds > 0 ? Fmt("%.1f", st.flops / st.seconds / 1e9) : "";
      s += Fmt("  %-34s %10.2f %8lld %5.1f%% %9s\n", name.c_str(), st.seconds * 1e3, static_cast<long long>(st.calls),
               total > 0 ? 100 * st.seconds / total : 0.0, rate.c_str());
    }
    return s;
  }
  void Reset() { stats_.clear(); }

  const char* name() const override { return inner_->name(); }
  bool native_bf16() const override { return inner_->native_bf16(); }
  void* native_stream() const override { return inner_->native_stream(); }
  // Device memory is counted (bytes asked for): what is in use, and its peak.
  StatusOr<void*> Allocate(size_t bytes) override {
    StatusOr<void*> p = inner_->Allocate(bytes);
    if (p.ok()) {
      sizes_[*p] = bytes;
      in_use_ += static_cast<int64_t>(bytes);
      peak_ = std::max(peak_, in_use_);
    }
    return p;
  }
  void Free(void* ptr) override {
    auto it = sizes_.find(ptr);
    if (it != sizes_.end()) {
      in_use_ -= static_cast<int64_t>(it->second);
      sizes_.erase(it);
    }
    inner_->Free(ptr);
  }
  int64_t peak_bytes() const { return peak_; }
  int64_t in_use_bytes() const { return in_use_; }
  StatusOr<void*> AllocateHost(size_t bytes) override { return inner_->AllocateHost(bytes); }
  void FreeHost(void* ptr) override { inner_->FreeHost(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    Timed("copy_to_device", 0, [&] { inner_->CopyToDevice(dst, src, bytes); });
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    Timed("copy_to_host", 0, [&] { inner_->CopyToHost(dst, src, bytes); });
  }
  // Timed like every op, so synchronised: profiling serialises the stream anyway.
  void CopyToHostAsync(void* dst, const void* src, size_t bytes) override {
    Timed("copy_to_host_async", 0, [&] { inner_->CopyToHostAsync(dst, src, bytes); });
  }
  std::shared_ptr<BackendEvent> RecordEvent() override { return inner_->RecordEvent(); }
  void Copy(void* dst, const void* src, size_t bytes) override {
    Timed("copy", 0, [&] { inner_->Copy(dst, src, bytes); });
  }
  void Copy2D(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_bytes,
              int64_t rows) override {
    Timed("copy", 0, [&] { inner_->Copy2D(dst, dst_stride, src, src_stride, row_bytes, rows); });
  }
  void Fill(float* x, int64_t n, float v) override { Timed("fill", 0, [&] { inner_->Fill(x, n, v); }); }
  void CastFromF32(const float* src, void* dst, int64_t n, DType to) override {
    Timed("cast_from_f32", 0, [&] { inner_->CastFromF32(src, dst, n, to); });
  }
  void CastToF32(const void* src, float* dst, int64_t n, DType from) override {
    Timed("cast_to_f32", 0, [&] { inner_->CastToF32(src, dst, n, from); });
  }
  void Synchronize() override { inner_->Synchronize(); }

  void Gemm(const GemmArgs& a) override {
    std::string key = Fmt("gemm %lldx%lldx%lld ", static_cast<long long>(a.m), static_cast<long long>(a.n),
                          static_cast<long long>(a.k)) +
                      (a.trans_a ? "T" : "N") + (a.trans_b ? "T" : "N") + (a.beta != 0 ? " +=" : "");
    Timed(key, 2.0 * a.m * a.n * a.k, [&] { inner_->Gemm(a); });
  }
  void Add(const float* a, const float* b, float* out, int64_t n) override {
    Timed("add", 0, [&] { inner_->Add(a, b, out, n); });
  }
  void Scale(float* x, int64_t n, float s) override { Timed("scale", 0, [&] { inner_->Scale(x, n, s); }); }
  void DequantizeNf4(const Nf4Run& run, float* out, DType round_to, DType out_dtype) override {
    Timed("nf4_dequant", 0, [&] { inner_->DequantizeNf4(run, out, round_to, out_dtype); });
  }
  void Dropout(const float* x, float* out, int64_t n, float p, uint64_t seed) override {
    Timed("dropout", 0, [&] { inner_->Dropout(x, out, n, p, seed); });
  }
  double SumSquares(const float* x, int64_t n) override {
    double r = 0;
    Timed("sum_squares", 0, [&] { r = inner_->SumSquares(x, n); });
    return r;
  }
  void EmbeddingForward(const int32_t* t, int64_t rows, const float* table, DType dt, int dim, float* out) override {
    Timed("embedding_forward", 0, [&] { inner_->EmbeddingForward(t, rows, table, dt, dim, out); });
  }
  void EmbeddingBackward(const int32_t* t, int64_t rows, const float* dout, int dim, float* dtable) override {
    Timed("embedding_backward", 0, [&] { inner_->EmbeddingBackward(t, rows, dout, dim, dtable); });
  }
  void RmsNormForward(const float* x, const float* w, int64_t rows, int dim, float eps, float* y,
                      float* rstd) override {
    Timed("rmsnorm_forward", 0, [&] { inner_->RmsNormForward(x, w, rows, dim, eps, y, rstd); });
  }
  void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd, int64_t rows, int dim,
                       float* dx, float* dw) override {
    Timed("rmsnorm_backward", 0, [&] { inner_->RmsNormBackward(dy, x, w, rstd, rows, dim, dx, dw); });
  }
  void Rope(float* x, int64_t rows, int64_t stride, int heads, int hd, const int32_t* pos, const float* cs,
            bool inverse) override {
    Timed(inverse ? "rope_backward" : "rope_forward", 0,
          [&] { inner_->Rope(x, rows, stride, heads, hd, pos, cs, inverse); });
  }
  void AttentionForward(const AttentionShape& s, const float* qkv, const int32_t* seg, float* out,
                        float* lse) override {
    Timed("attention_forward", 2 * AttentionGemmFlops(s), [&] { inner_->AttentionForward(s, qkv, seg, out, lse); });
  }
  void AttentionBackward(const AttentionShape& s, const float* qkv, const int32_t* seg, const float* out,
                         const float* lse, const float* dout, float* dqkv) override {
    Timed("attention_backward", 5 * AttentionGemmFlops(s),
          [&] { inner_->AttentionBackward(s, qkv, seg, out, lse, dout, dqkv); });
  }
  Status AttentionChunkForward(const AttentionShape& s, const AttentionChunk& c, const float* q, const float* kv,
                               const int32_t* seg, float* out, float* lse) override {
    Status st;
    Timed("attention_chunk_forward", 2 * ChunkGemmFlops(s, c),
          [&] { st = inner_->AttentionChunkForward(s, c, q, kv, seg, out, lse); });
    return st;
  }
  Status AttentionChunkBackward(const AttentionShape& s, const AttentionChunk& c, const float* q, const float* kv,
                                const int32_t* seg, const float* out, const float* lse, const float* dout, float* dq,
                                float* dkv) override {
    Status st;
    Timed("attention_chunk_backward", 5 * ChunkGemmFlops(s, c),
          [&] { st = inner_->AttentionChunkBackward(s, c, q, kv, seg, out, lse, dout, dq, dkv); });
    return st;
  }
  Status MoeRoute(const float* logits, const MoeRouting& r) override {
    Status st;
    Timed("moe_route", 0, [&] { st = inner_->MoeRoute(logits, r); });
    return st;
  }
  Status MoeRouteBackward(const MoeRouting& r, const float* dw, const float* dp, float* dl) override {
    Status st;
    Timed("moe_route_backward", 0, [&] { st = inner_->MoeRouteBackward(r, dw, dp, dl); });
    return st;
  }
  Status MoePermute(const float* x, const int32_t* perm, int64_t n, int k, int64_t dim, float* out) override {
    Status st;
    Timed("moe_permute", 0, [&] { st = inner_->MoePermute(x, perm, n, k, dim, out); });
    return st;
  }
  Status MoeUnpermute(const float* y, const int32_t* perm, const float* w, int64_t n, int k, int64_t dim,
                      float* out) override {
    Status st;
    Timed("moe_unpermute", 0, [&] { st = inner_->MoeUnpermute(y, perm, w, n, k, dim, out); });
    return st;
  }
  Status MoeUnpermuteBackward(const float* dout, const float* y, const int32_t* perm, const float* w, int64_t n, int k,
                              int64_t dim, float* dy, float* dw) override {
    Status st;
    Timed("moe_unpermute_backward", 0, [&] { st = inner_->MoeUnpermuteBackward(dout, y, perm, w, n, k, dim, dy, dw); });
    return st;
  }
  void SwiGluForward(const float* gu, int64_t rows, int ffn, float* h) override {
    Timed("swiglu_forward", 0, [&] { inner_->SwiGluForward(gu, rows, ffn, h); });
  }
  void SwiGluBackward(const float* dh, const float* gu, int64_t rows, int ffn, float* dgu) override {
    Timed("swiglu_backward", 0, [&] { inner_->SwiGluBackward(dh, gu, rows, ffn, dgu); });
  }
  double CrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab, float scale,
                      bool grad) override {
    double r = 0;
    Timed("cross_entropy", 0, [&] { r = inner_->CrossEntropy(logits, targets, rows, vocab, scale, grad); });
    return r;
  }
  void AdamW(float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& args) override {
    Timed("adamw", 0, [&] { inner_->AdamW(p, g, m, v, n, args); });
  }

 private:
  // One T x T x head_dim product per query head, causal: half the square.
  static double AttentionGemmFlops(const AttentionShape& s) {
    return 2.0 * s.batch * s.n_heads * s.seq * s.seq * s.head_dim / 2;
  }
  // A chunk's queries see, on average, the keys up to its middle.
  static double ChunkGemmFlops(const AttentionShape& s, const AttentionChunk& c) {
    return 2.0 * s.batch * s.n_heads * c.q_len * (c.q_offset + (c.q_len + 1) / 2.0) * s.head_dim;
  }
  template <typename... A>
  static std::string Fmt(const char* f, A... a) {
    char buf[256];
    std::snprintf(buf, sizeof buf, f, a...);
    return buf;
  }
  template <typename F>
  void Timed(const std::string& key, double flops, F&& f) {
    inner_->Synchronize();
    auto t0 = std::chrono::steady_clock::now();
    f();
    inner_->Synchronize();
    OpStats& st = stats_[key];
    st.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.calls += 1;
    st.flops += flops;
  }

  std::unique_ptr<Backend> inner_;
  FILE* out_;
  std::map<std::string, OpStats> stats_;
  std::map<void*, size_t> sizes_;  // live device allocations
  int64_t in_use_ = 0, peak_ = 0;
};

}  // namespace

std::unique_ptr<Backend> WrapWithProfiler(std::unique_ptr<Backend> inner, FILE* report_to) {
  return std::make_unique<ProfilingBackend>(std::move(inner), report_to);
}

std::string ProfileReport(Backend* backend) {
  auto* p = dynamic_cast<ProfilingBackend*>(backend);
  return p ? p->Report() : std::string();
}

int64_t ProfilePeakBytes(Backend* backend) {
  auto* p = dynamic_cast<ProfilingBackend*>(backend);
  return p ? p->peak_bytes() : -1;
}

int64_t ProfileBytesInUse(Backend* backend) {
  auto* p = dynamic_cast<ProfilingBackend*>(backend);
  return p ? p->in_use_bytes() : -1;
}

void ResetProfile(Backend* backend) {
  if (auto* p = dynamic_cast<ProfilingBackend*>(backend)) p->Reset();
}

}  // namespace shard
