#include "shard/model/unit_weights.h"

namespace shard {

void LinearForward(Backend* be, DType compute, const float* x, WeightRef w, int64_t n, int64_t in, int64_t out,
                   float* y, float beta) {
  GemmArgs g;
  g.compute = compute;
  g.trans_b = true;
  g.m = n, g.n = out, g.k = in;
  g.a = x, g.lda = in;
  g.b = w.data, g.ldb = in, g.b_dtype = w.dtype;
  g.beta = beta;
  g.c = y, g.ldc = out;
  be->Gemm(g);
}

void LinearBackward(Backend* be, DType compute, const float* x, WeightRef w, const float* dy, int64_t n, int64_t in,
                    int64_t out, float* dx, float* dw, float dx_beta) {
  GemmArgs g;
  g.compute = compute;
  g.m = n, g.n = in, g.k = out;
  g.a = dy, g.lda = out;
  g.b = w.data, g.ldb = in, g.b_dtype = w.dtype;
  g.beta = dx_beta;
  g.c = dx, g.ldc = in;
  be->Gemm(g);
  if (!dw) return;
  GemmArgs gw;
  gw.compute = compute;
  gw.trans_a = true;
  gw.m = out, gw.n = in, gw.k = n;
  gw.a = dy, gw.lda = out;
  gw.b = x, gw.ldb = in;
  gw.beta = 1.0f;
  gw.c = dw, gw.ldc = in;
  be->Gemm(gw);
}

StatusOr<UnitWeights> UnitWeights::Create(Backend* backend, const UnitSpec& spec) {
  UnitWeights u;
  u.backend_ = backend;
  u.spec_ = &spec;
  int64_t small = 0;
  for (const TensorSpec& t : spec.tensors) {
    if (t.shape.size() != 1) {
      u.small_offset_.push_back(-1);
      continue;
    }
    u.small_offset_.push_back(small);
    if (!u.runs_.empty() && u.runs_.back().offset + u.runs_.back().numel == t.offset) {
      u.runs_.back().numel += t.numel;
    } else {
      u.runs_.push_back({t.offset, t.numel, small});
    }
    small += t.numel;
  }
  if (small > 0) {
    ASSIGN_OR_RETURN(u.small_, DeviceBuffer::Create(backend, small));
  }
  return u;
}

void UnitWeights::Bind(const float* w, DType dtype) {
  w_ = w;
  dtype_ = dtype;
  if (dtype == DType::kF32) return;
  const auto* bytes = reinterpret_cast<const char*>(w);
  for (const Run& r : runs_)
    backend_->CastToF32(bytes + r.offset * static_cast<int64_t>(DTypeSize(dtype)), small_.data() + r.small, r.numel,
                        dtype);
}

WeightRef UnitWeights::mat(int t) const {
  const int64_t offset = spec_->tensors[t].offset * static_cast<int64_t>(DTypeSize(dtype_));
  return {reinterpret_cast<const float*>(reinterpret_cast<const char*>(w_) + offset), dtype_};
}

const float* UnitWeights::vec(int t) const {
  if (dtype_ == DType::kF32) return w_ + spec_->tensors[t].offset;
  return small_.data() + small_offset_[t];
}

}  // namespace shard
