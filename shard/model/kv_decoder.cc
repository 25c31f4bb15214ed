#include "shard/model/kv_decoder.h"

#include <algorithm>
#include <cmath>

#include "shard/model/moe_mlp.h"
#include "shard/model/qkv_extras.h"
#include "shard/model/rope.h"

namespace shard {
namespace {

// Generation has no mixed precision: fp32 GEMMs on the weights as handed out
// (the fp32 ones LoadModelForInference holds; a two-byte unit is widened
// exactly).
void Linear(Backend* be, const float* x, WeightRef w, int64_t n, int64_t in, int64_t out, float* y,
            float beta = 0.0f) {
  LinearForward(be, DType::kF32, x, w, n, in, out, y, beta);
}

}  // namespace

KvDecoder::KvDecoder(const LlamaConfig& config, Backend* backend, int64_t max_len, int64_t max_chunk)
    : config_(config), layout_(ParamLayout::ForLlama(config)), backend_(backend), max_len_(max_len),
      max_chunk_(max_chunk) {}

KvDecoder::~KvDecoder() = default;

StatusOr<std::unique_ptr<KvDecoder>> KvDecoder::Create(const LlamaConfig& config, Backend* backend, int64_t max_len,
                                                       int64_t max_chunk) {
  RETURN_IF_ERROR(config.Validate());
  if (max_len <= 0 || max_chunk <= 0) return InvalidArgument("decoder: max_len and max_chunk must be > 0");
  if (max_len > config.max_position_embeddings)
    return InvalidArgument("decoder: " + std::to_string(max_len) + " tokens exceed the model's max_position_embeddings " +
                           std::to_string(config.max_position_embeddings));
  RETURN_IF_ERROR(config.CheckSequenceLength(max_len, "decoder: prompt + new tokens ="));
  std::unique_ptr<KvDecoder> d(new KvDecoder(config, backend, max_len, std::min(max_chunk, max_len)));
  RETURN_IF_ERROR(d->Allocate());
  return d;
}

Status KvDecoder::Allocate() {
  const auto& c = config_;
  // Dense-MLP buffers; a model whose every layer is sparse (mixtral) needs none (as LlamaModel).
  const int64_t n = max_chunk_, d = c.hidden_size, hd = c.head_dim();
  const int64_t f = c.num_sparse_layers() == c.num_layers ? 1 : c.intermediate_size;
  const int64_t kv = static_cast<int64_t>(c.num_kv_heads) * hd, hq = static_cast<int64_t>(c.num_heads) * hd;
  auto make = [&](DeviceBuffer* buf, int64_t count) -> Status {
    ASSIGN_OR_RETURN(*buf, DeviceBuffer::Create(backend_, count));
    return OkStatus();
  };
  k_cache_.resize(c.num_layers);
  v_cache_.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    RETURN_IF_ERROR(make(&k_cache_[l], max_len_ * kv));
    RETURN_IF_ERROR(make(&v_cache_[l], max_len_ * kv));
  }
  RETURN_IF_ERROR(make(&x_, n * d));
  RETURN_IF_ERROR(make(&xn_, n * d));
  RETURN_IF_ERROR(make(&rstd_, n));
  RETURN_IF_ERROR(make(&qkv_, n * c.qkv_dim()));
  RETURN_IF_ERROR(make(&attn_, n * hq));
  RETURN_IF_ERROR(make(&gu_, n * 2 * f));
  RETURN_IF_ERROR(make(&h_, n * f));
  RETURN_IF_ERROR(make(&scores_, c.num_heads * n * max_len_));
  RETURN_IF_ERROR(make(&logits_, c.vocab_size));
  RETURN_IF_ERROR(make(&tokens_, n));
  RETURN_IF_ERROR(make(&positions_, n));
  ASSIGN_OR_RETURN(extras_, QkvExtras::Create(c, layout_, backend_, n, /*sets=*/1));
  ASSIGN_OR_RETURN(embed_w_, UnitWeights::Create(backend_, layout_.units[ParamLayout::kEmbedUnit]));
  // Every dense block has one layout, every sparse block (MoE) another.
  int dense = -1, sparse = -1;
  for (int l = c.num_layers - 1; l >= 0; --l) (c.sparse_layer(l) ? sparse : dense) = l;
  if (dense >= 0) {
    ASSIGN_OR_RETURN(block_w_, UnitWeights::Create(backend_, layout_.units[layout_.block_unit(dense)]));
  }
  if (sparse >= 0) {
    ASSIGN_OR_RETURN(moe_w_, UnitWeights::Create(backend_, layout_.units[layout_.block_unit(sparse)]));
    // fp32 like the rest of generation; one saved set, reused by every layer.
    ASSIGN_OR_RETURN(moe_, MoeMlp::Create(c, backend_, n, /*sets=*/1, DType::kF32, DType::kF32));
    moe_->StopCounting();  // no aux loss when generating
  }
  ASSIGN_OR_RETURN(head_w_, UnitWeights::Create(backend_, layout_.units[layout_.head_unit()]));
  std::vector<float> table = RopeCosSinTable(c, max_len_);
  RETURN_IF_ERROR(make(&rope_table_, static_cast<int64_t>(table.size())));
  backend_->CopyToDevice(rope_table_.data(), table.data(), table.size() * sizeof(float));
  host_scores_.resize(static_cast<size_t>(c.num_heads * n * max_len_));
  return OkStatus();
}

void KvDecoder::Attention(int layer, int64_t n) {
  const auto& c = config_;
  const int64_t hd = c.head_dim(), H = c.num_heads, group = c.num_heads / c.num_kv_heads;
  const int64_t kv = static_cast<int64_t>(c.num_kv_heads) * hd, T = length_ + n;
  float* s = scores_.data();
  for (int64_t h = 0; h < H; ++h) {  // S_h[n, T] = q_h · K_g^T / sqrt(hd)
    GemmArgs g;
    g.trans_b = true;
    g.m = n, g.n = T, g.k = hd;
    g.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    g.a = qkv_.data() + h * hd, g.lda = c.qkv_dim();
    g.b = k_cache_[layer].data() + (h / group) * hd, g.ldb = kv;
    g.c = s + h * n * T, g.ldc = T;
    backend_->Gemm(g);
  }
  score_entries_ += H * n * T;
  // Causal softmax on the host: new row i sits at position length_ + i.
  const size_t count = static_cast<size_t>(H * n * T);
  backend_->CopyToHost(host_scores_.data(), s, count * sizeof(float));
  for (int64_t r = 0; r < H * n; ++r) {
    float* row = host_scores_.data() + r * T;
    const int64_t visible = length_ + (r % n) + 1;
    const float mx = *std::max_element(row, row + visible);
    double sum = 0;
    for (int64_t j = 0; j < visible; ++j) sum += (row[j] = std::exp(row[j] - mx));
    for (int64_t j = 0; j < visible; ++j) row[j] = static_cast<float>(row[j] / sum);
    std::fill(row + visible, row + T, 0.0f);
  }
  backend_->CopyToDevice(s, host_scores_.data(), count * sizeof(float));
  for (int64_t h = 0; h < H; ++h) {  // out_h[n, hd] = P_h[n, T] · V_g[T, hd]
    GemmArgs g;
    g.m = n, g.n = hd, g.k = T;
    g.a = s + h * n * T, g.lda = T;
    g.b = v_cache_[layer].data() + (h / group) * hd, g.ldb = kv;
    g.c = attn_.data() + h * hd, g.ldc = H * hd;
    backend_->Gemm(g);
  }
}

Status KvDecoder::Block(const UnitWeights& w, int layer, int64_t n) {
  const auto& c = config_;
  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim(), qkv = c.qkv_dim();
  const int64_t hq = static_cast<int64_t>(c.num_heads) * hd, kv = static_cast<int64_t>(c.num_kv_heads) * hd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  backend_->RmsNormForward(x_.data(), w.vec(kInputNorm), n, static_cast<int>(d), eps, xn_.data(), rstd_.data());
  Linear(backend_, xn_.data(), w.mat(kQ), n, d, qkv, qkv_.data());
  extras_->Forward(w, 0, n, qkv_.data());
  backend_->Rope(qkv_.data(), n, qkv, c.num_heads + c.num_kv_heads, static_cast<int>(hd), positions_.as_int(),
                 rope_table_.data(), /*inverse=*/false);
  // Append the new rows' keys and values to this layer's cache.
  const size_t row = kv * sizeof(float), fused = qkv * sizeof(float);
  backend_->Copy2D(k_cache_[layer].data() + length_ * kv, row, qkv_.data() + hq, fused, row, n);
  backend_->Copy2D(v_cache_[layer].data() + length_ * kv, row, qkv_.data() + hq + kv, fused, row, n);
  Attention(layer, n);
  Linear(backend_, attn_.data(), w.mat(kO), n, hq, d, x_.data(), /*beta=*/1.0f);
  backend_->RmsNormForward(x_.data(), w.vec(kPostNorm), n, static_cast<int>(d), eps, xn_.data(), rstd_.data());
  if (c.sparse_layer(layer))  // x += MoE(xn): the router's top-k experts, as in training
    return moe_->Forward(w, /*set=*/0, layer, xn_.data(), n, /*real=*/nullptr, x_.data());
  Linear(backend_, xn_.data(), w.mat(kGate), n, d, 2 * f, gu_.data());
  backend_->SwiGluForward(gu_.data(), n, static_cast<int>(f), h_.data());
  Linear(backend_, h_.data(), w.mat(kDown), n, f, d, x_.data(), /*beta=*/1.0f);
  return OkStatus();
}

StatusOr<std::vector<float>> KvDecoder::Append(std::span<const int32_t> tokens, UnitAccess& access) {
  if (tokens.empty()) return InvalidArgument("decoder: no tokens to append");
  if (length_ + static_cast<int64_t>(tokens.size()) > max_len_)
    return OutOfRange("decoder: " + std::to_string(length_ + tokens.size()) + " tokens exceed the " +
                      std::to_string(max_len_) + " it was created for");
  for (int32_t tok : tokens)
    if (tok < 0 || tok >= config_.vocab_size)
      return InvalidArgument("decoder: token " + std::to_string(tok) + " is outside the vocabulary of " +
                             std::to_string(config_.vocab_size));
  const auto& c = config_;
  const int64_t d = c.hidden_size;
  int64_t n = 0;
  for (size_t begin = 0; begin < tokens.size(); begin += n) {
    n = std::min<int64_t>(max_chunk_, static_cast<int64_t>(tokens.size() - begin));
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(length_ + i);
    backend_->CopyToDevice(tokens_.data(), tokens.data() + begin, n * sizeof(int32_t));
    backend_->CopyToDevice(positions_.data(), pos.data(), n * sizeof(int32_t));
    {
      ASSIGN_OR_RETURN(const float* emb, access.AcquireParams(ParamLayout::kEmbedUnit));
      embed_w_.Bind(emb, access.ParamsDType(ParamLayout::kEmbedUnit));
      const WeightRef table = embed_w_.mat(0);
      backend_->EmbeddingForward(tokens_.as_int(), n, table.data, table.dtype, static_cast<int>(d), x_.data());
      RETURN_IF_ERROR(access.ReleaseParams(ParamLayout::kEmbedUnit));
    }
    for (int l = 0; l < c.num_layers; ++l) {
      const int unit = layout_.block_unit(l);
      ASSIGN_OR_RETURN(const float* w, access.AcquireParams(unit));
      UnitWeights& bw = c.sparse_layer(l) ? moe_w_ : block_w_;
      bw.Bind(w, access.ParamsDType(unit));
      RETURN_IF_ERROR(Block(bw, l, n));
      RETURN_IF_ERROR(access.ReleaseParams(unit));
    }
    length_ += n;
  }
  // The head on the last row only.
  const int head = layout_.head_unit();
  ASSIGN_OR_RETURN(const float* hw, access.AcquireParams(head));
  head_w_.Bind(hw, access.ParamsDType(head));
  backend_->RmsNormForward(x_.data() + (n - 1) * d, head_w_.vec(kFinalNorm), 1, static_cast<int>(d),
                           static_cast<float>(c.rms_norm_eps), xn_.data(), rstd_.data());
  WeightRef w_head;
  if (c.tie_word_embeddings) {
    ASSIGN_OR_RETURN(const float* emb, access.AcquireParams(ParamLayout::kEmbedUnit));
    embed_w_.Bind(emb, access.ParamsDType(ParamLayout::kEmbedUnit));
    w_head = embed_w_.mat(0);
  } else {
    w_head = head_w_.mat(kLmHead);
  }
  Linear(backend_, xn_.data(), w_head, 1, d, c.vocab_size, logits_.data());
  std::vector<float> out(c.vocab_size);
  backend_->CopyToHost(out.data(), logits_.data(), out.size() * sizeof(float));
  if (c.tie_word_embeddings) RETURN_IF_ERROR(access.ReleaseParams(ParamLayout::kEmbedUnit));
  RETURN_IF_ERROR(access.ReleaseParams(head));
  return out;
}

}  // namespace shard
