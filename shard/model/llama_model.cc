#include "shard/model/llama_model.h"

#include <algorithm>

#include "shard/model/moe_mlp.h"
#include "shard/model/qkv_extras.h"
#include "shard/model/rope.h"
#include "shard/model/weight_grads.h"

namespace shard {

// One block's saved activations (shapes for rows = max_rows).
struct LlamaModel::LayerActs {
  int set = 0;  // index of this set (QkvExtras keeps its saved tensors per set)
  DeviceBuffer xn1, rstd1, qkv, attn, lse, x_mid, xn2, rstd2, gu, h;
};

// One block's saved activations when they are two-byte (ModelOptions::
// activation_dtype): the big tensors in that type, the statistics in fp32.
struct LlamaModel::LowpActs {
  DeviceBuffer xn1, qkv, attn, x_mid, xn2, gu, h;  // activation_dtype values
  DeviceBuffer rstd1, lse, rstd2;                  // fp32
};

int64_t ResolveLossChunkRows(const LlamaConfig& config, const ModelOptions& options) {
  return ResolveLossChunkRows(config, options.max_batch * options.max_seq, options.loss_chunk_rows);
}

LlamaModel::LlamaModel(const LlamaConfig& config, Backend* backend, const ModelOptions& options)
    : config_(config), layout_(ParamLayout::ForLlama(config)), backend_(backend), options_(options), fused_(backend) {}

LlamaModel::~LlamaModel() = default;

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const LlamaConfig& config, Backend* backend,
                                                         const ModelOptions& options) {
  RETURN_IF_ERROR(config.Validate());
  if (options.max_batch <= 0 || options.max_seq <= 0)
    return InvalidArgument("model: micro-batch size and sequence length must be > 0");
  if (options.loss_chunk_rows < 0)
    return InvalidArgument("model: loss_chunk_rows must be >= 0 (0 = auto), got " +
                           std::to_string(options.loss_chunk_rows));
  RETURN_IF_ERROR(
      config.CheckSequenceLength(std::max(options.max_seq, options.max_position), "model: sequence length"));
  std::unique_ptr<LlamaModel> m(new LlamaModel(config, backend, options));
  RETURN_IF_ERROR(m->Allocate());
  return m;
}

Status LlamaModel::Allocate() {
  const auto& c = config_;
  max_rows_ = options_.max_batch * options_.max_seq;
  chunk_rows_ = ResolveLossChunkRows(c, options_);
  logits_rows_ = std::max(chunk_rows_, options_.max_batch);  // ForwardLogits: one row per sequence
  // Dense-MLP buffers; a model whose every layer is sparse (mixtral) needs none.
  const int64_t n = max_rows_, d = c.hidden_size, f = c.num_sparse_layers() == c.num_layers ? 1 : c.intermediate_size;
  const int64_t hq = static_cast<int64_t>(c.num_heads) * c.head_dim();
  auto make = [&](DeviceBuffer* buf, int64_t count) -> Status {
    ASSIGN_OR_RETURN(*buf, DeviceBuffer::Create(backend_, count));
    return OkStatus();
  };
  const bool lp = lowp_acts();
  const bool ac = options_.activation_checkpointing;
  // Two-byte values take half as many floats (rounded up) behind the float*.
  auto make_lp = [&](DeviceBuffer* buf, int64_t count) { return make(buf, lp ? (count + 1) / 2 : count); };
  resid_.resize(c.num_layers + 1);
  for (auto& r : resid_) RETURN_IF_ERROR(make_lp(&r, n * d));
  if (lp) RETURN_IF_ERROR(make(&x_work_, n * d));
  const int sets = ac ? 1 : c.num_layers;  // saved sets, whatever their type
  for (int i = 0; i < ((ac || lp) ? 1 : sets); ++i) {
    auto a = std::make_unique<LayerActs>();
    a->set = i;
    RETURN_IF_ERROR(make(&a->xn1, n * d));
    RETURN_IF_ERROR(make(&a->rstd1, n));
    RETURN_IF_ERROR(make(&a->qkv, n * c.qkv_dim()));
    RETURN_IF_ERROR(make(&a->attn, n * hq));
    RETURN_IF_ERROR(make(&a->lse, n * c.num_heads));
    RETURN_IF_ERROR(make(&a->x_mid, n * d));
    RETURN_IF_ERROR(make(&a->xn2, n * d));
    RETURN_IF_ERROR(make(&a->rstd2, n));
    RETURN_IF_ERROR(make(&a->gu, n * 2 * f));
    RETURN_IF_ERROR(make(&a->h, n * f));
    acts_.push_back(std::move(a));
  }
  for (int i = 0; lp && !ac && i < c.num_layers; ++i) {
    auto k = std::make_unique<LowpActs>();
    RETURN_IF_ERROR(make_lp(&k->xn1, n * d));
    RETURN_IF_ERROR(make_lp(&k->qkv, n * c.qkv_dim()));
    RETURN_IF_ERROR(make_lp(&k->attn, n * hq));
    RETURN_IF_ERROR(make_lp(&k->x_mid, n * d));
    RETURN_IF_ERROR(make_lp(&k->xn2, n * d));
    RETURN_IF_ERROR(make_lp(&k->gu, n * 2 * f));
    RETURN_IF_ERROR(make_lp(&k->h, n * f));
    RETURN_IF_ERROR(make(&k->rstd1, n));
    RETURN_IF_ERROR(make(&k->lse, n * c.num_heads));
    RETURN_IF_ERROR(make(&k->rstd2, n));
    lowp_.push_back(std::move(k));
  }
  RETURN_IF_ERROR(make(&final_norm_, n * d));
  RETURN_IF_ERROR(make(&final_rstd_, n));
  RETURN_IF_ERROR(make(&logits_, logits_rows_ * c.vocab_size));
  RETURN_IF_ERROR(make(&grad_a_, n * d));
  RETURN_IF_ERROR(make(&grad_b_, n * d));
  RETURN_IF_ERROR(make(&scratch_d_, n * d));
  RETURN_IF_ERROR(make(&scratch_ffn_, n * f));
  RETURN_IF_ERROR(make(&scratch_attn_, n * hq));
  RETURN_IF_ERROR(make(&scratch_qkv_, n * c.qkv_dim()));
  // Also the round scratch of two-byte activations (round_scratch): half a float per value of the widest
  // rounded tensor, which is not gate/up when every layer is sparse (f = 1).
  const int64_t widest = lp ? (std::max({d, hq, c.qkv_dim()}) + 1) / 2 : 0;
  RETURN_IF_ERROR(make(&scratch_gu_, n * std::max<int64_t>(2 * f, widest)));
  ASSIGN_OR_RETURN(extras_, QkvExtras::Create(c, layout_, backend_, n, sets));
  ASSIGN_OR_RETURN(embed_w_, UnitWeights::Create(backend_, layout_.units[ParamLayout::kEmbedUnit]));
  // Every dense block has one layout, every sparse block (MoE) another.
  int dense = 0, sparse = -1;
  for (int l = c.num_layers - 1; l >= 0; --l) (c.sparse_layer(l) ? sparse : dense) = l;
  ASSIGN_OR_RETURN(block_w_, UnitWeights::Create(backend_, layout_.units[layout_.block_unit(dense)]));
  if (sparse >= 0) {
    ASSIGN_OR_RETURN(moe_w_, UnitWeights::Create(backend_, layout_.units[layout_.block_unit(sparse)]));
    ASSIGN_OR_RETURN(moe_, MoeMlp::Create(c, backend_, n, sets, options_.matmul_dtype, options_.activation_dtype));
  }
  ASSIGN_OR_RETURN(head_w_, UnitWeights::Create(backend_, layout_.units[layout_.head_unit()]));
  std::vector<float> table = RopeCosSinTable(c, std::max(options_.max_seq, options_.max_position));
  RETURN_IF_ERROR(make(&rope_table_, static_cast<int64_t>(table.size())));
  backend_->CopyToDevice(rope_table_.data(), table.data(), table.size() * sizeof(float));
  return OkStatus();
}

Status LlamaModel::CheckBatch(const DeviceBatch& b) const {
  if (b.batch <= 0 || b.seq <= 0) return InvalidArgument("model: empty micro-batch");
  if (b.seq > options_.max_seq || b.rows() > max_rows_)
    return InvalidArgument("model: micro-batch " + std::to_string(b.batch) + "x" + std::to_string(b.seq) +
                           " exceeds the allocated " + std::to_string(options_.max_batch) + "x" +
                           std::to_string(options_.max_seq));
  if (!b.tokens || !b.positions) return InvalidArgument("model: micro-batch without tokens or positions");
  return OkStatus();
}

void LlamaModel::Round(float* x, int64_t n, DeviceBuffer* lp) {
  if (!lowp_acts()) return;
  void* dst = lp ? lp->data() : round_scratch();
  backend_->CastFromF32(x, dst, n, options_.activation_dtype);
  backend_->CastToF32(dst, x, n, options_.activation_dtype);
}

void LlamaModel::Restore(const LowpActs& k, LayerActs& a, int64_t n) {
  const auto& c = config_;
  const int64_t d = c.hidden_size, hq = static_cast<int64_t>(c.num_heads) * c.head_dim();
  const int64_t f = c.num_sparse_layers() == c.num_layers ? 1 : c.intermediate_size;  // as Allocate sizes them
  const DType dt = options_.activation_dtype;
  backend_->CastToF32(k.xn1.data(), a.xn1.data(), n * d, dt);
  backend_->CastToF32(k.qkv.data(), a.qkv.data(), n * c.qkv_dim(), dt);
  backend_->CastToF32(k.attn.data(), a.attn.data(), n * hq, dt);
  backend_->CastToF32(k.x_mid.data(), a.x_mid.data(), n * d, dt);
  backend_->CastToF32(k.xn2.data(), a.xn2.data(), n * d, dt);
  if (c.num_sparse_layers() < c.num_layers) {  // a sparse layer's MLP activations are MoeMlp's (fp32)
    backend_->CastToF32(k.gu.data(), a.gu.data(), n * 2 * f, dt);
    backend_->CastToF32(k.h.data(), a.h.data(), n * f, dt);
  }
  backend_->Copy(a.rstd1.data(), k.rstd1.data(), n * sizeof(float));
  backend_->Copy(a.lse.data(), k.lse.data(), n * c.num_heads * sizeof(float));
  backend_->Copy(a.rstd2.data(), k.rstd2.data(), n * sizeof(float));
}

float* LlamaModel::BlockInput(int l, int64_t n) {
  if (!lowp_acts()) return resid_[l].data();
  backend_->CastToF32(resid_[l].data(), x_work_.data(), n * config_.hidden_size, options_.activation_dtype);
  return x_work_.data();
}

void LlamaModel::StoreResidual(int l, const float* out, int64_t n) {
  if (!lowp_acts()) return;  // the block wrote resid_[l] itself
  backend_->CastFromF32(out, resid_[l].data(), n * config_.hidden_size, options_.activation_dtype);
}

void LlamaModel::SetMoeAuxGradScale(float scale) { if (moe_) moe_->SetAuxGradScale(scale); }
double LlamaModel::moe_aux_loss() const { return moe_ ? moe_->AuxLoss() : 0.0; }
void LlamaModel::SetMoeZLossGradScale(float scale) { if (moe_) moe_->SetZLossGradScale(scale); }
double LlamaModel::moe_z_loss() const { return moe_ ? moe_->ZLoss() : 0.0; }
void LlamaModel::ResetMoeStepStats() { if (moe_) moe_->ResetStepStats(); }
MoeMlp::StepStats LlamaModel::moe_step_stats() const { return moe_ ? moe_->step_stats() : MoeMlp::StepStats{}; }
std::vector<std::vector<double>> LlamaModel::moe_expert_counts() const {
  return moe_ ? moe_->expert_counts() : std::vector<std::vector<double>>{};
}

Status LlamaModel::BlockForward(int l, const UnitWeights& w, const DeviceBatch& b, const float* x, LayerActs& a,
                                float* out, LowpActs* keep) {
  const auto& c = config_;
  const int64_t n = b.rows(), d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim();
  const int64_t hq = static_cast<int64_t>(c.num_heads) * hd, qkv = c.qkv_dim();
  const float eps = static_cast<float>(c.rms_norm_eps);
  AttentionShape shape{b.batch, b.seq, c.num_heads, c.num_kv_heads, c.head_dim(), options_.matmul_dtype};

  backend_->RmsNormForward(x, w.vec(kInputNorm), n, d, eps, a.xn1.data(), a.rstd1.data());
  Round(a.xn1.data(), n * d, keep ? &keep->xn1 : nullptr);
  LinearForward(backend_, options_.matmul_dtype, a.xn1.data(), w.mat(kQ), n, d, qkv, a.qkv.data());
  for (LoraTarget lt : {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV}) LoraAdd(l, lt, a.xn1.data(), n, a.qkv.data());
  extras_->Forward(w, a.set, n, a.qkv.data());
  backend_->Rope(a.qkv.data(), n, qkv, c.num_heads + c.num_kv_heads, c.head_dim(), b.positions,
                 rope_table_.data(), /*inverse=*/false);
  Round(a.qkv.data(), n * qkv, keep ? &keep->qkv : nullptr);
  RETURN_IF_ERROR(attention_->Forward(shape, a.qkv.data(), b.segment_ids, a.attn.data(), a.lse.data()));
  Round(a.attn.data(), n * hq, keep ? &keep->attn : nullptr);
  backend_->Copy(a.x_mid.data(), x, n * d * sizeof(float));
  LinearForward(backend_, options_.matmul_dtype, a.attn.data(), w.mat(kO), n, hq, d, a.x_mid.data(), /*beta=*/1.0f);
  LoraAdd(l, LoraTarget::kO, a.attn.data(), n, a.x_mid.data());
  Round(a.x_mid.data(), n * d, keep ? &keep->x_mid : nullptr);
  backend_->RmsNormForward(a.x_mid.data(), w.vec(kPostNorm), n, d, eps, a.xn2.data(), a.rstd2.data());
  Round(a.xn2.data(), n * d, keep ? &keep->xn2 : nullptr);
  if (keep) {  // the fp32 statistics, which the working set's next layer overwrites
    backend_->Copy(keep->rstd1.data(), a.rstd1.data(), n * sizeof(float));
    backend_->Copy(keep->lse.data(), a.lse.data(), n * c.num_heads * sizeof(float));
    backend_->Copy(keep->rstd2.data(), a.rstd2.data(), n * sizeof(float));
  }
  if (config_.sparse_layer(l)) {  // out = x_mid + MoE(xn2)
    backend_->Copy(out, a.x_mid.data(), n * d * sizeof(float));
    MoeLora ml;
    return moe_->Forward(w, a.set, l, a.xn2.data(), n, b.real_rows, out, MoeLoraFor(l, &ml) ? &ml : nullptr);
  }
  LinearForward(backend_, options_.matmul_dtype, a.xn2.data(), w.mat(kGate), n, d, 2 * f, a.gu.data());
  for (LoraTarget lt : {LoraTarget::kGate, LoraTarget::kUp}) LoraAdd(l, lt, a.xn2.data(), n, a.gu.data());
  Round(a.gu.data(), n * 2 * f, keep ? &keep->gu : nullptr);
  backend_->SwiGluForward(a.gu.data(), n, static_cast<int>(f), a.h.data());
  Round(a.h.data(), n * f, keep ? &keep->h : nullptr);
  backend_->Copy(out, a.x_mid.data(), n * d * sizeof(float));
  LinearForward(backend_, options_.matmul_dtype, a.h.data(), w.mat(kDown), n, f, d, out, /*beta=*/1.0f);
  LoraAdd(l, LoraTarget::kDown, a.h.data(), n, out);
  return OkStatus();
}

Status LlamaModel::BlockBackward(int l, const UnitWeights& w, const WeightGrads& dw, const DeviceBatch& b,
                                 const float* x, LayerActs& a, const float* dy, float* dx) {
  const auto& c = config_;
  const auto& t = w.spec().tensors;  // attention first: the same offsets in dense and sparse blocks
  const int64_t n = b.rows(), d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim();
  const int64_t hq = static_cast<int64_t>(c.num_heads) * hd, qkv = c.qkv_dim();
  AttentionShape shape{b.batch, b.seq, c.num_heads, c.num_kv_heads, c.head_dim(), options_.matmul_dtype};
  float* dh = scratch_ffn_.data();
  float* dgu = scratch_gu_.data();
  float* dxn = scratch_d_.data();
  float* dmid = grad_b_.data();
  const DType md = options_.matmul_dtype;
  // dx of a linear, then its weight gradient into dw (none for a frozen base,
  // whose norm-weight gradients go to a sink).
  auto linear = [&](const float* in_x, BlockTensor bt, const float* dout, int64_t in, int64_t out, float* din) {
    LinearBackward(backend_, md, in_x, w.mat(bt), dout, n, in, out, din, nullptr);
    WeightGrad(backend_, md, dw, t[bt].offset, in_x, dout, n, in, out, wgrad_scratch_.data(), wgrad_scratch_.size());
  };
  auto norm = [&](const float* dout, const float* in_x, BlockTensor bt, const float* rstd, float* din) {
    NormBackward(backend_, dw, t[bt].offset, dout, in_x, w.vec(bt), rstd, n, static_cast<int>(d), din,
                 wgrad_scratch_.data(), frozen_norm_dw_.data());
  };

  // MLP branch: out = x_mid + down(swiglu(gate_up(norm(x_mid)))), or x_mid + MoE(norm(x_mid)).
  if (c.sparse_layer(l)) {
    MoeLora ml;  // dw: fp32 (BlocksBackward)
    RETURN_IF_ERROR(moe_->Backward(w, dw.f32, a.set, l, a.xn2.data(), dy, n, dxn, MoeLoraFor(l, &ml) ? &ml : nullptr));
  } else {
    linear(a.h.data(), kDown, dy, f, d, dh);
    LoraGrad(l, LoraTarget::kDown, a.h.data(), dy, n, dh);
    backend_->SwiGluBackward(dh, a.gu.data(), n, static_cast<int>(f), dgu);
    linear(a.xn2.data(), kGate, dgu, d, 2 * f, dxn);
    for (LoraTarget lt : {LoraTarget::kGate, LoraTarget::kUp}) LoraGrad(l, lt, a.xn2.data(), dgu, n, dxn);
  }
  norm(dxn, a.x_mid.data(), kPostNorm, a.rstd2.data(), dmid);
  backend_->Add(dmid, dy, dmid, n * d);

  // Attention branch: x_mid = x + o(attn(rope(qkv(norm(x))))).
  float* dattn = scratch_attn_.data();
  float* dqkv = scratch_qkv_.data();
  linear(a.attn.data(), kO, dmid, hq, d, dattn);
  LoraGrad(l, LoraTarget::kO, a.attn.data(), dmid, n, dattn);
  RETURN_IF_ERROR(
      attention_->Backward(shape, a.qkv.data(), b.segment_ids, a.attn.data(), a.lse.data(), dattn, dqkv));
  backend_->Rope(dqkv, n, qkv, c.num_heads + c.num_kv_heads, c.head_dim(), b.positions, rope_table_.data(),
                 /*inverse=*/true);
  extras_->Backward(w, dw.f32, a.set, n, dqkv);  // never a two-byte dw (ForwardBackward)
  linear(a.xn1.data(), kQ, dqkv, d, qkv, dxn);
  for (LoraTarget lt : {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV}) LoraGrad(l, lt, a.xn1.data(), dqkv, n, dxn);
  norm(dxn, x, kInputNorm, a.rstd1.data(), dx);
  backend_->Add(dx, dmid, dx, n * d);
  return OkStatus();
}

Status LlamaModel::EnsureWeightGradScratch() {
  if (wgrad_scratch_.data()) return OkStatus();
  const auto& c = config_;
  const int64_t d = c.hidden_size, f = c.intermediate_size, hq = static_cast<int64_t>(c.num_heads) * c.head_dim();
  const int64_t budget = options_.weight_grad_chunk_elems > 0 ? options_.weight_grad_chunk_elems : kWeightGradChunkElems;
  // The most any weight's chunk takes (and d for a norm weight).
  int64_t need = d;
  for (auto [in, out] : {std::pair<int64_t, int64_t>{d, c.qkv_dim()}, {hq, d}, {d, 2 * f}, {f, d}})
    need = std::max(need, std::min(WeightGradChunkRows(in, budget), out) * in);
  ASSIGN_OR_RETURN(wgrad_scratch_, DeviceBuffer::Create(backend_, need));
  return OkStatus();
}

Status LlamaModel::ForwardTrunk(const DeviceBatch& b, UnitAccess& access, bool keep) {
  RETURN_IF_ERROR(CheckBatch(b));
  training_ = keep;  // only ForwardBackward keeps activations; adapter dropout follows it
  const int L = config_.num_layers;
  const int64_t n = b.rows();
  const bool lp = lowp_acts(), ac = options_.activation_checkpointing;
  if (moe_) moe_->ResetAux();
  {
    ASSIGN_OR_RETURN(const float* emb, access.AcquireParams(ParamLayout::kEmbedUnit));
    RETURN_IF_ERROR(Bind(&embed_w_, ParamLayout::kEmbedUnit, emb, access));
    float* e = lp ? scratch_d_.data() : resid_[0].data();
    const WeightRef table = embed_w_.mat(0);
    backend_->EmbeddingForward(b.tokens, n, table.data, table.dtype, static_cast<int>(config_.hidden_size), e);
    StoreResidual(0, e, n);
    RETURN_IF_ERROR(access.ReleaseParams(ParamLayout::kEmbedUnit));
  }
  for (int l = 0; l < L; ++l) {
    int unit = layout_.block_unit(l);
    ASSIGN_OR_RETURN(const float* w, access.AcquireParams(unit));
    UnitWeights& bw = WeightsFor(l);
    RETURN_IF_ERROR(Bind(&bw, unit, w, access));
    LayerActs& a = (keep && !ac && !lp) ? *acts_[l] : *acts_[0];
    if (lp && !ac) a.set = l;  // the working set stands in for layer l (QkvExtras keeps its own per layer)
    LowpActs* kept = (keep && lp && !ac) ? lowp_[l].get() : nullptr;
    float* out = lp ? scratch_d_.data() : resid_[l + 1].data();
    RETURN_IF_ERROR(BlockForward(l, bw, b, BlockInput(l, n), a, out, kept));
    StoreResidual(l + 1, out, n);
    RETURN_IF_ERROR(access.ReleaseParams(unit));
  }
  return OkStatus();
}

Status LlamaModel::Bind(UnitWeights* weights, int unit, const float* w, const UnitAccess& access) {
  const DType dt = access.ParamsDType(unit);
  const DType md = options_.matmul_dtype;
  if (dt != DType::kF32 && md != DType::kF32 && dt != md)
    return InvalidArgument(std::string("model: unit ") + std::to_string(unit) + " is handed out as " + DTypeName(dt) +
                           " but the GEMMs compute in " + DTypeName(md));
  weights->Bind(w, dt);
  return OkStatus();
}

StatusOr<WeightRef> LlamaModel::HeadForward(const DeviceBatch& b, UnitAccess& access) {
  const auto& c = config_;
  const int64_t n = b.rows(), d = c.hidden_size;
  int head = layout_.head_unit();
  ASSIGN_OR_RETURN(const float* hw, access.AcquireParams(head));
  RETURN_IF_ERROR(Bind(&head_w_, head, hw, access));
  WeightRef w_head;
  if (c.tie_word_embeddings) {
    ASSIGN_OR_RETURN(const float* emb, access.AcquireParams(ParamLayout::kEmbedUnit));
    RETURN_IF_ERROR(Bind(&embed_w_, ParamLayout::kEmbedUnit, emb, access));
    w_head = embed_w_.mat(0);
  } else {
    w_head = head_w_.mat(kLmHead);
  }
  backend_->RmsNormForward(BlockInput(c.num_layers, n), head_w_.vec(kFinalNorm), n, d,
                           static_cast<float>(c.rms_norm_eps), final_norm_.data(), final_rstd_.data());
  return w_head;
}

Status LlamaModel::ReleaseHead(UnitAccess& access) {
  RETURN_IF_ERROR(access.ReleaseParams(layout_.head_unit()));
  if (config_.tie_word_embeddings) RETURN_IF_ERROR(access.ReleaseParams(ParamLayout::kEmbedUnit));
  return OkStatus();
}

StatusOr<double> LlamaModel::ForwardBackward(const DeviceBatch& b, UnitAccess& access, float grad_scale) {
  if (!b.targets) return InvalidArgument("model: training micro-batch without targets");
  RETURN_IF_ERROR(ForwardTrunk(b, access, /*keep=*/true));
  return HeadAndBackward(b, access, grad_scale, nullptr);
}

StatusOr<double> LlamaModel::HeadAndBackward(const DeviceBatch& b, UnitAccess& access, float grad_scale,
                                             const SpanLoss* spans) {
  const int64_t n = b.rows(), d = config_.hidden_size;
  ASSIGN_OR_RETURN(const WeightRef w_head, HeadForward(b, access));
  // Span weights (ForwardBackwardSpans): each row's factor, decided from the
  // spans' losses before any gradient exists. The logits of a single chunk
  // are still in logits_ afterwards.
  std::vector<float> row_scale;
  bool have_logits = false;
  if (spans) {
    ASSIGN_OR_RETURN(row_scale, SpanRowScales(b, w_head, *spans));
    have_logits = chunk_rows_ >= n;
  }
  ASSIGN_OR_RETURN(const double loss,
                   HeadBackward(b, access, w_head, grad_scale, spans ? &row_scale : nullptr, have_logits));
  RETURN_IF_ERROR(BlocksBackward(b, access));
  if (lora_ != nullptr) return loss;  // LoRA: the embedding is frozen too

  // Embedding: a scatter-add, no parameters needed.
  ASSIGN_OR_RETURN(float* eg, access.GradBuffer(ParamLayout::kEmbedUnit));
  backend_->EmbeddingBackward(b.tokens, n, grad_a_.data(), static_cast<int>(d), eg);
  RETURN_IF_ERROR(access.GradsDone(ParamLayout::kEmbedUnit));
  return loss;
}

// Head, loss and head backward, loss_chunk_rows rows at a time so only one
// chunk's logits exist: logits = norm[chunk]·W^T, which CrossEntropy turns
// into dlogits in place (grad_scale already normalises over the global
// batch), then dX[chunk] = dlogits·W and dW += dlogits^T·norm[chunk]. With
// one chunk this is exactly the unchunked computation.
StatusOr<double> LlamaModel::HeadBackward(const DeviceBatch& b, UnitAccess& access, const WeightRef& w_head,
                                          float grad_scale, const std::vector<float>* row_scale, bool have_logits) {
  const auto& c = config_;
  const int64_t n = b.rows(), d = c.hidden_size, vocab = c.vocab_size;
  const int head = layout_.head_unit();
  const bool frozen = lora_ != nullptr;  // LoRA: no base gradients anywhere
  double loss = 0;
  // Nested: already held (and bound to head_w_) by HeadForward.
  RETURN_IF_ERROR(access.AcquireParams(head).status());
  const auto& ht = layout_.units[head].tensors;
  float* hg = nullptr;
  float* g_head = nullptr;
  if (!frozen) {
    ASSIGN_OR_RETURN(hg, access.GradBuffer(head));
    if (c.tie_word_embeddings) {
      ASSIGN_OR_RETURN(g_head, access.GradBuffer(ParamLayout::kEmbedUnit));  // W_head is the embedding table
    } else {
      g_head = hg + ht[kLmHead].offset;
    }
  }
  for (int64_t r0 = 0; r0 < n; r0 += chunk_rows_) {
    const int64_t m = std::min(chunk_rows_, n - r0);
    const float* xn = final_norm_.data() + r0 * d;
    if (!have_logits) LinearForward(backend_, options_.matmul_dtype, xn, w_head, m, d, vocab, logits_.data());
    if (!row_scale) {
      loss += backend_->CrossEntropy(logits_.data(), b.targets + r0, m, static_cast<int>(vocab), grad_scale,
                                     /*grad=*/true);
    } else {
      // One call per run of rows sharing a factor (a reply, or the rows between).
      for (int64_t i = 0; i < m;) {
        int64_t j = i + 1;
        while (j < m && (*row_scale)[r0 + j] == (*row_scale)[r0 + i]) ++j;
        loss += backend_->CrossEntropy(logits_.data() + i * vocab, b.targets + r0 + i, j - i,
                                       static_cast<int>(vocab), (*row_scale)[r0 + i], /*grad=*/true);
        i = j;
      }
    }
    LinearBackward(backend_, options_.matmul_dtype, xn, w_head, logits_.data(), m, d, vocab,
                   scratch_d_.data() + r0 * d, g_head);
  }
  backend_->RmsNormBackward(scratch_d_.data(), BlockInput(c.num_layers, n), head_w_.vec(kFinalNorm),
                            final_rstd_.data(), n, static_cast<int>(d), grad_a_.data(),
                            frozen ? frozen_norm_dw_.data() : hg + ht[kFinalNorm].offset);
  if (!frozen) RETURN_IF_ERROR(access.GradsDone(head));
  RETURN_IF_ERROR(access.ReleaseParams(head));  // the nested acquisition
  RETURN_IF_ERROR(ReleaseHead(access));         // HeadForward's
  return loss;
}

// The blocks' backward, last to first, from grad_a_ (the final norm's input
// gradient) down to the embedding output's.
Status LlamaModel::BlocksBackward(const DeviceBatch& b, UnitAccess& access) {
  const int64_t n = b.rows();
  const bool frozen = lora_ != nullptr;
  if (moe_) moe_->StopCounting();  // the aux loss counted the forward; recomputes do not count
  for (int l = config_.num_layers - 1; l >= 0; --l) {
    int unit = layout_.block_unit(l);
    ASSIGN_OR_RETURN(const float* w, access.AcquireParams(unit));
    UnitWeights& bw = WeightsFor(l);
    RETURN_IF_ERROR(Bind(&bw, unit, w, access));
    WeightGrads g;
    if (frozen) {
    } else if (extras_->active() || config_.sparse_layer(l)) {  // extras and experts add their gradients in fp32
      ASSIGN_OR_RETURN(g.f32, access.GradBuffer(unit));
    } else {
      ASSIGN_OR_RETURN(void* buf, access.GradBufferStoreOnce(unit, &g.dt));
      if (g.dt == DType::kF32) {
        g.f32 = static_cast<float*>(buf);
      } else {
        g.lp = buf;
      }
      if (g.lp) RETURN_IF_ERROR(EnsureWeightGradScratch());
    }
    const bool ac = options_.activation_checkpointing, lp = lowp_acts();
    LayerActs* a = acts_[(ac || lp) ? 0 : l].get();
    const float* x = BlockInput(l, n);
    if (ac) {
      // Recompute this block's activations (rounded as the forward rounded
      // them); its output is not needed again.
      RETURN_IF_ERROR(BlockForward(l, bw, b, x, *a, scratch_d_.data()));
    } else if (lp) {
      a->set = l;
      Restore(*lowp_[l], *a, n);
    }
    RETURN_IF_ERROR(BlockBackward(l, bw, g, b, x, *a, grad_a_.data(), grad_a_.data()));
    if (!frozen) RETURN_IF_ERROR(access.GradsDone(unit));
    RETURN_IF_ERROR(access.ReleaseParams(unit));
  }
  return OkStatus();
}

StatusOr<double> LlamaModel::ForwardLoss(const DeviceBatch& b, UnitAccess& access) {
  if (!b.targets) return InvalidArgument("model: evaluation micro-batch without targets");
  RETURN_IF_ERROR(ForwardTrunk(b, access, /*keep=*/false));
  ASSIGN_OR_RETURN(const WeightRef w_head, HeadForward(b, access));
  const int64_t n = b.rows(), d = config_.hidden_size, vocab = config_.vocab_size;
  double loss = 0;
  for (int64_t r0 = 0; r0 < n; r0 += chunk_rows_) {
    const int64_t m = std::min(chunk_rows_, n - r0);
    LinearForward(backend_, options_.matmul_dtype, final_norm_.data() + r0 * d, w_head, m, d, vocab, logits_.data());
    loss += backend_->CrossEntropy(logits_.data(), b.targets + r0, m, static_cast<int>(vocab), 1.0f,
                                   /*grad=*/false);
  }
  RETURN_IF_ERROR(ReleaseHead(access));
  return loss;
}

StatusOr<const float*> LlamaModel::ForwardLogits(const DeviceBatch& b, UnitAccess& access,
                                                 const std::vector<int64_t>& rows) {
  const int64_t k = static_cast<int64_t>(rows.size()), d = config_.hidden_size;
  if (k == 0 || k > logits_rows_)
    return InvalidArgument("model: ForwardLogits wants 1.." + std::to_string(logits_rows_) + " rows, got " +
                           std::to_string(k));
  for (int64_t r : rows)
    if (r < 0 || r >= b.rows())
      return InvalidArgument("model: ForwardLogits row " + std::to_string(r) + " is outside the micro-batch of " +
                             std::to_string(b.rows()) + " rows");
  RETURN_IF_ERROR(ForwardTrunk(b, access, /*keep=*/false));
  ASSIGN_OR_RETURN(const WeightRef w_head, HeadForward(b, access));
  // Gather the wanted rows of the final norm (scratch_d_ holds max_rows >= k rows), one GEMM.
  for (int64_t i = 0; i < k; ++i)
    backend_->Copy(scratch_d_.data() + i * d, final_norm_.data() + rows[i] * d, d * sizeof(float));
  LinearForward(backend_, options_.matmul_dtype, scratch_d_.data(), w_head, k, d, config_.vocab_size, logits_.data());
  RETURN_IF_ERROR(ReleaseHead(access));
  return static_cast<const float*>(logits_.data());
}

Status LlamaModel::SetLora(const LoraBinding* lora) {
  lora_ = nullptr;
  if (!lora) return OkStatus();
  const LoraLayout& l = lora->layout;
  for (int i = 0; i < config_.num_layers; ++i)
    if (l.sparse_layer(i) != config_.sparse_layer(i))
      return InvalidArgument("model: LoRA binding's layout takes layer " + std::to_string(i) + " as " +
                             (l.sparse_layer(i) ? "sparse" : "dense") + ", the model does not");
  if (l.num_layers != config_.num_layers || static_cast<int>(lora->params.size()) != config_.num_layers ||
      static_cast<int>(lora->grads.size()) != config_.num_layers)
    return InvalidArgument("model: LoRA binding has " + std::to_string(l.num_layers) + " layers (" +
                           std::to_string(lora->params.size()) + " buffers), the model " +
                           std::to_string(config_.num_layers));
  if (l.r < 1 || (l.tensors.empty() && l.experts.empty()))
    return InvalidArgument("model: LoRA binding without adapters");
  if (config_.moe.has_shared_expert() && !l.experts.empty())
    return Unimplemented(std::string("model: LoRA on ") + config_.family_name() +
                         "'s MLP projections is not supported yet (PEFT's suffix match would adapt the shared "
                         "expert too, which is not built): target the attention only (q_proj, k_proj, v_proj, o_proj)");
  for (const LoraTensor& t : l.tensors) {
    int64_t in = 0, out = 0;
    LoraTargetDims(config_, t.target, &in, &out);
    if (t.in != in || t.out != out)
      return InvalidArgument(std::string("model: LoRA adapter ") + LoraTargetName(t.target) + " is " +
                             std::to_string(t.out) + "x" + std::to_string(t.in) + ", the model's linear " +
                             std::to_string(out) + "x" + std::to_string(in));
  }
  if (!(lora->dropout >= 0 && lora->dropout < 1)) return InvalidArgument("model: LoRA dropout must be in [0, 1)");
  ASSIGN_OR_RETURN(lora_scratch_, LoraScratch::Create(backend_, l, max_rows_, lora->dropout > 0));
  lora_t_.clear();
  const int sets = options_.activation_checkpointing ? 1 : config_.num_layers;
  for (int i = 0; i < sets * static_cast<int>(l.tensors.size()); ++i) {
    ASSIGN_OR_RETURN(DeviceBuffer t, DeviceBuffer::Create(backend_, max_rows_ * l.r));
    lora_t_.push_back(std::move(t));
  }
  if (frozen_norm_dw_.size() < config_.hidden_size) {
    ASSIGN_OR_RETURN(frozen_norm_dw_, DeviceBuffer::Create(backend_, config_.hidden_size));
  }
  lora_ = lora;
  return OkStatus();
}

bool LlamaModel::LoraCallFor(int layer, LoraTarget target, LoraCall* c) const {
  if (!lora_) return false;
  const int i = lora_->layout.Find(target);
  if (i < 0) return false;
  c->tensor = &lora_->layout.tensors[i];
  c->r = lora_->layout.r;
  c->adapter = lora_->params[layer];
  c->adapter_grad = lora_->grads[layer];
  c->scale = lora_->scale;
  c->dropout = training_ ? lora_->dropout : 0.0f;
  c->seed = LoraDropoutSeed(lora_->dropout_seed, layer, target);
  c->compute = options_.matmul_dtype;
  const int set = options_.activation_checkpointing ? 0 : layer;
  c->saved_t = lora_t_[set * lora_->layout.tensors.size() + i].data();
  return true;
}

bool LlamaModel::MoeLoraFor(int layer, MoeLora* m) {
  if (!lora_ || lora_->layout.experts.empty()) return false;
  *m = MoeLora{&lora_->layout, lora_->params[layer], lora_->grads[layer], lora_->scale,
               training_ ? lora_->dropout : 0.0f, lora_->dropout_seed, &lora_scratch_};
  return true;
}

void LlamaModel::LoraAdd(int layer, LoraTarget target, const float* x, int64_t n, float* y) {
  LoraCall c;
  if (LoraCallFor(layer, target, &c)) LoraForward(backend_, c, x, n, y, lora_scratch_);
}

void LlamaModel::LoraGrad(int layer, LoraTarget target, const float* x, const float* dy, int64_t n, float* dx) {
  LoraCall c;
  if (LoraCallFor(layer, target, &c)) LoraBackward(backend_, c, x, dy, n, dx, lora_scratch_);
}

}  // namespace shard
