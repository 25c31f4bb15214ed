// An independent, deliberately naive double-precision Llama forward pass for
// tests: plain loops over HF-layout weights, no fusion, no backend; with the
// families' extras (qwen2 q/k/v biases, qwen3 per-head q/k RMSNorm, explicit
// head_dim). Gradient
// checks take central finite differences of this function.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"

namespace shard::testing_ref {

using Units = std::vector<std::vector<double>>;

struct RefBatch {
  int B = 0, T = 0;
  std::vector<int> tokens, targets, positions, segments;  // segments empty = plain causal
};

inline std::vector<double> RmsNorm(const std::vector<double>& x, const double* w, int d, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += x[r * d + i] * x[r * d + i];
    double s = 1.0 / std::sqrt(ss / d + eps);
    for (int i = 0; i < d; ++i) y[r * d + i] = x[r * d + i] * s * w[i];
  }
  return y;
}

// y[n, out] = x[n, in] W[out, in]^T
inline std::vector<double> Linear(const std::vector<double>& x, const double* w, int in, int out) {
  size_t n = x.size() / in;
  std::vector<double> y(n * out, 0.0);
  for (size_t r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

inline void RopeInPlace(std::vector<double>& x, int heads, int hd, const std::vector<int>& pos, double theta) {
  int width = heads * hd;
  for (size_t r = 0; r < x.size() / width; ++r)
    for (int h = 0; h < heads; ++h) {
      double* v = &x[r * width + h * hd];
      for (int i = 0; i < hd / 2; ++i) {
        double ang = pos[r] * std::pow(theta, -2.0 * i / hd);
        double a = v[i], b = v[i + hd / 2];
        v[i] = a * std::cos(ang) - b * std::sin(ang);
        v[i + hd / 2] = b * std::cos(ang) + a * std::sin(ang);
      }
    }
}

// Two-byte rounding the forward applies, to mirror the engine's mixed
// precision (ModelOptions::matmul_dtype / activation_dtype). `round` maps a
// value to the nearest two-byte one. inputs: the activation inputs of every
// GEMM and q, k, v of attention are rounded (the caller rounds the GEMM
// weights in `p`). activations: every kept activation is rounded where it is
// produced — block inputs and outputs, norm outputs, q/k/v after RoPE,
// attention output, the residual after attention, gate/up and SwiGLU output.
struct RefRounding {
  double (*round)(double) = nullptr;
  bool inputs = false;
  bool activations = false;
};

// What the MoE reference records for the load-balancing loss: per sparse
// layer and real token, the router's softmax and the chosen experts.
struct RefMoeAux {
  std::vector<uint8_t> real;  // per row; empty: all real
  std::vector<std::vector<double>> probs;  // one entry per (sparse layer, real token): [E]
  std::vector<std::vector<int>> chosen;    // [k]
  std::vector<double> lse;                 // logsumexp of the router logits (the z-loss)
  // transformers' load_balancing_loss_func: E * Σ_e (share of assignments to e) * (mean prob of e).
  double Loss(int E) const {
    const double rows = static_cast<double>(probs.size());
    double loss = 0;
    for (int e = 0; e < E; ++e) {
      double f = 0, pe = 0;
      for (size_t i = 0; i < probs.size(); ++i) {
        pe += probs[i][e];
        for (int j : chosen[i]) f += (j == e);
      }
      loss += (f / rows) * (pe / rows);
    }
    return rows > 0 ? loss * E : 0;
  }
  // ST-MoE's router z-loss: the mean over the same rows of lse^2.
  double ZLoss() const {
    double s = 0;
    for (double v : lse) s += v * v;
    return lse.empty() ? 0 : s / static_cast<double>(lse.size());
  }
};

inline const double* Tensor(const ParamLayout& layout, const Units& p, const std::string& name) {
  int u = -1, t = -1;
  if (!layout.Find(name, &u, &t)) return nullptr;
  return &p[u][layout.units[u].tensors[t].offset];
}

// A sparse block's MLP by its HF names, token by token: softmax over the
// router logits, the k largest (ties: lower expert), renormalised iff
// norm_topk_prob (mixtral: always), a weighted sum of SwiGLU experts;
// qwen2_moe adds its shared expert scaled by the sigmoid of its gate.
inline std::vector<double> MoeMlpRef(const LlamaConfig& c, const ParamLayout& layout, const Units& p, int l,
                                     const std::vector<double>& x, RefMoeAux* aux) {
  const bool mixtral = c.family == ModelFamily::kMixtral;
  const std::string pre = "model.layers." + std::to_string(l) + (mixtral ? ".block_sparse_moe." : ".mlp.");
  const int d = static_cast<int>(c.hidden_size), fe = static_cast<int>(c.moe.expert_intermediate_size);
  const int E = c.moe.num_experts, K = c.moe.experts_per_tok;
  const size_t N = x.size() / d;
  std::vector<double> out(N * d, 0.0);
  const auto logits = Linear(x, Tensor(layout, p, pre + "gate.weight"), d, E);
  for (size_t r = 0; r < N; ++r) {
    std::vector<double> pr(E);
    double mx = -1e300, z = 0;
    for (int e = 0; e < E; ++e) mx = std::max(mx, logits[r * E + e]);
    for (int e = 0; e < E; ++e) z += (pr[e] = std::exp(logits[r * E + e] - mx));
    for (double& v : pr) v /= z;
    std::vector<int> idx(E);
    for (int e = 0; e < E; ++e) idx[e] = e;
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b2) { return pr[a] > pr[b2]; });
    idx.resize(K);
    double s = 0;
    for (int e : idx) s += pr[e];
    if (aux && (aux->real.empty() || aux->real[r]))
      aux->probs.push_back(pr), aux->chosen.push_back(idx), aux->lse.push_back(mx + std::log(z));
    std::vector<double> xr(x.begin() + r * d, x.begin() + (r + 1) * d);
    for (int e : idx) {
      const double w = (mixtral || c.moe.norm_topk_prob) ? pr[e] / s : pr[e];
      const std::string ex = pre + "experts." + std::to_string(e) + ".";
      auto g = Linear(xr, Tensor(layout, p, ex + (mixtral ? "w1.weight" : "gate_proj.weight")), d, fe);
      auto u = Linear(xr, Tensor(layout, p, ex + (mixtral ? "w3.weight" : "up_proj.weight")), d, fe);
      for (int i = 0; i < fe; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      auto y = Linear(g, Tensor(layout, p, ex + (mixtral ? "w2.weight" : "down_proj.weight")), fe, d);
      for (int i = 0; i < d; ++i) out[r * d + i] += w * y[i];
    }
    if (c.moe.shared_expert_intermediate_size > 0) {  // qwen2_moe: + sigmoid(xr · Wsgᵀ) · SwiGLU_shared(xr)
      const int fs = static_cast<int>(c.moe.shared_expert_intermediate_size);
      const std::string sx = pre + "shared_expert.";
      auto g = Linear(xr, Tensor(layout, p, sx + "gate_proj.weight"), d, fs);
      auto u = Linear(xr, Tensor(layout, p, sx + "up_proj.weight"), d, fs);
      for (int i = 0; i < fs; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      auto y = Linear(g, Tensor(layout, p, sx + "down_proj.weight"), fs, d);
      const double s_logit = Linear(xr, Tensor(layout, p, pre + "shared_expert_gate.weight"), d, 1)[0];
      const double gate = 1.0 / (1.0 + std::exp(-s_logit));
      for (int i = 0; i < d; ++i) out[r * d + i] += gate * y[i];
    }
  }
  return out;
}

// Sum over target tokens of -log softmax(logits)[target]. aux (MoE): records
// the routing for the load-balancing loss.
inline double LossSum(const LlamaConfig& c, const ParamLayout& layout, const Units& p, const RefBatch& b,
                      const RefRounding& rr = {}, RefMoeAux* aux = nullptr) {
  auto R = [&](std::vector<double>& v, bool apply) {
    if (apply && rr.round)
      for (double& e : v) e = rr.round(e);
  };
  const bool ri = rr.inputs || rr.activations, ra = rr.activations;
  const int d = static_cast<int>(c.hidden_size), f = static_cast<int>(c.intermediate_size), hd = c.head_dim();
  const int H = c.num_heads, KV = c.num_kv_heads, V = static_cast<int>(c.vocab_size), N = b.B * b.T;
  std::vector<double> x(N * d);
  for (int r = 0; r < N; ++r)
    for (int i = 0; i < d; ++i) x[r * d + i] = p[0][b.tokens[r] * d + i];
  R(x, ra);
  for (int l = 0; l < c.num_layers; ++l) {
    const auto& u = p[1 + l];
    const auto& t = layout.units[1 + l].tensors;
    auto xn = RmsNorm(x, &u[t[kInputNorm].offset], d, c.rms_norm_eps);
    R(xn, ri);
    auto q = Linear(xn, &u[t[kQ].offset], d, H * hd);
    auto k = Linear(xn, &u[t[kK].offset], d, KV * hd);
    auto v = Linear(xn, &u[t[kV].offset], d, KV * hd);
    const BlockExtras ex = ParamLayout::ExtrasOf(layout.units[1 + l]);
    if (ex.q_bias >= 0) {  // qwen2: q/k/v biases
      for (int r = 0; r < N; ++r) {
        for (int i = 0; i < H * hd; ++i) q[r * H * hd + i] += u[t[ex.q_bias].offset + i];
        for (int i = 0; i < KV * hd; ++i) k[r * KV * hd + i] += u[t[ex.q_bias + 1].offset + i];
        for (int i = 0; i < KV * hd; ++i) v[r * KV * hd + i] += u[t[ex.q_bias + 2].offset + i];
      }
    }
    if (ex.q_norm >= 0) {  // qwen3: every q and k head normalised over head_dim
      q = RmsNorm(q, &u[t[ex.q_norm].offset], hd, c.rms_norm_eps);
      k = RmsNorm(k, &u[t[ex.k_norm].offset], hd, c.rms_norm_eps);
    }
    RopeInPlace(q, H, hd, b.positions, c.rope_theta);
    RopeInPlace(k, KV, hd, b.positions, c.rope_theta);
    R(q, ri), R(k, ri), R(v, ri);
    std::vector<double> att(N * H * hd, 0.0);
    for (int bb = 0; bb < b.B; ++bb)
      for (int h = 0; h < H; ++h) {
        int g = h / (H / KV);
        for (int i = 0; i < b.T; ++i) {
          int ri = bb * b.T + i;
          std::vector<double> s;
          std::vector<int> js;
          for (int j = 0; j <= i; ++j) {
            int rj = bb * b.T + j;
            if (!b.segments.empty() && b.segments[rj] != b.segments[ri]) continue;
            double dot = 0;
            for (int e = 0; e < hd; ++e) dot += q[ri * H * hd + h * hd + e] * k[rj * KV * hd + g * hd + e];
            s.push_back(dot / std::sqrt(static_cast<double>(hd)));
            js.push_back(rj);
          }
          double mx = -1e300, z = 0;
          for (double v2 : s) mx = std::max(mx, v2);
          for (double& v2 : s) z += (v2 = std::exp(v2 - mx));
          for (size_t jj = 0; jj < js.size(); ++jj)
            for (int e = 0; e < hd; ++e) att[ri * H * hd + h * hd + e] += s[jj] / z * v[js[jj] * KV * hd + g * hd + e];
        }
      }
    R(att, ri);
    auto o = Linear(att, &u[t[kO].offset], H * hd, d);
    for (int i = 0; i < N * d; ++i) x[i] += o[i];
    R(x, ra);
    auto xn2 = RmsNorm(x, &u[t[kPostNorm].offset], d, c.rms_norm_eps);
    R(xn2, ri);
    if (layout.units[1 + l].sparse) {
      const auto y = MoeMlpRef(c, layout, p, l, xn2, aux);
      for (int i = 0; i < N * d; ++i) x[i] += y[i];
      continue;
    }
    auto gate = Linear(xn2, &u[t[kGate].offset], d, f);
    auto up = Linear(xn2, &u[t[kUp].offset], d, f);
    R(gate, ra), R(up, ra);
    for (int i = 0; i < N * f; ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    R(gate, ri);
    auto down = Linear(gate, &u[t[kDown].offset], f, d);
    for (int i = 0; i < N * d; ++i) x[i] += down[i];
    R(x, ra);
  }
  const auto& hu = p.back();
  const auto& ht = layout.units.back().tensors;
  auto xf = RmsNorm(x, &hu[ht[kFinalNorm].offset], d, c.rms_norm_eps);
  R(xf, ri);
  const double* wh = c.tie_word_embeddings ? p[0].data() : &hu[ht[kLmHead].offset];
  auto logits = Linear(xf, wh, d, V);
  double loss = 0;
  for (int r = 0; r < N; ++r) {
    if (b.targets[r] < 0) continue;
    double mx = -1e300, z = 0;
    for (int vv = 0; vv < V; ++vv) mx = std::max(mx, logits[r * V + vv]);
    for (int vv = 0; vv < V; ++vv) z += std::exp(logits[r * V + vv] - mx);
    loss += std::log(z) + mx - logits[r * V + b.targets[r]];
  }
  return loss;
}

}  // namespace shard::testing_ref
