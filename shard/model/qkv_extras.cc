#include "shard/model/qkv_extras.h"

namespace shard {

StatusOr<std::unique_ptr<QkvExtras>> QkvExtras::Create(const LlamaConfig& config, const ParamLayout& layout,
                                                       Backend* backend, int64_t max_rows, int sets) {
  std::unique_ptr<QkvExtras> e(new QkvExtras(config, backend));
  e->max_rows_ = max_rows;
  if (layout.num_units() < 3) return Internal("qkv extras: the layout has no blocks");
  // Indices and offsets as in block 0; a MoE model's sparse and dense blocks
  // differ, so Forward/Backward re-read them from the unit in hand (Resolve).
  const BlockExtras x = ParamLayout::ExtrasOf(layout.units[1]);
  const auto& t = layout.units[1].tensors;
  if (config.qkv_bias()) {
    if (x.q_bias < 0) return Internal("qkv extras: the layout has no q/k/v biases");
    e->bias_offset_ = t[x.q_bias].offset;
    e->bias_tensor_ = x.q_bias;
    ASSIGN_OR_RETURN(e->ones_, DeviceBuffer::Create(backend, max_rows));
    backend->Fill(e->ones_.data(), max_rows, 1.0f);
  }
  if (config.qk_norm()) {
    if (x.q_norm < 0 || x.k_norm < 0) return Internal("qkv extras: the layout has no q/k norms");
    const int64_t hd = config.head_dim(), H = config.num_heads, KV = config.num_kv_heads;
    e->groups_ = {{0, H, x.q_norm, t[x.q_norm].offset, 0}, {H * hd, KV, x.k_norm, t[x.k_norm].offset, max_rows * H}};
    for (int s = 0; s < sets; ++s) {
      ASSIGN_OR_RETURN(DeviceBuffer raw, DeviceBuffer::Create(backend, max_rows * (H + KV) * hd));
      ASSIGN_OR_RETURN(DeviceBuffer rstd, DeviceBuffer::Create(backend, max_rows * (H + KV)));
      e->raw_.push_back(std::move(raw));
      e->rstd_.push_back(std::move(rstd));
    }
    ASSIGN_OR_RETURN(e->scratch_a_, DeviceBuffer::Create(backend, max_rows * H * hd));
    ASSIGN_OR_RETURN(e->scratch_b_, DeviceBuffer::Create(backend, max_rows * H * hd));
    ASSIGN_OR_RETURN(e->norm_sink_, DeviceBuffer::Create(backend, hd));
  }
  return e;
}

void QkvExtras::Resolve(const UnitSpec& spec) {
  const BlockExtras x = ParamLayout::ExtrasOf(spec);
  if (bias_tensor_ >= 0) bias_tensor_ = x.q_bias, bias_offset_ = spec.tensors[x.q_bias].offset;
  if (groups_.size() == 2) {
    groups_[0].norm_tensor = x.q_norm, groups_[0].norm_offset = spec.tensors[x.q_norm].offset;
    groups_[1].norm_tensor = x.k_norm, groups_[1].norm_offset = spec.tensors[x.k_norm].offset;
  }
}

void QkvExtras::Forward(const UnitWeights& w, int set, int64_t n, float* qkv) {
  Resolve(w.spec());
  const int64_t width = config_.qkv_dim(), hd = config_.head_dim();
  if (bias_offset_ >= 0) {
    // qkv[n, width] += ones[n, 1] · bias[1, width]
    GemmArgs g;
    g.m = n, g.n = width, g.k = 1;
    g.a = ones_.data(), g.lda = 1;
    g.b = w.vec(bias_tensor_), g.ldb = width;  // q, k, v biases: one fp32 run
    g.beta = 1.0f;
    g.c = qkv, g.ldc = width;
    backend_->Gemm(g);
  }
  const float eps = static_cast<float>(config_.rms_norm_eps);
  for (const Group& grp : groups_) {
    // Gather the group's heads into [n*heads, hd] rows (kept for the backward),
    // normalise each head into scratch, scatter back into the fused rows.
    const size_t row_bytes = grp.heads * hd * sizeof(float), fused = width * sizeof(float);
    float* raw = raw_[set].data() + grp.saved_rows * hd;
    float* rstd = rstd_[set].data() + grp.saved_rows;
    backend_->Copy2D(raw, row_bytes, qkv + grp.col, fused, row_bytes, n);
    backend_->RmsNormForward(raw, w.vec(grp.norm_tensor), n * grp.heads, static_cast<int>(hd), eps, scratch_a_.data(),
                             rstd);
    backend_->Copy2D(qkv + grp.col, fused, scratch_a_.data(), row_bytes, row_bytes, n);
  }
}

void QkvExtras::Backward(const UnitWeights& w, float* dw, int set, int64_t n, float* dqkv) {
  Resolve(w.spec());
  const int64_t width = config_.qkv_dim(), hd = config_.head_dim();
  for (const Group& grp : groups_) {
    const size_t row_bytes = grp.heads * hd * sizeof(float), fused = width * sizeof(float);
    backend_->Copy2D(scratch_a_.data(), row_bytes, dqkv + grp.col, fused, row_bytes, n);
    backend_->RmsNormBackward(scratch_a_.data(), raw_[set].data() + grp.saved_rows * hd, w.vec(grp.norm_tensor),
                              rstd_[set].data() + grp.saved_rows, n * grp.heads, static_cast<int>(hd),
                              scratch_b_.data(), dw ? dw + grp.norm_offset : norm_sink_.data());
    backend_->Copy2D(dqkv + grp.col, fused, scratch_b_.data(), row_bytes, row_bytes, n);
  }
  if (bias_offset_ >= 0 && dw != nullptr) {
    // dbias[1, width] += ones[n, 1]^T · dqkv[n, width]
    GemmArgs g;
    g.trans_a = true;
    g.m = 1, g.n = width, g.k = n;
    g.a = ones_.data(), g.lda = 1;
    g.b = dqkv, g.ldb = width;
    g.beta = 1.0f;
    g.c = dw + bias_offset_, g.ldc = width;
    backend_->Gemm(g);
  }
}

}  // namespace shard
