#include "shard/model/moe_mlp.h"

#include <algorithm>
#include <cmath>

#include "shard/spec/param_layout.h"

namespace shard {

struct MoeMlp::Saved {
  DeviceBuffer probs, expert, weight, perm, offsets;  // routing (int32 behind the float buffers)
  DeviceBuffer gu, h, y;                              // per assignment row, in expert order
  DeviceBuffer sgu, sh, sy, sgate;                    // qwen2_moe's shared expert per token, and g
  std::vector<int32_t> host_offsets;                  // offsets, copied to the host for the GEMM sizes
  int64_t n = 0;
};

namespace {

int32_t* Ints(const DeviceBuffer& b) { return reinterpret_cast<int32_t*>(b.data()); }

// y[m, out] (+)= x[m, in] · W[out, in]^T.
void Linear(Backend* be, DType md, const float* x, WeightRef w, int64_t m, int64_t in, int64_t out, float* y) {
  LinearForward(be, md, x, w, m, in, out, y);
}


}  // namespace

MoeMlp::MoeMlp(const LlamaConfig& config, Backend* backend, DType md) : config_(config), backend_(backend), md_(md) {}
MoeMlp::~MoeMlp() = default;

StatusOr<std::unique_ptr<MoeMlp>> MoeMlp::Create(const LlamaConfig& c, Backend* backend, int64_t max_rows, int sets,
                                                 DType matmul_dtype, DType activation_dtype) {
  if (!c.is_moe()) return Internal("moe: the model has no experts");
  (void)activation_dtype;
  std::unique_ptr<MoeMlp> m(new MoeMlp(c, backend, matmul_dtype));
  const int64_t n = max_rows, E = c.moe.num_experts, k = c.moe.experts_per_tok, nk = n * k;
  const int64_t d = c.hidden_size, fe = c.moe.expert_intermediate_size;
  auto make = [&](DeviceBuffer* buf, int64_t count) -> Status {
    ASSIGN_OR_RETURN(*buf, DeviceBuffer::Create(backend, std::max<int64_t>(count, 1)));
    return OkStatus();
  };
  for (int i = 0; i < sets; ++i) {
    auto s = std::make_unique<Saved>();
    RETURN_IF_ERROR(make(&s->probs, n * E));
    RETURN_IF_ERROR(make(&s->expert, nk));
    RETURN_IF_ERROR(make(&s->weight, nk));
    RETURN_IF_ERROR(make(&s->perm, nk));
    RETURN_IF_ERROR(make(&s->offsets, E + 1));
    RETURN_IF_ERROR(make(&s->gu, nk * 2 * fe));
    RETURN_IF_ERROR(make(&s->h, nk * fe));
    RETURN_IF_ERROR(make(&s->y, nk * d));
    s->host_offsets.assign(E + 1, 0);
    if (c.moe.has_shared_expert()) {
      const int64_t fs = c.moe.shared_expert_intermediate_size;
      RETURN_IF_ERROR(make(&s->sgu, n * 2 * fs));
      RETURN_IF_ERROR(make(&s->sh, n * fs));
      RETURN_IF_ERROR(make(&s->sy, n * d));
      RETURN_IF_ERROR(make(&s->sgate, n));
    }
    m->saved_.push_back(std::move(s));
  }
  if (c.moe.has_shared_expert()) {
    const int64_t fs = c.moe.shared_expert_intermediate_size;
    RETURN_IF_ERROR(make(&m->ident_, n));
    std::vector<int32_t> ident(std::max<int64_t>(n, 1));
    for (size_t i = 0; i < ident.size(); ++i) ident[i] = static_cast<int32_t>(i);
    backend->CopyToDevice(m->ident_.data(), ident.data(), ident.size() * sizeof(int32_t));
    RETURN_IF_ERROR(make(&m->dsy_, n * d));
    RETURN_IF_ERROR(make(&m->dsh_, n * fs));
    RETURN_IF_ERROR(make(&m->dsgu_, n * 2 * fs));
    RETURN_IF_ERROR(make(&m->sgate_grad_, n));
  }
  RETURN_IF_ERROR(make(&m->logits_, n * E));
  RETURN_IF_ERROR(make(&m->dprobs_, n * E));
  RETURN_IF_ERROR(make(&m->xp_, nk * d));
  RETURN_IF_ERROR(make(&m->dy_, nk * d));
  RETURN_IF_ERROR(make(&m->dxp_, nk * d));
  RETURN_IF_ERROR(make(&m->dh_, nk * fe));
  RETURN_IF_ERROR(make(&m->dgu_, nk * 2 * fe));
  RETURN_IF_ERROR(make(&m->dweight_, nk));
  RETURN_IF_ERROR(make(&m->weight_lp_, nk));
  // A backend without the MoE ops (Backend::MoeRoute's default) says so now, not at the first step.
  Saved& s0 = *m->saved_.front();
  MoeRouting probe = m->Routing(s0, 0);
  RETURN_IF_ERROR(backend->MoeRoute(m->logits_.data(), probe));
  m->aux_count_.assign(c.num_layers, std::vector<double>(E, 0.0));
  m->aux_prob_.assign(c.num_layers, std::vector<double>(E, 0.0));
  m->aux_real_.assign(c.num_layers, 0.0);
  m->z_lse_.assign(c.num_layers, {});
  m->z_sum_.assign(c.num_layers, 0.0);
  return m;
}

MoeRouting MoeMlp::Routing(Saved& s, int64_t n) const {
  MoeRouting r;
  r.rows = n;
  r.experts = config_.moe.num_experts;
  r.k = config_.moe.experts_per_tok;
  r.renormalize = config_.moe.norm_topk_prob;
  r.probs = s.probs.data();
  r.expert = Ints(s.expert);
  r.weight = s.weight.data();
  r.perm = Ints(s.perm);
  r.offsets = Ints(s.offsets);
  return r;
}

bool MoeMlp::LoraCallFor(const MoeLora* lora, int layer, int e, LoraTarget target, LoraCall* c, bool shared) const {
  if (!lora) return false;
  const LoraTensor* t = e >= 0 ? lora->layout->Expert(e, target) : lora->layout->Moe(target, shared);
  if (!t) return false;
  c->tensor = t;
  c->r = lora->layout->r;
  c->adapter = lora->adapter;
  c->adapter_grad = lora->adapter_grad;
  c->scale = lora->scale;
  c->dropout = lora->dropout;
  c->seed = LoraDropoutSeed(lora->dropout_seed, layer, target, shared ? config_.moe.num_experts : e);
  c->compute = md_;
  c->saved_t = nullptr;  // recomputed in the backward
  return true;
}

void MoeMlp::ExpertsForward(const UnitWeights& w, const Saved& s, const float* xp, int layer, const MoeLora* lora) {
  const int64_t d = config_.hidden_size, fe = config_.moe.expert_intermediate_size;
  const int64_t nk = s.n * config_.moe.experts_per_tok;
  LoraCall c;
  for (int e = 0; e < config_.moe.num_experts; ++e) {
    const int64_t o = s.host_offsets[e], m = s.host_offsets[e + 1] - o;
    if (m == 0) continue;  // an expert no token chose: no GEMM
    // gate and up are adjacent: one [m, 2fe] GEMM.
    Linear(backend_, md_, xp + o * d, w.mat(ExpertTensor(e, kExpertGate)), m, d, 2 * fe, s.gu.data() + o * 2 * fe);
    for (LoraTarget lt : {LoraTarget::kGate, LoraTarget::kUp})
      if (LoraCallFor(lora, layer, e, lt, &c)) LoraForward(backend_, c, xp + o * d, m, s.gu.data() + o * 2 * fe, *lora->scratch);
  }
  backend_->SwiGluForward(s.gu.data(), nk, static_cast<int>(fe), s.h.data());
  for (int e = 0; e < config_.moe.num_experts; ++e) {
    const int64_t o = s.host_offsets[e], m = s.host_offsets[e + 1] - o;
    if (m == 0) continue;
    Linear(backend_, md_, s.h.data() + o * fe, w.mat(ExpertTensor(e, kExpertDown)), m, fe, d, s.y.data() + o * d);
    if (LoraCallFor(lora, layer, e, LoraTarget::kDown, &c))
      LoraForward(backend_, c, s.h.data() + o * fe, m, s.y.data() + o * d, *lora->scratch);
  }
}

Status MoeMlp::Forward(const UnitWeights& w, int set, int layer, const float* xn, int64_t n, const uint8_t* real,
                       float* out, const MoeLora* lora) {
  Saved& s = *saved_[set];
  const int E = config_.moe.num_experts, k = config_.moe.experts_per_tok;
  const int64_t d = config_.hidden_size, nk = n * k;
  s.n = n;
  Linear(backend_, md_, xn, w.mat(kRouter), n, d, E, logits_.data());
  LoraCall rc;
  if (LoraCallFor(lora, layer, -1, LoraTarget::kRouter, &rc))  // the router's adapter, before the softmax
    LoraForward(backend_, rc, xn, n, logits_.data(), *lora->scratch);
  if (counting_ && z_scale_ != 0) CountZ(layer, n, real);
  const MoeRouting r = Routing(s, n);
  RETURN_IF_ERROR(backend_->MoeRoute(logits_.data(), r));
  if (md_ != DType::kF32) {  // transformers casts the routing weights to the compute dtype
    backend_->CastFromF32(r.weight, weight_lp_.data(), nk, md_);
    backend_->CastToF32(weight_lp_.data(), r.weight, nk, md_);
  }
  backend_->CopyToHost(s.host_offsets.data(), r.offsets, (E + 1) * sizeof(int32_t));
  if (!backend_->holds_data())  // the memory simulator: the worst imbalance, every token to experts 0..k-1
    for (int e = 0; e <= E; ++e) s.host_offsets[e] = static_cast<int32_t>(std::min(e, k) * n);
  if (counting_) RETURN_IF_ERROR(Count(r, layer, n, real));
  RETURN_IF_ERROR(backend_->MoePermute(xn, r.perm, nk, k, d, xp_.data()));
  ExpertsForward(w, s, xp_.data(), layer, lora);
  RETURN_IF_ERROR(backend_->MoeUnpermute(s.y.data(), r.perm, r.weight, nk, k, d, out));
  return config_.moe.has_shared_expert() ? SharedForward(w, s, xn, out, layer, lora) : OkStatus();
}

// transformers' Qwen2MoeSparseMoeBlock: out += sigmoid(xn · Wsgᵀ) ⊙ down(SwiGLU(xn · [Wg; Wu]ᵀ)),
// the gate in the compute dtype (as its Linear computes it there).
Status MoeMlp::SharedForward(const UnitWeights& w, Saved& s, const float* xn, float* out, int layer,
                             const MoeLora* lora) {
  const int E = config_.moe.num_experts;
  const int64_t n = s.n, d = config_.hidden_size, fs = config_.moe.shared_expert_intermediate_size;
  LoraCall c;
  Linear(backend_, md_, xn, w.mat(SharedExpertTensor(E, kSharedGate)), n, d, 2 * fs, s.sgu.data());
  for (LoraTarget lt : {LoraTarget::kGate, LoraTarget::kUp})
    if (LoraCallFor(lora, layer, -1, lt, &c, /*shared=*/true))
      LoraForward(backend_, c, xn, n, s.sgu.data(), *lora->scratch);
  backend_->SwiGluForward(s.sgu.data(), n, static_cast<int>(fs), s.sh.data());
  Linear(backend_, md_, s.sh.data(), w.mat(SharedExpertTensor(E, kSharedDown)), n, fs, d, s.sy.data());
  if (LoraCallFor(lora, layer, -1, LoraTarget::kDown, &c, /*shared=*/true))
    LoraForward(backend_, c, s.sh.data(), n, s.sy.data(), *lora->scratch);
  Linear(backend_, md_, xn, w.mat(SharedExpertTensor(E, kSharedExpertGate)), n, d, 1, sgate_grad_.data());
  if (LoraCallFor(lora, layer, -1, LoraTarget::kSharedExpertGate, &c))
    LoraForward(backend_, c, xn, n, sgate_grad_.data(), *lora->scratch);
  host_gate_.resize(n);
  backend_->CopyToHost(host_gate_.data(), sgate_grad_.data(), n * sizeof(float));
  for (float& v : host_gate_) v = 1.0f / (1.0f + std::exp(-v));
  backend_->CopyToDevice(s.sgate.data(), host_gate_.data(), n * sizeof(float));
  if (md_ != DType::kF32) {  // the gate's product is in the compute dtype
    backend_->CastFromF32(s.sgate.data(), weight_lp_.data(), n, md_);
    backend_->CastToF32(weight_lp_.data(), s.sgate.data(), n, md_);
  }
  // out[t] += g[t] · sy[t]: the combine with k = 1 over the identity permutation.
  return backend_->MoeUnpermute(s.sy.data(), Ints(ident_), s.sgate.data(), n, 1, d, out);
}

// dg[t] = <dout[t], sy[t]>, ds = dg · g(1 − g); dsy = g · dout through the
// shared SwiGLU; the input gradients of both linears are added into dxn.
Status MoeMlp::SharedBackward(const UnitWeights& w, float* dw, const Saved& s, const float* xn, const float* dout,
                              float* dxn, int layer, const MoeLora* lora) {
  const int E = config_.moe.num_experts;
  const int64_t n = s.n, d = config_.hidden_size, fs = config_.moe.shared_expert_intermediate_size;
  const auto& t = w.spec().tensors;
  const int sg = SharedExpertTensor(E, kSharedGate), sd = SharedExpertTensor(E, kSharedDown);
  const int sgate = SharedExpertTensor(E, kSharedExpertGate);
  RETURN_IF_ERROR(backend_->MoeUnpermuteBackward(dout, s.sy.data(), Ints(ident_), s.sgate.data(), n, 1, d,
                                                 dsy_.data(), sgate_grad_.data()));
  std::vector<float> g(n);
  host_gate_.resize(n);
  backend_->CopyToHost(host_gate_.data(), sgate_grad_.data(), n * sizeof(float));
  backend_->CopyToHost(g.data(), s.sgate.data(), n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) host_gate_[i] *= g[i] * (1.0f - g[i]);
  backend_->CopyToDevice(sgate_grad_.data(), host_gate_.data(), n * sizeof(float));
  LinearBackward(backend_, md_, xn, w.mat(sgate), sgate_grad_.data(), n, d, 1, dxn,
                 dw ? dw + t[sgate].offset : nullptr, /*dx_beta=*/1.0f);
  LoraCall c;
  if (LoraCallFor(lora, layer, -1, LoraTarget::kSharedExpertGate, &c))
    LoraBackward(backend_, c, xn, sgate_grad_.data(), n, dxn, *lora->scratch);
  LinearBackward(backend_, md_, s.sh.data(), w.mat(sd), dsy_.data(), n, fs, d, dsh_.data(),
                 dw ? dw + t[sd].offset : nullptr);
  if (LoraCallFor(lora, layer, -1, LoraTarget::kDown, &c, /*shared=*/true))
    LoraBackward(backend_, c, s.sh.data(), dsy_.data(), n, dsh_.data(), *lora->scratch);
  backend_->SwiGluBackward(dsh_.data(), s.sgu.data(), n, static_cast<int>(fs), dsgu_.data());
  LinearBackward(backend_, md_, xn, w.mat(sg), dsgu_.data(), n, d, 2 * fs, dxn, dw ? dw + t[sg].offset : nullptr,
                 /*dx_beta=*/1.0f);
  for (LoraTarget lt : {LoraTarget::kGate, LoraTarget::kUp})
    if (LoraCallFor(lora, layer, -1, lt, &c, /*shared=*/true))
      LoraBackward(backend_, c, xn, dsgu_.data(), n, dxn, *lora->scratch);
  return OkStatus();
}

// Aux-loss statistics of one layer over the real tokens.
Status MoeMlp::Count(const MoeRouting& r, int layer, int64_t n, const uint8_t* real) {
  const int E = config_.moe.num_experts, k = config_.moe.experts_per_tok;
  const int64_t nk = n * k;
  host_probs_.resize(n * E);
  host_expert_.resize(nk);
  backend_->CopyToHost(host_probs_.data(), r.probs, n * E * sizeof(float));
  backend_->CopyToHost(host_expert_.data(), r.expert, nk * sizeof(int32_t));
  if (real) {
    real_.assign(real, real + n);
  } else {
    real_.clear();
  }
  for (int64_t t = 0; t < n; ++t) {
    if (real && !real[t]) continue;
    aux_real_[layer] += 1;
    for (int j = 0; j < k; ++j) {
      aux_count_[layer][host_expert_[t * k + j]] += 1;
      if (!step_.load.empty()) step_.load[static_cast<size_t>(layer) * E + host_expert_[t * k + j]] += 1;
    }
    for (int e = 0; e < E; ++e) aux_prob_[layer][e] += host_probs_[t * E + e];
  }
  return OkStatus();
}

void MoeMlp::ExpertsBackward(const UnitWeights& w, float* dw, const Saved& s, const float* xp, int layer,
                             const MoeLora* lora) {
  const auto& t = w.spec().tensors;
  const int64_t d = config_.hidden_size, fe = config_.moe.expert_intermediate_size;
  const int64_t nk = s.n * config_.moe.experts_per_tok;
  LoraCall c;
  for (int e = 0; e < config_.moe.num_experts; ++e) {
    const int64_t o = s.host_offsets[e], m = s.host_offsets[e + 1] - o;
    if (m == 0) continue;
    const int down = ExpertTensor(e, kExpertDown);
    LinearBackward(backend_, md_, s.h.data() + o * fe, w.mat(down), dy_.data() + o * d, m, fe, d, dh_.data() + o * fe,
                   dw ? dw + t[down].offset : nullptr);
    if (LoraCallFor(lora, layer, e, LoraTarget::kDown, &c))
      LoraBackward(backend_, c, s.h.data() + o * fe, dy_.data() + o * d, m, dh_.data() + o * fe, *lora->scratch);
  }
  backend_->SwiGluBackward(dh_.data(), s.gu.data(), nk, static_cast<int>(fe), dgu_.data());
  for (int e = 0; e < config_.moe.num_experts; ++e) {
    const int64_t o = s.host_offsets[e], m = s.host_offsets[e + 1] - o;
    if (m == 0) continue;
    const int gate = ExpertTensor(e, kExpertGate);  // gate then up: one [2fe, d] weight
    LinearBackward(backend_, md_, xp + o * d, w.mat(gate), dgu_.data() + o * 2 * fe, m, d, 2 * fe,
                   dxp_.data() + o * d, dw ? dw + t[gate].offset : nullptr);
    for (LoraTarget lt : {LoraTarget::kGate, LoraTarget::kUp})
      if (LoraCallFor(lora, layer, e, lt, &c))
        LoraBackward(backend_, c, xp + o * d, dgu_.data() + o * 2 * fe, m, dxp_.data() + o * d, *lora->scratch);
  }
}

Status MoeMlp::Backward(const UnitWeights& w, float* dw, int set, int layer, const float* xn, const float* dout,
                        int64_t n, float* dxn, const MoeLora* lora) {
  Saved& s = *saved_[set];
  const int E = config_.moe.num_experts, k = config_.moe.experts_per_tok;
  const int64_t d = config_.hidden_size, nk = n * k;
  if (s.n != n) return Internal("moe: backward of " + std::to_string(n) + " rows after a forward of " + std::to_string(s.n));
  const MoeRouting r = Routing(s, n);
  RETURN_IF_ERROR(backend_->MoeUnpermuteBackward(dout, s.y.data(), r.perm, r.weight, nk, k, d, dy_.data(),
                                                 dweight_.data()));
  RETURN_IF_ERROR(backend_->MoePermute(xn, r.perm, nk, k, d, xp_.data()));
  ExpertsBackward(w, dw, s, xp_.data(), layer, lora);
  backend_->Fill(dxn, n * d, 0.0f);
  RETURN_IF_ERROR(backend_->MoeUnpermute(dxp_.data(), r.perm, nullptr, nk, k, d, dxn));
  // The aux loss's gradient reaches the softmax: d aux / d p[t, e] = E * F_e / (L * N) on real rows.
  const float* dprobs = nullptr;
  if (aux_scale_ != 0 && aux_real_[layer] > 0) {
    const std::vector<float> g = AuxProbGrad(n);
    backend_->CopyToDevice(dprobs_.data(), g.data(), g.size() * sizeof(float));
    dprobs = dprobs_.data();
  }
  RETURN_IF_ERROR(backend_->MoeRouteBackward(r, dweight_.data(), dprobs, logits_.data()));
  if (z_scale_ != 0 && !z_lse_[layer].empty()) AddZGrad(s, layer, n, logits_.data());
  LinearBackward(backend_, md_, xn, w.mat(kRouter), logits_.data(), n, d, E, dxn,
                 dw ? dw + w.spec().tensors[kRouter].offset : nullptr, /*dx_beta=*/1.0f);
  LoraCall rc;  // the router's adapter: dA, dB and dxn from the same logits' gradient
  if (LoraCallFor(lora, layer, -1, LoraTarget::kRouter, &rc))
    LoraBackward(backend_, rc, xn, logits_.data(), n, dxn, *lora->scratch);
  return config_.moe.has_shared_expert() ? SharedBackward(w, dw, s, xn, dout, dxn, layer, lora) : OkStatus();
}

void MoeMlp::ResetStepStats() {
  step_ = StepStats{};
  step_.load.assign(aux_count_.size() * config_.moe.num_experts, 0.0);
  // The current micro-batch's counts belong to the step before.
  for (auto& v : aux_count_) std::fill(v.begin(), v.end(), 0.0);
  for (auto& v : aux_prob_) std::fill(v.begin(), v.end(), 0.0);
  std::fill(aux_real_.begin(), aux_real_.end(), 0.0);
  for (auto& v : z_lse_) v.clear();
  std::fill(z_sum_.begin(), z_sum_.end(), 0.0);
}

MoeMlp::StepStats MoeMlp::step_stats() const {
  StepStats s = step_;
  double rows = 0;
  for (double r : aux_real_) rows += r;
  if (rows > 0) s.aux_sum += AuxLoss(), ++s.micro_batches;  // the current micro-batch
  return s;
}

void MoeMlp::ResetAux() {
  double rows = 0;
  for (double r : aux_real_) rows += r;
  if (rows > 0) step_.aux_sum += AuxLoss(), ++step_.micro_batches;  // close the previous micro-batch
  for (auto& v : aux_count_) std::fill(v.begin(), v.end(), 0.0);
  for (auto& v : aux_prob_) std::fill(v.begin(), v.end(), 0.0);
  std::fill(aux_real_.begin(), aux_real_.end(), 0.0);
  for (auto& v : z_lse_) v.clear();
  std::fill(z_sum_.begin(), z_sum_.end(), 0.0);
  counting_ = true;
}

// transformers' load_balancing_loss_func over the sparse layers' rows
// together (L layers x N real tokens): E * Σ_e F_e * P_e, where F_e is the
// share of (row, slot) assignments to e summed over the k slots and P_e the
// mean router probability of e, both over the L * N rows.
double MoeMlp::AuxLoss() const {
  const int E = config_.moe.num_experts;
  double rows = 0;
  for (double r : aux_real_) rows += r;
  if (rows == 0) return 0;
  double loss = 0;
  for (int e = 0; e < E; ++e) {
    double f = 0, p = 0;
    for (size_t l = 0; l < aux_count_.size(); ++l) f += aux_count_[l][e], p += aux_prob_[l][e];
    loss += (f / rows) * (p / rows);
  }
  return loss * E;
}

// d(aux)/d probs[t, e] = E * F_e / (L * N) for a real row (F_e counts no gradient: a one-hot).
std::vector<float> MoeMlp::AuxProbGrad(int64_t n) const {
  const int E = config_.moe.num_experts;
  double rows = 0;
  for (double r : aux_real_) rows += r;
  std::vector<float> row(E), g(n * E, 0.0f);
  for (int e = 0; e < E; ++e) {
    double f = 0;
    for (const auto& c : aux_count_) f += c[e];
    row[e] = static_cast<float>(aux_scale_ * E * (f / rows) / rows);
  }
  for (int64_t t = 0; t < n; ++t)
    if (real_.empty() || real_[t]) std::copy(row.begin(), row.end(), g.begin() + t * E);
  return g;
}

Status MoeMlp::SumOverGroup() {
  if (!stats_sum_ || !counting_) return OkStatus();
  const int E = config_.moe.num_experts;
  const size_t L = aux_count_.size(), per = 2 * static_cast<size_t>(E) + 2;
  std::vector<double> v(L * per);
  for (size_t l = 0; l < L; ++l) {
    double* row = v.data() + l * per;
    std::copy(aux_count_[l].begin(), aux_count_[l].end(), row);
    std::copy(aux_prob_[l].begin(), aux_prob_[l].end(), row + E);
    row[2 * E] = aux_real_[l];
    row[2 * E + 1] = z_sum_[l];
  }
  RETURN_IF_ERROR(stats_sum_(v.data(), static_cast<int64_t>(v.size())));
  for (size_t l = 0; l < L; ++l) {
    const double* row = v.data() + l * per;
    std::copy(row, row + E, aux_count_[l].begin());
    std::copy(row + E, row + 2 * E, aux_prob_[l].begin());
    aux_real_[l] = row[2 * E];
    z_sum_[l] = row[2 * E + 1];
  }
  return OkStatus();
}

double MoeMlp::AuxRows() const {
  double rows = 0;
  for (double r : aux_real_) rows += r;
  return rows;
}

// Per real row t: lse_t = logsumexp_e logits[t, e] (fp32 logits, double sums).
void MoeMlp::CountZ(int layer, int64_t n, const uint8_t* real) {
  const int E = config_.moe.num_experts;
  host_logits_.resize(n * E);
  backend_->CopyToHost(host_logits_.data(), logits_.data(), n * E * sizeof(float));
  std::vector<float>& lse = z_lse_[layer];
  lse.assign(n, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    if (real && !real[t]) continue;
    const float* x = host_logits_.data() + t * E;
    const double mx = *std::max_element(x, x + E);
    double z = 0;
    for (int e = 0; e < E; ++e) z += std::exp(static_cast<double>(x[e]) - mx);
    const double v = mx + std::log(z);
    lse[t] = static_cast<float>(v);
    z_sum_[layer] += v * v;
  }
}

double MoeMlp::ZLoss() const {
  const double rows = AuxRows();
  double sum = 0;
  for (double v : z_sum_) sum += v;
  return rows > 0 ? sum / rows : 0;
}

// d z / d logits[t, e] = 2 · lse_t · softmax(logits_t)[e] / (L·N): the router's
// softmax probabilities (probs, before the top-k) times the row's factor.
void MoeMlp::AddZGrad(const Saved& s, int layer, int64_t n, float* dlogits) {
  const int E = config_.moe.num_experts;
  const double rows = AuxRows();
  if (rows == 0) return;
  host_probs_.resize(n * E);
  backend_->CopyToHost(host_probs_.data(), s.probs.data(), n * E * sizeof(float));
  const std::vector<float>& lse = z_lse_[layer];
  std::vector<float> g(n * E);
  for (int64_t t = 0; t < n; ++t) {
    const double f = z_scale_ * 2.0 * lse[t] / rows;  // 0 on padding (lse 0)
    for (int e = 0; e < E; ++e) g[t * E + e] = static_cast<float>(f * host_probs_[t * E + e]);
  }
  backend_->CopyToDevice(dprobs_.data(), g.data(), g.size() * sizeof(float));
  backend_->Add(dlogits, dprobs_.data(), dlogits, n * E);
}

}  // namespace shard
