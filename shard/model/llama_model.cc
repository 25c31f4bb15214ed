#include "shard/model/llama_model.h"

#include "shard/model/rope.h"

namespace shard {

// One block's saved activations (shapes for rows = max_rows).
struct LlamaModel::LayerActs {
  DeviceBuffer xn1, rstd1, qkv, attn, lse, x_mid, xn2, rstd2, gu, h;
};

namespace {

// y[N,out] (+)= x[N,in] · W[out,in]^T
void LinearForward(Backend* be, const float* x, const float* w, int64_t n, int64_t in, int64_t out, float* y,
                   float beta = 0.0f) {
  GemmArgs g;
  g.trans_b = true;
  g.m = n, g.n = out, g.k = in;
  g.a = x, g.lda = in;
  g.b = w, g.ldb = in;
  g.beta = beta;
  g.c = y, g.ldc = out;
  be->Gemm(g);
}

// dx[N,in] = dy[N,out] · W[out,in];  dW[out,in] += dy^T · x
void LinearBackward(Backend* be, const float* x, const float* w, const float* dy, int64_t n, int64_t in,
                    int64_t out, float* dx, float* dw) {
  GemmArgs g;
  g.m = n, g.n = in, g.k = out;
  g.a = dy, g.lda = out;
  g.b = w, g.ldb = in;
  g.c = dx, g.ldc = in;
  be->Gemm(g);
  GemmArgs gw;
  gw.trans_a = true;
  gw.m = out, gw.n = in, gw.k = n;
  gw.a = dy, gw.lda = out;
  gw.b = x, gw.ldb = in;
  gw.beta = 1.0f;
  gw.c = dw, gw.ldc = in;
  be->Gemm(gw);
}

}  // namespace

LlamaModel::LlamaModel(const LlamaConfig& config, Backend* backend, const ModelOptions& options)
    : config_(config), layout_(ParamLayout::ForLlama(config)), backend_(backend), options_(options) {}

LlamaModel::~LlamaModel() = default;

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const LlamaConfig& config, Backend* backend,
                                                         const ModelOptions& options) {
  RETURN_IF_ERROR(config.Validate());
  if (options.max_batch <= 0 || options.max_seq <= 0)
    return InvalidArgument("model: micro-batch size and sequence length must be > 0");
  std::unique_ptr<LlamaModel> m(new LlamaModel(config, backend, options));
  RETURN_IF_ERROR(m->Allocate());
  return m;
}

Status LlamaModel::Allocate() {
  const auto& c = config_;
  max_rows_ = options_.max_batch * options_.max_seq;
  const int64_t n = max_rows_, d = c.hidden_size, f = c.intermediate_size;
  const int64_t hq = static_cast<int64_t>(c.num_heads) * c.head_dim();
  auto make = [&](DeviceBuffer* buf, int64_t count) -> Status {
    ASSIGN_OR_RETURN(*buf, DeviceBuffer::Create(backend_, count));
    return OkStatus();
  };
  resid_.resize(c.num_layers + 1);
  for (auto& r : resid_) RETURN_IF_ERROR(make(&r, n * d));
  int sets = options_.activation_checkpointing ? 1 : c.num_layers;
  for (int i = 0; i < sets; ++i) {
    auto a = std::make_unique<LayerActs>();
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
  RETURN_IF_ERROR(make(&final_norm_, n * d));
  RETURN_IF_ERROR(make(&final_rstd_, n));
  RETURN_IF_ERROR(make(&logits_, n * c.vocab_size));
  RETURN_IF_ERROR(make(&grad_a_, n * d));
  RETURN_IF_ERROR(make(&grad_b_, n * d));
  RETURN_IF_ERROR(make(&scratch_d_, n * d));
  RETURN_IF_ERROR(make(&scratch_ffn_, n * f));
  RETURN_IF_ERROR(make(&scratch_attn_, n * hq));
  RETURN_IF_ERROR(make(&scratch_qkv_, n * c.qkv_dim()));
  RETURN_IF_ERROR(make(&scratch_gu_, n * 2 * f));
  std::vector<float> table = RopeCosSinTable(c, options_.max_seq);
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

void LlamaModel::BlockForward(const float* w, const DeviceBatch& b, const float* x, LayerActs& a, float* out) {
  const auto& c = config_;
  const auto& t = layout_.units[1].tensors;  // block offsets are the same for every layer
  const int64_t n = b.rows(), d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim();
  const int64_t hq = static_cast<int64_t>(c.num_heads) * hd, qkv = c.qkv_dim();
  const float eps = static_cast<float>(c.rms_norm_eps);
  AttentionShape shape{b.batch, b.seq, c.num_heads, c.num_kv_heads, c.head_dim()};

  backend_->RmsNormForward(x, w + t[kInputNorm].offset, n, d, eps, a.xn1.data(), a.rstd1.data());
  LinearForward(backend_, a.xn1.data(), w + t[kQ].offset, n, d, qkv, a.qkv.data());
  backend_->Rope(a.qkv.data(), n, qkv, c.num_heads + c.num_kv_heads, c.head_dim(), b.positions,
                 rope_table_.data(), /*inverse=*/false);
  backend_->AttentionForward(shape, a.qkv.data(), b.segment_ids, a.attn.data(), a.lse.data());
  backend_->Copy(a.x_mid.data(), x, n * d * sizeof(float));
  LinearForward(backend_, a.attn.data(), w + t[kO].offset, n, hq, d, a.x_mid.data(), /*beta=*/1.0f);
  backend_->RmsNormForward(a.x_mid.data(), w + t[kPostNorm].offset, n, d, eps, a.xn2.data(), a.rstd2.data());
  LinearForward(backend_, a.xn2.data(), w + t[kGate].offset, n, d, 2 * f, a.gu.data());
  backend_->SwiGluForward(a.gu.data(), n, static_cast<int>(f), a.h.data());
  backend_->Copy(out, a.x_mid.data(), n * d * sizeof(float));
  LinearForward(backend_, a.h.data(), w + t[kDown].offset, n, f, d, out, /*beta=*/1.0f);
}

void LlamaModel::BlockBackward(const float* w, float* dw, const DeviceBatch& b, const float* x, LayerActs& a,
                               const float* dy, float* dx) {
  const auto& c = config_;
  const auto& t = layout_.units[1].tensors;
  const int64_t n = b.rows(), d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim();
  const int64_t hq = static_cast<int64_t>(c.num_heads) * hd, qkv = c.qkv_dim();
  AttentionShape shape{b.batch, b.seq, c.num_heads, c.num_kv_heads, c.head_dim()};
  float* dh = scratch_ffn_.data();
  float* dgu = scratch_gu_.data();
  float* dxn = scratch_d_.data();
  float* dmid = grad_b_.data();

  // MLP branch: out = x_mid + down(swiglu(gate_up(norm(x_mid)))).
  LinearBackward(backend_, a.h.data(), w + t[kDown].offset, dy, n, f, d, dh, dw + t[kDown].offset);
  backend_->SwiGluBackward(dh, a.gu.data(), n, static_cast<int>(f), dgu);
  LinearBackward(backend_, a.xn2.data(), w + t[kGate].offset, dgu, n, d, 2 * f, dxn, dw + t[kGate].offset);
  backend_->RmsNormBackward(dxn, a.x_mid.data(), w + t[kPostNorm].offset, a.rstd2.data(), n, d, dmid,
                            dw + t[kPostNorm].offset);
  backend_->Add(dmid, dy, dmid, n * d);

  // Attention branch: x_mid = x + o(attn(rope(qkv(norm(x))))).
  float* dattn = scratch_attn_.data();
  float* dqkv = scratch_qkv_.data();
  LinearBackward(backend_, a.attn.data(), w + t[kO].offset, dmid, n, hq, d, dattn, dw + t[kO].offset);
  backend_->AttentionBackward(shape, a.qkv.data(), b.segment_ids, a.attn.data(), a.lse.data(), dattn, dqkv);
  backend_->Rope(dqkv, n, qkv, c.num_heads + c.num_kv_heads, c.head_dim(), b.positions, rope_table_.data(),
                 /*inverse=*/true);
  LinearBackward(backend_, a.xn1.data(), w + t[kQ].offset, dqkv, n, d, qkv, dxn, dw + t[kQ].offset);
  backend_->RmsNormBackward(dxn, x, w + t[kInputNorm].offset, a.rstd1.data(), n, d, dx,
                            dw + t[kInputNorm].offset);
  backend_->Add(dx, dmid, dx, n * d);
}

Status LlamaModel::ForwardTrunk(const DeviceBatch& b, UnitAccess& access, bool keep) {
  RETURN_IF_ERROR(CheckBatch(b));
  const int L = config_.num_layers;
  {
    ASSIGN_OR_RETURN(const float* emb, access.AcquireParams(ParamLayout::kEmbedUnit));
    backend_->EmbeddingForward(b.tokens, b.rows(), emb, static_cast<int>(config_.hidden_size), resid_[0].data());
    RETURN_IF_ERROR(access.ReleaseParams(ParamLayout::kEmbedUnit));
  }
  for (int l = 0; l < L; ++l) {
    int unit = layout_.block_unit(l);
    ASSIGN_OR_RETURN(const float* w, access.AcquireParams(unit));
    LayerActs& a = (keep && !options_.activation_checkpointing) ? *acts_[l] : *acts_[0];
    BlockForward(w, b, resid_[l].data(), a, resid_[l + 1].data());
    RETURN_IF_ERROR(access.ReleaseParams(unit));
  }
  return OkStatus();
}

Status LlamaModel::HeadForward(const DeviceBatch& b, UnitAccess& access) {
  const auto& c = config_;
  const int64_t n = b.rows(), d = c.hidden_size;
  int head = layout_.head_unit();
  ASSIGN_OR_RETURN(const float* hw, access.AcquireParams(head));
  const float* w_head = nullptr;
  if (c.tie_word_embeddings) {
    ASSIGN_OR_RETURN(w_head, access.AcquireParams(ParamLayout::kEmbedUnit));
  } else {
    w_head = hw + layout_.units[head].tensors[kLmHead].offset;
  }
  backend_->RmsNormForward(resid_[c.num_layers].data(), hw + layout_.units[head].tensors[kFinalNorm].offset, n,
                           d, static_cast<float>(c.rms_norm_eps), final_norm_.data(), final_rstd_.data());
  LinearForward(backend_, final_norm_.data(), w_head, n, d, c.vocab_size, logits_.data());
  return OkStatus();
}

StatusOr<double> LlamaModel::ForwardBackward(const DeviceBatch& b, UnitAccess& access, float grad_scale) {
  if (!b.targets) return InvalidArgument("model: training micro-batch without targets");
  const auto& c = config_;
  const int L = c.num_layers;
  const int64_t n = b.rows(), d = c.hidden_size;
  const int head = layout_.head_unit();
  const bool tied = c.tie_word_embeddings;
  RETURN_IF_ERROR(ForwardTrunk(b, access, /*keep=*/true));
  RETURN_IF_ERROR(HeadForward(b, access));

  // Loss and its gradient (logits_ becomes dlogits).
  double loss = backend_->CrossEntropy(logits_.data(), b.targets, n, static_cast<int>(c.vocab_size), grad_scale,
                                       /*grad=*/true);

  // Head backward.
  {
    ASSIGN_OR_RETURN(const float* hw, access.AcquireParams(head));  // nested: already held by HeadForward
    ASSIGN_OR_RETURN(float* hg, access.GradBuffer(head));
    const auto& ht = layout_.units[head].tensors;
    const float* w_head;
    float* g_head;
    if (tied) {
      ASSIGN_OR_RETURN(w_head, access.AcquireParams(ParamLayout::kEmbedUnit));
      ASSIGN_OR_RETURN(g_head, access.GradBuffer(ParamLayout::kEmbedUnit));
    } else {
      w_head = hw + ht[kLmHead].offset;
      g_head = hg + ht[kLmHead].offset;
    }
    LinearBackward(backend_, final_norm_.data(), w_head, logits_.data(), n, d, c.vocab_size, scratch_d_.data(),
                   g_head);
    backend_->RmsNormBackward(scratch_d_.data(), resid_[L].data(), hw + ht[kFinalNorm].offset,
                              final_rstd_.data(), n, static_cast<int>(d), grad_a_.data(), hg + ht[kFinalNorm].offset);
    RETURN_IF_ERROR(access.GradsDone(head));
    // Release the nested acquisitions and the ones from HeadForward.
    for (int i = 0; i < 2; ++i) {
      RETURN_IF_ERROR(access.ReleaseParams(head));
      if (tied) RETURN_IF_ERROR(access.ReleaseParams(ParamLayout::kEmbedUnit));
    }
  }

  // Blocks, last to first.
  for (int l = L - 1; l >= 0; --l) {
    int unit = layout_.block_unit(l);
    ASSIGN_OR_RETURN(const float* w, access.AcquireParams(unit));
    ASSIGN_OR_RETURN(float* g, access.GradBuffer(unit));
    LayerActs* a = acts_[options_.activation_checkpointing ? 0 : l].get();
    if (options_.activation_checkpointing) {
      // Recompute this block's activations; its output is not needed again.
      BlockForward(w, b, resid_[l].data(), *a, scratch_d_.data());
    }
    BlockBackward(w, g, b, resid_[l].data(), *a, grad_a_.data(), grad_a_.data());
    RETURN_IF_ERROR(access.GradsDone(unit));
    RETURN_IF_ERROR(access.ReleaseParams(unit));
  }

  // Embedding: a scatter-add, no parameters needed.
  ASSIGN_OR_RETURN(float* eg, access.GradBuffer(ParamLayout::kEmbedUnit));
  backend_->EmbeddingBackward(b.tokens, n, grad_a_.data(), static_cast<int>(d), eg);
  RETURN_IF_ERROR(access.GradsDone(ParamLayout::kEmbedUnit));
  return loss;
}

StatusOr<double> LlamaModel::ForwardLoss(const DeviceBatch& b, UnitAccess& access) {
  if (!b.targets) return InvalidArgument("model: evaluation micro-batch without targets");
  ASSIGN_OR_RETURN(const float* logits, ForwardLogits(b, access));
  (void)logits;
  return backend_->CrossEntropy(logits_.data(), b.targets, b.rows(), static_cast<int>(config_.vocab_size), 1.0f,
                                /*grad=*/false);
}

StatusOr<const float*> LlamaModel::ForwardLogits(const DeviceBatch& b, UnitAccess& access) {
  RETURN_IF_ERROR(ForwardTrunk(b, access, /*keep=*/false));
  RETURN_IF_ERROR(HeadForward(b, access));
  RETURN_IF_ERROR(access.ReleaseParams(layout_.head_unit()));
  if (config_.tie_word_embeddings) RETURN_IF_ERROR(access.ReleaseParams(ParamLayout::kEmbedUnit));
  return static_cast<const float*>(logits_.data());
}

}  // namespace shard
