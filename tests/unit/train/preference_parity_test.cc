// Preference parity (issue 31): DPO (with and without label smoothing), IPO
// and ORPO through the Trainer — model.from_hf, LoRA from a given PEFT
// adapter, pairs from JSONL, ranks as threads at world 1 and 2 — against a
// reference written here from scratch: the model's forward on a scalar
// reverse-mode autodiff tape in double precision, each reply's summed target
// log-probs, TRL's loss formulas written out on the tape, the reference
// model's sums from the base without the adapters (TRL/PEFT's reference under
// LoRA), and PyTorch's AdamW. Nothing of the engine's model, kernels, loss or
// optimizer is used. (The tape and the fixture's writers repeat
// lora_parity_test.cc's; a shared header for both is a follow-up.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>

#include "shard/train/trainer.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

// ---- The model's shape --------------------------------------------------------

constexpr int V = 265, D = 16, F = 24, L = 2, H = 4, KV = 2, HD = D / H, T = 16;  // V: the byte tokenizer
constexpr int R = 2;
constexpr double kAlpha = 4, kScale = kAlpha / R, kEps = 1e-5, kTheta = 10000;
constexpr int kPairs = 4, kSteps = 3;
constexpr double kLr = 1e-2, kWd = 0.01, kB1 = 0.9, kB2 = 0.999, kAdamEps = 1e-8;
const char* kTargets[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

// in, out features of each target, in kTargets order.
void Dims(int t, int* in, int* out) {
  const int io[7][2] = {{D, H * HD}, {D, KV * HD}, {D, KV * HD}, {H * HD, D}, {D, F}, {D, F}, {F, D}};
  *in = io[t][0];
  *out = io[t][1];
}
const char* Module(int t) { return t < 4 ? "self_attn" : "mlp"; }

using Tensors = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;

// A safetensors file (8-byte little-endian header length, JSON header, data).
void WriteSafetensors(const std::string& path, const Tensors& ts) {
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

std::vector<float> Random(std::mt19937& rng, size_t n, double sd, double mean = 0) {
  std::normal_distribution<double> g(mean, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(g(rng));
  return v;
}

// ---- A scalar reverse-mode autodiff tape ---------------------------------------

struct Tape {
  struct Node {
    double v = 0, g = 0;
    std::vector<std::pair<int, double>> in;  // parent, d(this)/d(parent)
  };
  std::vector<Node> n;
  int Push(double v, std::vector<std::pair<int, double>> in = {}) {
    n.push_back({v, 0, std::move(in)});
    return static_cast<int>(n.size()) - 1;
  }
  double v(int i) const { return n[i].v; }
  int Leaf(double x) { return Push(x); }
  // c0 + sum coef_i x_i
  int Lin(const std::vector<std::pair<int, double>>& terms, double c0 = 0) {
    double s = c0;
    for (auto [i, c] : terms) s += c * n[i].v;
    return Push(s, terms);
  }
  int Add(int a, int b) { return Lin({{a, 1}, {b, 1}}); }
  int Mul(int a, int b) { return Push(n[a].v * n[b].v, {{a, n[b].v}, {b, n[a].v}}); }
  int Dot(const std::vector<int>& a, const std::vector<int>& b) {
    double s = 0;
    std::vector<std::pair<int, double>> in;
    for (size_t i = 0; i < a.size(); ++i) {
      s += n[a[i]].v * n[b[i]].v;
      in.push_back({a[i], n[b[i]].v});
      in.push_back({b[i], n[a[i]].v});
    }
    return Push(s, std::move(in));
  }
  int Exp(int a) { const double e = std::exp(n[a].v); return Push(e, {{a, e}}); }
  int Log(int a) { return Push(std::log(n[a].v), {{a, 1 / n[a].v}}); }
  int Inv(int a) { return Push(1 / n[a].v, {{a, -1 / (n[a].v * n[a].v)}}); }
  int Rsqrt(int a) { const double r = 1 / std::sqrt(n[a].v); return Push(r, {{a, -0.5 * r * r * r}}); }
  int Silu(int a) {
    const double x = n[a].v, sg = 1 / (1 + std::exp(-x));
    return Push(x * sg, {{a, sg * (1 + x * (1 - sg))}});
  }
  void Backward(int out) {
    n[out].g = 1;
    for (int i = out; i >= 0; --i)
      for (auto [p, d] : n[i].in) n[p].g += d * n[i].g;
  }
};

using Vec = std::vector<int>;

struct RefModel {
  Tensors base;                                      // HF names
  std::vector<std::vector<std::vector<double>>> a;  // [layer][target] A [R x in] then B [out x R], flat
};

// y = x·Wᵀ (+ s·(x·Aᵀ)·Bᵀ); W constant [out, in]; A, B tape leaves.
Vec Linear(Tape& tp, const Vec& x, const std::vector<float>& w, int in, int out, const Vec* A, const Vec* B) {
  Vec y(out);
  Vec t;
  if (A) {
    t.resize(R);
    for (int j = 0; j < R; ++j) t[j] = tp.Dot(Vec(A->begin() + j * in, A->begin() + (j + 1) * in), x);
  }
  for (int o = 0; o < out; ++o) {
    std::vector<std::pair<int, double>> terms;
    for (int i = 0; i < in; ++i) terms.push_back({x[i], w[static_cast<size_t>(o) * in + i]});
    if (A) {
      const int lora = tp.Dot(Vec(B->begin() + o * R, B->begin() + (o + 1) * R), t);
      terms.push_back({lora, kScale});
    }
    y[o] = tp.Lin(terms);
  }
  return y;
}

Vec RmsNorm(Tape& tp, const Vec& x, const std::vector<float>& w) {
  std::vector<std::pair<int, double>> sq;
  for (int i : x) sq.push_back({tp.Mul(i, i), 1.0 / x.size()});
  const int r = tp.Rsqrt(tp.Lin(sq, kEps));
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = tp.Lin({{tp.Mul(x[i], r), w[i]}});
  return y;
}

// HF's rotate_half RoPE on one head's [HD] slice at position p.
void Rope(Tape& tp, Vec& x, int off, int p) {
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
Reply Render(const std::string& prompt, const std::string& reply) {
  Reply r;
  r.tokens.push_back(256);
  r.target.push_back(false);
  for (unsigned char c : prompt) r.tokens.push_back(c), r.target.push_back(false);
  for (unsigned char c : reply) r.tokens.push_back(c), r.target.push_back(true);
  r.tokens.push_back(257);
  r.target.push_back(true);
  return r;
}

// Σ log p(target) over a reply, as a tape node; adapters: [layer][target]
// leaves (A then B), or null for the base alone.
int ReplyLogProb(Tape& tp, const RefModel& m, const std::vector<std::vector<Vec>>* adapters, const Reply& rep) {
  auto W = [&](const std::string& name) -> const std::vector<float>& { return m.base.at(name).second; };
  const int n = static_cast<int>(rep.tokens.size()) - 1;  // positions: inputs t[0..n-1]
  std::vector<Vec> x(n);
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < D; ++i) x[p].push_back(tp.Leaf(W("model.embed_tokens.weight")[rep.tokens[p] * D + i]));
  for (int l = 0; l < L; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    auto lin = [&](const Vec& in, int t) {
      int din, dout;
      Dims(t, &din, &dout);
      if (!adapters) return Linear(tp, in, W(pre + Module(t) + "." + kTargets[t] + ".weight"), din, dout, nullptr, nullptr);
      const Vec& ab = (*adapters)[l][t];
      const Vec A(ab.begin(), ab.begin() + R * din), B(ab.begin() + R * din, ab.end());
      return Linear(tp, in, W(pre + Module(t) + "." + kTargets[t] + ".weight"), din, dout, &A, &B);
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
      for (int i = 0; i < D; ++i) x[p][i] = tp.Add(x[p][i], o[i]);
      const Vec xn = RmsNorm(tp, x[p], W(pre + "post_attention_layernorm.weight"));
      const Vec g = lin(xn, 4), u = lin(xn, 5);
      Vec hdn(F);
      for (int i = 0; i < F; ++i) hdn[i] = tp.Mul(tp.Silu(g[i]), u[i]);
      const Vec dn = lin(hdn, 6);
      for (int i = 0; i < D; ++i) x[p][i] = tp.Add(x[p][i], dn[i]);
    }
  }
  std::vector<std::pair<int, double>> logp;
  for (int p = 0; p < n; ++p) {
    if (!rep.target[p + 1]) continue;
    const Vec xn = RmsNorm(tp, x[p], W("model.norm.weight"));
    const Vec logits = Linear(tp, xn, W("lm_head.weight"), D, V, nullptr, nullptr);
    double mx = -1e300;
    for (int i : logits) mx = std::max(mx, tp.v(i));
    std::vector<std::pair<int, double>> se;
    for (int i : logits) se.push_back({tp.Exp(tp.Lin({{i, 1}}, -mx)), 1});
    const int lse = tp.Lin({{tp.Log(tp.Lin(se)), 1}}, mx);
    logp.push_back({tp.Lin({{logits[rep.tokens[p + 1]], 1}, {lse, -1}}), 1});
  }
  return tp.Lin(logp);
}

// TRL's formulas on the tape. −log σ(x) = log(1 + e^(−x)).
int NegLogSigmoid(Tape& tp, int x) { return tp.Log(tp.Lin({{tp.Exp(tp.Lin({{x, -1}})), 1}}, 1)); }

struct Method {
  std::string yaml;  // the preference: section
  std::string name;
  double beta = 0.1, ls = 0, lambda = 0.1;
};

int PairLoss(Tape& tp, const Method& me, int sc, int sr, int nc, int nr, double rc, double rr) {
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

struct Fixture {
  std::string dir, model, adapter, pairs;
  RefModel ref;
  std::vector<std::pair<Reply, Reply>> replies;  // chosen, rejected
};

Fixture Make() {
  Fixture fx;
  fx.dir = testing::TempDir() + "/preference_parity." + std::to_string(::getpid());
  fx.model = fx.dir + "/base", fx.adapter = fx.dir + "/adapter", fx.pairs = fx.dir + "/pairs.jsonl";
  fs::create_directories(fx.model);
  fs::create_directories(fx.adapter);
  std::mt19937 rng(13);
  Tensors& b = fx.ref.base;
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
      b[pre + Module(t) + "." + kTargets[t] + ".weight"] = {{out, in}, Random(rng, out * in, 0.3)};
    }
  }
  WriteSafetensors(fx.model + "/model.safetensors", b);
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", D},
                        {"intermediate_size", F}, {"num_hidden_layers", L}, {"num_attention_heads", H},
                        {"num_key_value_heads", KV}, {"rms_norm_eps", kEps}, {"rope_theta", kTheta},
                        {"max_position_embeddings", 64}, {"vocab_size", V}, {"tie_word_embeddings", false},
                        {"hidden_act", "silu"}};
  std::ofstream(fx.model + "/config.json") << cfg.dump(2);
  // A PEFT adapter with A and B nonzero: the policy differs from the base
  // (its reference) from the first step.
  Tensors ad;
  fx.ref.a.assign(L, std::vector<std::vector<double>>(7));
  for (int l = 0; l < L; ++l)
    for (int t = 0; t < 7; ++t) {
      int in, out;
      Dims(t, &in, &out);
      const std::vector<float> A = Random(rng, R * in, 0.2), B = Random(rng, out * R, 0.2);
      const std::string pre = "base_model.model.model.layers." + std::to_string(l) + "." + Module(t) + "." + kTargets[t];
      ad[pre + ".lora_A.weight"] = {{R, in}, A};
      ad[pre + ".lora_B.weight"] = {{out, R}, B};
      fx.ref.a[l][t].assign(A.begin(), A.end());
      fx.ref.a[l][t].insert(fx.ref.a[l][t].end(), B.begin(), B.end());
    }
  WriteSafetensors(fx.adapter + "/adapter_model.safetensors", ad);
  nlohmann::json acfg = {{"peft_type", "LORA"}, {"task_type", "CAUSAL_LM"}, {"r", R}, {"lora_alpha", kAlpha},
                         {"lora_dropout", 0.0}, {"bias", "none"}, {"use_rslora", false},
                         {"target_modules", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
                         {"base_model_name_or_path", fx.model}};
  std::ofstream(fx.adapter + "/adapter_config.json") << acfg.dump(2);
  // kPairs pairs: one global batch, so every step trains on all of them.
  const char* rows[kPairs][3] = {{"ab=", "ba", "ab"}, {"cde=", "edc", "ced"}, {"fg=", "gf", "gff"}, {"hah=", "hah", "ah"}};
  std::ofstream f(fx.pairs);
  for (const auto& r : rows) {
    f << "{\"prompt\":\"" << r[0] << "\",\"chosen\":\"" << r[1] << "\",\"rejected\":\"" << r[2] << "\"}\n";
    fx.replies.push_back({Render(r[0], r[1]), Render(r[0], r[2])});
  }
  return fx;
}

std::string JobYaml(const Fixture& fx, const Method& me, int world, const std::string& tag) {
  return "name: pref_parity\nmodel: {from_hf: " + fx.model + "}\n"
         "data: {jsonl: " + fx.pairs + ", tokenizer: byte, template: plain, seq_len: " + std::to_string(T) +
         ", shuffle: false}\n"
         "train: {steps: " + std::to_string(kSteps) + ", global_batch: " + std::to_string(kPairs) +
         ", micro_batch: 1, lr: 1.0e-2, warmup_steps: 0, schedule: constant, weight_decay: 0.01, precision: fp32, "
         "adam_betas: [0.9, 0.999], grad_clip: 0, log_every: 1000}\n"
         "parallel: {world_size: " + std::to_string(world) + "}\n"
         "checkpoint: {dir: " + fx.dir + "/ckpt-" + tag + ", resume: none}\nresources: {device: cpu}\n"
         "peft: {method: lora, r: " + std::to_string(R) + ", alpha: 4, dropout: 0.0, target_modules: all-linear, "
         "from_adapter: " + fx.adapter + "}\n" + me.yaml;
}

struct EngineRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> layers;  // LoraLayout order: per target A then B (same as RefModel::a)
};

EngineRun TrainEngine(const Fixture& fx, const Method& me, int world, const std::string& tag) {
  std::vector<EngineRun> out(world);
  const Status created = testing_ranks::OnTrainerRanks(JobYaml(fx, me, world, tag), world, {}, [&](Trainer& tr, int r) {
    Status st = tr.Run([&](const StepMetrics& m) { out[r].losses.push_back(m.loss); });
    ASSERT_TRUE(st.ok()) << st.ToString();
    const LoraLayout& ll = tr.lora()->layout();
    for (int l = 0; l < ll.num_layers; ++l) {
      out[r].layers.emplace_back(ll.layer_numel);
      tr.lora()->ReadLayer(l, out[r].layers.back().data());
    }
  });
  EXPECT_TRUE(created.ok()) << created.ToString();
  return out[0];
}

TEST(PreferenceParity, AdamWStepsThroughLoraMatchAnIndependentReference) {
  const Fixture fx = Make();
  // The reference model's sums: the base alone, once.
  std::vector<double> ref_c, ref_r;
  for (const auto& [c, r] : fx.replies) {
    Tape tp;
    ref_c.push_back(tp.v(ReplyLogProb(tp, fx.ref, nullptr, c)));
    ref_r.push_back(tp.v(ReplyLogProb(tp, fx.ref, nullptr, r)));
  }
  const std::vector<Method> methods = {
      {"preference: {method: dpo, beta: 0.5}\n", "dpo", 0.5, 0.0, 0.1},
      {"preference: {method: dpo, beta: 0.5, label_smoothing: 0.2}\n", "dpo", 0.5, 0.2, 0.1},
      {"preference: {method: ipo, beta: 0.5}\n", "ipo", 0.5, 0.0, 0.1},
      {"preference: {method: orpo, orpo_lambda: 0.5}\n", "orpo", 0.1, 0.0, 0.5}};
  for (size_t mi = 0; mi < methods.size(); ++mi) {
    const Method& me = methods[mi];
    SCOPED_TRACE(me.yaml);
    // Three steps: mean pair loss on the tape, PyTorch's AdamW.
    RefModel m = fx.ref;
    std::vector<std::vector<std::vector<double>>> mom1(L, std::vector<std::vector<double>>(7)), mom2 = mom1;
    for (int l = 0; l < L; ++l)
      for (int t = 0; t < 7; ++t) mom1[l][t].assign(m.a[l][t].size(), 0), mom2[l][t] = mom1[l][t];
    std::vector<double> ref_losses;
    for (int step = 1; step <= kSteps; ++step) {
      Tape tp;
      std::vector<std::vector<Vec>> leaves(L, std::vector<Vec>(7));
      for (int l = 0; l < L; ++l)
        for (int t = 0; t < 7; ++t)
          for (double x : m.a[l][t]) leaves[l][t].push_back(tp.Leaf(x));
      std::vector<std::pair<int, double>> pair_losses;
      for (size_t k = 0; k < fx.replies.size(); ++k) {
        const Reply& c = fx.replies[k].first;
        const Reply& r = fx.replies[k].second;
        const int sc = ReplyLogProb(tp, m, &leaves, c), sr = ReplyLogProb(tp, m, &leaves, r);
        pair_losses.push_back({PairLoss(tp, me, sc, sr, c.count(), r.count(), ref_c[k], ref_r[k]), 1.0 / kPairs});
      }
      const int loss = tp.Lin(pair_losses);
      tp.Backward(loss);
      ref_losses.push_back(tp.v(loss));
      for (int l = 0; l < L; ++l)
        for (int t = 0; t < 7; ++t)
          for (size_t i = 0; i < m.a[l][t].size(); ++i) {
            const double g = tp.n[leaves[l][t][i]].g;
            double& p = m.a[l][t][i];
            double& m1 = mom1[l][t][i];
            double& m2 = mom2[l][t][i];
            p -= kLr * kWd * p;
            m1 = kB1 * m1 + (1 - kB1) * g;
            m2 = kB2 * m2 + (1 - kB2) * g * g;
            const double mh = m1 / (1 - std::pow(kB1, step)), vh = m2 / (1 - std::pow(kB2, step));
            p -= kLr * mh / (std::sqrt(vh) + kAdamEps);
          }
    }
    for (int world : {1, 2}) {
      SCOPED_TRACE("world " + std::to_string(world));
      const EngineRun e = TrainEngine(fx, me, world, std::to_string(mi) + "-" + std::to_string(world));
      ASSERT_EQ(e.losses.size(), static_cast<size_t>(kSteps));
      for (int s = 0; s < kSteps; ++s)
        EXPECT_NEAR(e.losses[s], ref_losses[s], 1e-5 * std::abs(ref_losses[s])) << "step " << s + 1;
      ASSERT_EQ(e.layers.size(), static_cast<size_t>(L));
      double max_diff = 0, max_moved = 0, max_abs = 0;
      for (int l = 0; l < L; ++l) {
        size_t k = 0;
        for (int t = 0; t < 7; ++t)
          for (size_t i = 0; i < m.a[l][t].size(); ++i, ++k) {
            max_diff = std::max(max_diff, std::fabs(e.layers[l][k] - m.a[l][t][i]));
            max_moved = std::max(max_moved, std::fabs(m.a[l][t][i] - fx.ref.a[l][t][i]));
            max_abs = std::max(max_abs, std::fabs(m.a[l][t][i]));
          }
        ASSERT_EQ(k, e.layers[l].size());
      }
      std::printf("%s world %d: losses %.6f %.6f %.6f (reference %.6f %.6f %.6f); adapters moved up to %.4f, "
                  "engine vs reference max |diff| %.2e (%.2e of the largest weight)\n",
                  me.yaml.substr(12, me.yaml.size() - 13).c_str(), world, e.losses[0], e.losses[1], e.losses[2], ref_losses[0], ref_losses[1],
                  ref_losses[2], max_moved, max_diff, max_diff / max_abs);
      EXPECT_GT(max_moved, 2 * kLr) << "three AdamW steps move the adapters by about lr each";
      EXPECT_LT(max_diff, 1e-5 * max_abs) << "adapters after " << kSteps << " steps";
    }
  }
  fs::remove_all(fx.dir);
}

}  // namespace
}  // namespace shard
