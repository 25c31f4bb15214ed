// The independent reference of the preference parity tests
// (preference_parity_test.cc through LoRA, preference_full_parity_test.cc
// with every weight trained): a tiny Llama written in HF's safetensors form,
// its forward on a scalar reverse-mode autodiff tape in double precision
// (every weight a tape node, so a test chooses what is a trained leaf), each
// reply's summed target log-probs, TRL's losses written out on the tape and
// PyTorch's AdamW. Nothing of the engine's model, kernels, loss or optimizer.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "tests/unit/train/autodiff_tape.h"

namespace shard::pref_tape {

// ---- The model's shape ----------------------------------------------------------

constexpr int V = 265, D = 16, F = 24, L = 2, H = 4, KV = 2, HD = D / H, T = 16;  // V: the byte tokenizer
constexpr int R = 2;  // LoRA rank
constexpr double kAlpha = 4, kScale = kAlpha / R, kEps = 1e-5, kTheta = 10000;
constexpr int kPairs = 4, kSteps = 3;
constexpr double kLr = 1e-2, kWd = 0.01, kB1 = 0.9, kB2 = 0.999, kAdamEps = 1e-8;
inline const char* const kTargets[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

// in, out features of each target, in kTargets order.
inline void Dims(int t, int* in, int* out) {
  const int io[7][2] = {{D, H * HD}, {D, KV * HD}, {D, KV * HD}, {H * HD, D}, {D, F}, {D, F}, {F, D}};
  *in = io[t][0];
  *out = io[t][1];
}
inline const char* Module(int t) { return t < 4 ? "self_attn" : "mlp"; }
inline std::string TargetName(int l, int t) {
  return "model.layers." + std::to_string(l) + "." + Module(t) + "." + kTargets[t] + ".weight";
}

using Tensors = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;

// A safetensors file (8-byte little-endian header length, JSON header, data).
inline void WriteSafetensors(const std::string& path, const Tensors& ts) {
  nlohmann::json h = nlohmann::json::object();
  int64_t off = 0;
  for (const auto& [name, t] : ts) {
    const int64_t bytes = static_cast<int64_t>(t.second.size()) * 4;
    h[name] = {{"dtype", "F32"}, {"shape", t.first}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string header = h.dump();
  while (header.size() % 8) header += ' ';
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& [name, t] : ts) f.write(reinterpret_cast<const char*>(t.second.data()), t.second.size() * 4);
}

// Its F32 tensors back (an fp32 export); empty when unreadable.
inline Tensors ReadSafetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  Tensors out;
  if (bytes.size() < 8) return out;
  uint64_t n = 0;
  std::copy_n(bytes.data(), 8, reinterpret_cast<char*>(&n));
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n), nullptr, false);
  if (!h.is_object()) return out;
  for (const auto& [name, t] : h.items()) {
    if (name == "__metadata__" || t.value("dtype", "") != "F32") continue;
    const int64_t b = t["data_offsets"][0], e = t["data_offsets"][1];
    std::vector<float> v(static_cast<size_t>((e - b) / 4));
    std::copy_n(bytes.data() + 8 + n + b, e - b, reinterpret_cast<char*>(v.data()));
    out[name] = {t["shape"].get<std::vector<int64_t>>(), std::move(v)};
  }
  return out;
}

inline std::vector<float> Random(std::mt19937& rng, size_t n, double sd, double mean = 0) {
  std::normal_distribution<double> g(mean, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(g(rng));
  return v;
}

// The base model's weights (HF names, untied head), drawn from `rng`.
inline Tensors RandomBase(std::mt19937& rng) {
  Tensors b;
  b["model.embed_tokens.weight"] = {{V, D}, Random(rng, V * D, 0.5)};
  b["lm_head.weight"] = {{V, D}, Random(rng, V * D, 0.3)};
  b["model.norm.weight"] = {{D}, Random(rng, D, 0.1, 1.0)};
  for (int l = 0; l < L; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    b[pre + "input_layernorm.weight"] = {{D}, Random(rng, D, 0.1, 1.0)};
    b[pre + "post_attention_layernorm.weight"] = {{D}, Random(rng, D, 0.1, 1.0)};
    for (int t = 0; t < 7; ++t) {
      int in, out;
      Dims(t, &in, &out);
      b[TargetName(l, t)] = {{out, in}, Random(rng, out * in, 0.3)};
    }
  }
  return b;
}

// An HF folder: model.safetensors and config.json.
inline void WriteHfModel(const std::string& dir, const Tensors& base) {
  std::filesystem::create_directories(dir);
  WriteSafetensors(dir + "/model.safetensors", base);
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", D},
                        {"intermediate_size", F}, {"num_hidden_layers", L}, {"num_attention_heads", H},
                        {"num_key_value_heads", KV}, {"rms_norm_eps", kEps}, {"rope_theta", kTheta},
                        {"max_position_embeddings", 64}, {"vocab_size", V}, {"tie_word_embeddings", false},
                        {"hidden_act", "silu"}};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
}

using Tape = shard::autodiff::Tape;  // tests/unit/train/autodiff_tape.h

using Vec = std::vector<int>;
using NodeWeights = std::map<std::string, Vec>;  // HF name -> its elements' tape nodes, row-major

// Every weight of `base` as a leaf of `tp`.
inline NodeWeights Leaves(Tape& tp, const Tensors& base) {
  NodeWeights w;
  for (const auto& [name, t] : base)
    for (float x : t.second) w[name].push_back(tp.Leaf(x));
  return w;
}

// A LoRA pair on one linear layer: A [R x in] and B [out x R] nodes.
struct LoraNodes {
  Vec A, B;
};

// y = x·Wᵀ (+ s·(x·Aᵀ)·Bᵀ); W [out, in].
inline Vec Linear(Tape& tp, const Vec& x, const Vec& w, int in, int out, const LoraNodes* lora = nullptr) {
  Vec y(out);
  Vec t;
  if (lora) {
    t.resize(R);
    for (int j = 0; j < R; ++j) t[j] = tp.Dot(Vec(lora->A.begin() + j * in, lora->A.begin() + (j + 1) * in), x);
  }
  for (int o = 0; o < out; ++o) {
    y[o] = tp.Dot(Vec(w.begin() + static_cast<size_t>(o) * in, w.begin() + static_cast<size_t>(o + 1) * in), x);
    if (lora) y[o] = tp.Lin({{y[o], 1}, {tp.Dot(Vec(lora->B.begin() + o * R, lora->B.begin() + (o + 1) * R), t), kScale}});
  }
  return y;
}

inline Vec RmsNorm(Tape& tp, const Vec& x, const Vec& w) {
  std::vector<std::pair<int, double>> sq;
  for (int i : x) sq.push_back({tp.Mul(i, i), 1.0 / x.size()});
  const int r = tp.Rsqrt(tp.Lin(sq, kEps));
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = tp.Mul(tp.Mul(x[i], r), w[i]);
  return y;
}

// HF's rotate_half RoPE on one head's [HD] slice at position p.
inline void Rope(Tape& tp, Vec& x, int off, int p) {
  for (int j = 0; j < HD / 2; ++j) {
    const double f = std::pow(kTheta, -2.0 * j / HD), c = std::cos(p * f), s = std::sin(p * f);
    const int a = x[off + j], b = x[off + j + HD / 2];
    x[off + j] = tp.Lin({{a, c}, {b, -s}});
    x[off + j + HD / 2] = tp.Lin({{b, c}, {a, s}});
  }
}

// One rendered reply: byte tokenizer + plain template, <s> prompt reply </s>;
// the reply's bytes and </s> are the targets.
struct Reply {
  std::vector<int> tokens;
  std::vector<bool> target;  // per token: predicted and scored
  int count() const { int n = 0; for (bool b : target) n += b; return n; }
};
inline Reply Render(const std::string& prompt, const std::string& reply) {
  Reply r;
  r.tokens.push_back(256);
  r.target.push_back(false);
  for (unsigned char c : prompt) r.tokens.push_back(c), r.target.push_back(false);
  for (unsigned char c : reply) r.tokens.push_back(c), r.target.push_back(true);
  r.tokens.push_back(257);
  r.target.push_back(true);
  return r;
}

// Σ log p(target) over a reply, as a tape node; adapters: [layer][target], or
// null for the base alone.
inline int ReplyLogProb(Tape& tp, const NodeWeights& w, const std::vector<std::vector<LoraNodes>>* adapters,
                        const Reply& rep) {
  auto W = [&](const std::string& name) -> const Vec& { return w.at(name); };
  const int n = static_cast<int>(rep.tokens.size()) - 1;  // positions: inputs t[0..n-1]
  const Vec& emb = W("model.embed_tokens.weight");
  std::vector<Vec> x(n);
  for (int p = 0; p < n; ++p) x[p].assign(emb.begin() + rep.tokens[p] * D, emb.begin() + (rep.tokens[p] + 1) * D);
  for (int l = 0; l < L; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    auto lin = [&](const Vec& in, int t) {
      int din, dout;
      Dims(t, &din, &dout);
      return Linear(tp, in, W(TargetName(l, t)), din, dout, adapters ? &(*adapters)[l][t] : nullptr);
    };
    std::vector<Vec> q(n), k(n), v(n);
    for (int p = 0; p < n; ++p) {
      const Vec xn = RmsNorm(tp, x[p], W(pre + "input_layernorm.weight"));
      q[p] = lin(xn, 0), k[p] = lin(xn, 1), v[p] = lin(xn, 2);
      for (int h = 0; h < H; ++h) Rope(tp, q[p], h * HD, p);
      for (int h = 0; h < KV; ++h) Rope(tp, k[p], h * HD, p);
    }
    for (int p = 0; p < n; ++p) {
      Vec attn(H * HD);
      for (int h = 0; h < H; ++h) {
        const int kvh = h / (H / KV);
        const Vec qh(q[p].begin() + h * HD, q[p].begin() + (h + 1) * HD);
        Vec e;
        for (int j = 0; j <= p; ++j) {
          const int sc = tp.Dot(qh, Vec(k[j].begin() + kvh * HD, k[j].begin() + (kvh + 1) * HD));
          e.push_back(tp.Exp(tp.Lin({{sc, 1 / std::sqrt(static_cast<double>(HD))}})));
        }
        std::vector<std::pair<int, double>> sum;
        for (int i : e) sum.push_back({i, 1});
        const int inv = tp.Inv(tp.Lin(sum));
        for (int c = 0; c < HD; ++c) {
          Vec vals;
          for (int j = 0; j <= p; ++j) vals.push_back(v[j][kvh * HD + c]);
          attn[h * HD + c] = tp.Mul(tp.Dot(e, vals), inv);
        }
      }
      const Vec o = lin(attn, 3);
      Vec res(D);
      for (int i = 0; i < D; ++i) res[i] = tp.Add(x[p][i], o[i]);
      const Vec xn = RmsNorm(tp, res, W(pre + "post_attention_layernorm.weight"));
      const Vec g = lin(xn, 4), u = lin(xn, 5);
      Vec hdn(F);
      for (int i = 0; i < F; ++i) hdn[i] = tp.Mul(tp.Silu(g[i]), u[i]);
      const Vec dn = lin(hdn, 6);
      for (int i = 0; i < D; ++i) x[p][i] = tp.Add(res[i], dn[i]);
    }
  }
  std::vector<std::pair<int, double>> logp;
  for (int p = 0; p < n; ++p) {
    if (!rep.target[p + 1]) continue;
    const Vec xn = RmsNorm(tp, x[p], W("model.norm.weight"));
    const Vec logits = Linear(tp, xn, W("lm_head.weight"), D, V);
    double mx = -1e300;
    for (int i : logits) mx = std::max(mx, tp.v(i));
    std::vector<std::pair<int, double>> se;
    for (int i : logits) se.push_back({tp.Exp(tp.Lin({{i, 1}}, -mx)), 1});
    const int lse = tp.Lin({{tp.Log(tp.Lin(se)), 1}}, mx);
    logp.push_back({tp.Lin({{logits[rep.tokens[p + 1]], 1}, {lse, -1}}), 1});
  }
  return tp.Lin(logp);
}

// ---- TRL's losses and PyTorch's AdamW ----------------------------------------------

// −log σ(x) = log(1 + e^(−x)).
inline int NegLogSigmoid(Tape& tp, int x) { return tp.Log(tp.Lin({{tp.Exp(tp.Lin({{x, -1}})), 1}}, 1)); }

struct Method {
  std::string yaml;  // the preference: section
  std::string name;
  double beta = 0.1, ls = 0, lambda = 0.1;
};

// dpo with and without label smoothing, ipo, orpo.
inline std::vector<Method> Methods() {
  return {{"preference: {method: dpo, beta: 0.5}\n", "dpo", 0.5, 0.0, 0.1},
          {"preference: {method: dpo, beta: 0.5, label_smoothing: 0.2}\n", "dpo", 0.5, 0.2, 0.1},
          {"preference: {method: ipo, beta: 0.5}\n", "ipo", 0.5, 0.0, 0.1},
          {"preference: {method: orpo, orpo_lambda: 0.5}\n", "orpo", 0.1, 0.0, 0.5}};
}

// sc, sr: the policy's sums (nodes); nc, nr: target counts; rc, rr: the reference's sums.
inline int PairLoss(Tape& tp, const Method& me, int sc, int sr, int nc, int nr, double rc, double rr) {
  if (me.name == "dpo") {
    const int z = tp.Lin({{sc, me.beta}, {sr, -me.beta}}, -me.beta * (rc - rr));
    return tp.Lin({{NegLogSigmoid(tp, z), 1 - me.ls}, {NegLogSigmoid(tp, tp.Lin({{z, -1}})), me.ls}});
  }
  if (me.name == "ipo") {
    const int h = tp.Lin({{sc, 1.0 / nc}, {sr, -1.0 / nr}}, -(rc / nc - rr / nr) - 1 / (2 * me.beta));
    return tp.Mul(h, h);
  }
  // orpo: −a_c + λ·(−log σ(log odds_c − log odds_r)), a = S/N, log odds = a − log(1 − eᵃ).
  const int ac = tp.Lin({{sc, 1.0 / nc}}), ar = tp.Lin({{sr, 1.0 / nr}});
  auto log_odds = [&](int a) { return tp.Lin({{a, 1}, {tp.Log(tp.Lin({{tp.Exp(a), -1}}, 1)), -1}}); };
  const int d = tp.Lin({{log_odds(ac), 1}, {log_odds(ar), -1}});
  return tp.Lin({{ac, -1}, {NegLogSigmoid(tp, d), me.lambda}});
}

// PyTorch's AdamW on one parameter (decoupled decay first, where the
// parameter's group decays), step counted from 1.
struct AdamW {
  double m = 0, v = 0, eps = kAdamEps, lr = kLr;
  void Step(double* p, double g, int step, bool decay = true) {
    if (decay) *p -= lr * kWd * *p;
    m = kB1 * m + (1 - kB1) * g;
    v = kB2 * v + (1 - kB2) * g * g;
    const double mh = m / (1 - std::pow(kB1, step)), vh = v / (1 - std::pow(kB2, step));
    *p -= lr * mh / (std::sqrt(vh) + eps);
  }
};

// kPairs pairs (one global batch: every step trains on all of them) as TRL
// standard rows in `path`, and their rendered replies (chosen, rejected).
inline std::vector<std::pair<Reply, Reply>> WritePairs(const std::string& path) {
  const char* rows[kPairs][3] = {{"ab=", "ba", "ab"}, {"cde=", "edc", "ced"}, {"fg=", "gf", "gff"}, {"hah=", "hah", "ah"}};
  std::ofstream f(path);
  std::vector<std::pair<Reply, Reply>> replies;
  for (const auto& r : rows) {
    f << "{\"prompt\":\"" << r[0] << "\",\"chosen\":\"" << r[1] << "\",\"rejected\":\"" << r[2] << "\"}\n";
    replies.push_back({Render(r[0], r[1]), Render(r[0], r[2])});
  }
  return replies;
}

}  // namespace shard::pref_tape
