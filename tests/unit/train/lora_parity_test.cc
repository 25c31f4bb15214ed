// Parity of LoRA training with an independent reference (issue 20, "adapter
// weights after a few AdamW steps from a given PEFT adapter"): the test writes
// a small Llama as an HF folder and a PEFT adapter folder itself (its own
// safetensors writer), trains three steps through the Trainer (model.from_hf +
// peft.from_adapter, ranks as threads), and compares the adapters and losses
// with a reference written here from scratch: the model's forward on a
// scalar reverse-mode autodiff tape in double precision (embedding, RMSNorm,
// q/k/v/o, RoPE, causal grouped-query attention, SwiGLU, head, mean
// cross-entropy over the batch's targets; y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ on every
// linear), then PyTorch's AdamW (decoupled weight decay, bias-corrected
// moments). Nothing of the engine's model, kernels or optimizer is used.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>

#include "shard/train/trainer.h"
#include "tests/unit/train/autodiff_tape.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

// ---- The model's shape --------------------------------------------------------

constexpr int V = 40, D = 16, F = 24, L = 2, H = 4, KV = 2, HD = D / H, T = 8;
constexpr int R = 2;
constexpr double kAlpha = 4, kScale = kAlpha / R, kEps = 1e-5, kTheta = 10000;
constexpr int kBatch = 4, kSteps = 3;
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

using Tape = autodiff::Tape;  // tests/unit/train/autodiff_tape.h

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

// Mean cross-entropy over every target of the batch; fills dA/dB per layer
// and target (same layout as RefModel::a). Returns the loss.
double LossAndGrads(const RefModel& m, const std::vector<std::vector<int>>& seqs,
                    std::vector<std::vector<std::vector<double>>>* grads) {
  Tape tp;
  // Adapter leaves: [layer][target] -> A then B.
  std::vector<std::vector<Vec>> leaves(L, std::vector<Vec>(7));
  for (int l = 0; l < L; ++l)
    for (int t = 0; t < 7; ++t)
      for (double x : m.a[l][t]) leaves[l][t].push_back(tp.Leaf(x));
  auto W = [&](const std::string& name) -> const std::vector<float>& { return m.base.at(name).second; };
  std::vector<std::pair<int, double>> losses;
  const double inv_targets = 1.0 / (seqs.size() * T);
  for (const auto& s : seqs) {
    std::vector<Vec> x(T);
    for (int p = 0; p < T; ++p)
      for (int i = 0; i < D; ++i) x[p].push_back(tp.Leaf(W("model.embed_tokens.weight")[s[p] * D + i]));
    for (int l = 0; l < L; ++l) {
      const std::string pre = "model.layers." + std::to_string(l) + ".";
      auto lin = [&](const Vec& in, int t) {
        int din, dout;
        Dims(t, &din, &dout);
        const Vec& ab = leaves[l][t];
        const Vec A(ab.begin(), ab.begin() + R * din), B(ab.begin() + R * din, ab.end());
        return Linear(tp, in, W(pre + Module(t) + "." + kTargets[t] + ".weight"), din, dout, &A, &B);
      };
      std::vector<Vec> q(T), k(T), v(T);
      for (int p = 0; p < T; ++p) {
        const Vec xn = RmsNorm(tp, x[p], W(pre + "input_layernorm.weight"));
        q[p] = lin(xn, 0), k[p] = lin(xn, 1), v[p] = lin(xn, 2);
        for (int h = 0; h < H; ++h) Rope(tp, q[p], h * HD, p);
        for (int h = 0; h < KV; ++h) Rope(tp, k[p], h * HD, p);
      }
      for (int p = 0; p < T; ++p) {
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
    for (int p = 0; p < T; ++p) {
      const Vec xn = RmsNorm(tp, x[p], W("model.norm.weight"));
      const Vec logits = Linear(tp, xn, W("lm_head.weight"), D, V, nullptr, nullptr);
      double mx = -1e300;
      for (int i : logits) mx = std::max(mx, tp.v(i));
      std::vector<std::pair<int, double>> se;
      for (int i : logits) se.push_back({tp.Exp(tp.Lin({{i, 1}}, -mx)), 1});
      const int lse = tp.Lin({{tp.Log(tp.Lin(se)), 1}}, mx);
      losses.push_back({tp.Lin({{lse, 1}, {logits[s[p + 1]], -1}}), inv_targets});
    }
  }
  const int loss = tp.Lin(losses);
  tp.Backward(loss);
  grads->assign(L, std::vector<std::vector<double>>(7));
  for (int l = 0; l < L; ++l)
    for (int t = 0; t < 7; ++t)
      for (int i : leaves[l][t]) (*grads)[l][t].push_back(tp.n[i].g);
  return tp.v(loss);
}

// ---- The folders and the job ------------------------------------------------------

struct Fixture {
  std::string dir, model, adapter, tokens;
  RefModel ref;
  std::vector<std::vector<int>> seqs;  // the batch: every window, seq_len + 1 tokens each
};

Fixture Make() {
  Fixture fx;
  fx.dir = testing::TempDir() + "/lora_parity." + std::to_string(::getpid());
  fx.model = fx.dir + "/base", fx.adapter = fx.dir + "/adapter", fx.tokens = fx.dir + "/tokens.u32";
  fs::create_directories(fx.model);
  fs::create_directories(fx.adapter);
  std::mt19937 rng(11);
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

  // The PEFT adapter: both A and B nonzero, so the adapters shape the loss.
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

  // Exactly one global batch of windows: every step trains on all of them.
  std::vector<uint32_t> toks(kBatch * T + 1);
  for (auto& x : toks) x = rng() % V;
  std::ofstream(fx.tokens, std::ios::binary).write(reinterpret_cast<const char*>(toks.data()), toks.size() * 4);
  for (int w = 0; w < kBatch; ++w) fx.seqs.emplace_back(toks.begin() + w * T, toks.begin() + w * T + T + 1);
  return fx;
}

std::string JobYaml(const Fixture& fx, int world) {
  return "name: lora_parity\nmodel: {from_hf: " + fx.model + "}\ndata: {tokens: " + fx.tokens +
         ", seq_len: " + std::to_string(T) + ", shuffle: false}\n"
         "train: {steps: " + std::to_string(kSteps) + ", global_batch: " + std::to_string(kBatch) +
         ", micro_batch: 1, lr: 1.0e-2, warmup_steps: 0, schedule: constant, weight_decay: 0.01, "
         "adam_betas: [0.9, 0.999], grad_clip: 0, log_every: 1000}\n"
         "parallel: {world_size: " + std::to_string(world) + "}\n"
         "checkpoint: {dir: " + fx.dir + "/ckpt, resume: none}\nresources: {device: cpu}\n"
         "peft: {method: lora, r: " + std::to_string(R) + ", alpha: 4, dropout: 0.0, target_modules: all-linear, "
         "from_adapter: " + fx.adapter + "}\n";
}

struct EngineRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> layers;  // LoraLayout order: per target A then B (same as RefModel::a)
};

EngineRun TrainEngine(const Fixture& fx, int world) {
  std::vector<EngineRun> out(world);
  const Status created = testing_ranks::OnTrainerRanks(JobYaml(fx, world), world, {}, [&](Trainer& tr, int r) {
    ASSERT_TRUE(tr.Run([&](const StepMetrics& m) { out[r].losses.push_back(m.loss); }).ok());
    const LoraLayout& ll = tr.lora()->layout();
    for (int l = 0; l < ll.num_layers; ++l) {
      out[r].layers.emplace_back(ll.layer_numel);
      tr.lora()->ReadLayer(l, out[r].layers.back().data());
    }
  });
  EXPECT_TRUE(created.ok()) << created.ToString();
  return out[0];
}

TEST(LoraParity, AdamWStepsFromAPeftAdapterMatchAnIndependentReference) {
  const Fixture fx = Make();
  // The reference: three steps of mean cross-entropy and PyTorch's AdamW.
  RefModel m = fx.ref;
  std::vector<std::vector<std::vector<double>>> mom1(L, std::vector<std::vector<double>>(7)), mom2 = mom1;
  for (int l = 0; l < L; ++l)
    for (int t = 0; t < 7; ++t) mom1[l][t].assign(m.a[l][t].size(), 0), mom2[l][t] = mom1[l][t];
  std::vector<double> ref_losses;
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<std::vector<std::vector<double>>> g;
    ref_losses.push_back(LossAndGrads(m, fx.seqs, &g));
    for (int l = 0; l < L; ++l)
      for (int t = 0; t < 7; ++t)
        for (size_t i = 0; i < g[l][t].size(); ++i) {
          double& p = m.a[l][t][i];
          double& m1 = mom1[l][t][i];
          double& m2 = mom2[l][t][i];
          p -= kLr * kWd * p;
          m1 = kB1 * m1 + (1 - kB1) * g[l][t][i];
          m2 = kB2 * m2 + (1 - kB2) * g[l][t][i] * g[l][t][i];
          const double mh = m1 / (1 - std::pow(kB1, step)), vh = m2 / (1 - std::pow(kB2, step));
          p -= kLr * mh / (std::sqrt(vh) + kAdamEps);
        }
  }
  for (int world : {1, 2}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const EngineRun e = TrainEngine(fx, world);
    ASSERT_EQ(e.losses.size(), static_cast<size_t>(kSteps));
    for (int s = 0; s < kSteps; ++s) EXPECT_NEAR(e.losses[s], ref_losses[s], 1e-5 * ref_losses[s]) << "step " << s + 1;
    EXPECT_LT(ref_losses.back(), ref_losses.front()) << "the adapters learn";
    ASSERT_EQ(e.layers.size(), static_cast<size_t>(L));
    double max_diff = 0, max_moved = 0;
    for (int l = 0; l < L; ++l) {
      size_t k = 0;
      for (int t = 0; t < 7; ++t)
        for (size_t i = 0; i < m.a[l][t].size(); ++i, ++k) {
          max_diff = std::max(max_diff, std::fabs(e.layers[l][k] - m.a[l][t][i]));
          max_moved = std::max(max_moved, std::fabs(m.a[l][t][i] - fx.ref.a[l][t][i]));
        }
      ASSERT_EQ(k, e.layers[l].size());
    }
    std::printf("world %d: losses %.6f %.6f %.6f (reference %.6f %.6f %.6f); adapters moved up to %.4f, "
                "engine vs reference max |diff| %.2e\n",
                world, e.losses[0], e.losses[1], e.losses[2], ref_losses[0], ref_losses[1], ref_losses[2], max_moved,
                max_diff);
    EXPECT_GT(max_moved, 2 * kLr) << "three AdamW steps move the adapters by about lr each";
    EXPECT_LT(max_diff, 2e-5) << "adapters after " << kSteps << " steps";
  }
}

}  // namespace
}  // namespace shard
