// Mixture-of-experts throughput on the CPU backend (docs/moe.md).
//
// 1. Model forward+backward tokens/s of tiny-qwen3-moe (8 experts, top-2,
//    expert width 96) against a dense qwen3 of the same ACTIVE parameters: the
//    same attention, one SwiGLU MLP of width k·fe = 192 per layer (the MoE
//    adds only its router, 8 x 128 per layer). What routing costs the engine:
//    the router GEMM, top-k, the permute, per-expert GEMMs over fewer rows, the
//    weighted combine, and the backward of each.
// 2. The experts' gate/up GEMM of one layer, grouped (Backend::MoeRoute's
//    permutation, then one GEMM per expert over its contiguous rows: the
//    engine's way) against a loop of one GEMM per token row and slot.
//
// 3. --balance HF_DIR JSONL: the expert load of a trained MoE export (the
//    demo, deploy/local/demo_moe.sh): each row's prompt + response as bytes
//    (byte tokenizer), one forward per row, and per sparse layer the share of
//    the k·T assignments each expert received (balanced: 1/E each) and the
//    aux loss (balanced: k).
//
// usage: moe_bench [steps=5] [micro_batch=8] | moe_bench --smoke | moe_bench --balance HF_DIR JSONL
// Prints figures; never judged (bench-smoke checks that it runs).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fstream>

#include <nlohmann/json.hpp>

#include "shard/backend/backend.h"
#include "shard/data/byte_tokenizer.h"
#include "shard/model/hf_io.h"
#include "shard/common/logging.h"
#include "shard/model/llama_model.h"
#include "shard/train/local_params.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Median of `reps` runs of f (after one warm-up).
double MedianSeconds(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    s.push_back(Seconds(t0));
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

int64_t ActiveParams(const shard::LlamaConfig& c) {
  if (!c.is_moe()) return c.NumParams();
  const int64_t unchosen = static_cast<int64_t>(c.num_sparse_layers()) * (c.moe.num_experts - c.moe.experts_per_tok) *
                           3 * c.hidden_size * c.moe.expert_intermediate_size;
  return c.NumParams() - unchosen;
}

// Forward+backward tokens/s of one model on the CPU backend (no optimizer).
int TrainFigures(const char* what, const shard::LlamaConfig& c, int batch, int seq, int steps) {
  auto backend = shard::CreateBackend("cpu");
  if (!backend.ok()) return std::fprintf(stderr, "%s\n", backend.status().ToString().c_str()), 1;
  shard::ModelOptions mo;
  mo.max_batch = batch;
  mo.max_seq = seq;
  auto model = shard::LlamaModel::Create(c, backend->get(), mo);
  if (!model.ok()) return std::fprintf(stderr, "%s: %s\n", what, model.status().ToString().c_str()), 1;
  auto params = shard::LocalParams::Create(backend->get(), (*model)->layout(), true);
  if (!params.ok()) return std::fprintf(stderr, "%s\n", params.status().ToString().c_str()), 1;
  (*params)->InitRandom(7, 0.02f);
  const int64_t rows = int64_t{batch} * seq;
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(rows), targets(rows), positions(rows);
  for (int64_t i = 0; i < rows; ++i) {
    tokens[i] = static_cast<int32_t>(rng() % c.vocab_size);
    targets[i] = static_cast<int32_t>(rng() % c.vocab_size);
    positions[i] = static_cast<int32_t>(i % seq);
  }
  shard::DeviceBatch b{batch, seq, tokens.data(), targets.data(), positions.data(), nullptr};
  bool ok = true;
  const double s = MedianSeconds(steps, [&] {
    (*params)->ZeroGrads();
    ok &= (*model)->ForwardBackward(b, **params, 1.0f).ok();
  });
  if (!ok) return std::fprintf(stderr, "%s: forward/backward failed\n", what), 1;
  std::printf("  %-34s %8.2fM total %8.2fM active  %9.0f tokens/s  (%.1f ms per %lld-token micro-batch)\n", what,
              c.NumParams() / 1e6, ActiveParams(c) / 1e6, rows / s, 1e3 * s, static_cast<long long>(rows));
  return 0;
}

// One layer's gate/up GEMM over T tokens routed k-of-E (balanced random
// routing): grouped per expert vs one GEMM per (token, slot).
int GemmFigures(shard::Backend* be, int64_t T, int E, int k, int64_t d, int64_t fe, int reps) {
  std::mt19937 rng(5);
  std::vector<float> x(T * d), w(int64_t{E} * 2 * fe * d), y(T * k * 2 * fe), xp(T * k * d);
  for (auto& v : x) v = static_cast<float>(rng() % 1000) / 1000.0f - 0.5f;
  for (auto& v : w) v = static_cast<float>(rng() % 1000) / 1000.0f - 0.5f;
  std::vector<float> logits(T * E);
  for (auto& v : logits) v = static_cast<float>(rng() % 1000) / 100.0f;
  std::vector<float> probs(T * E), weight(T * k);
  std::vector<int32_t> expert(T * k), perm(T * k), offsets(E + 1);
  shard::MoeRouting r;
  r.rows = T, r.experts = E, r.k = k;
  r.probs = probs.data(), r.expert = expert.data(), r.weight = weight.data(), r.perm = perm.data();
  r.offsets = offsets.data();
  if (!be->MoeRoute(logits.data(), r).ok()) return std::fprintf(stderr, "MoeRoute failed\n"), 1;
  auto gemm = [&](const float* a, int64_t m, int e, float* c) {
    shard::GemmArgs g;
    g.trans_b = true;
    g.m = m, g.n = 2 * fe, g.k = d;
    g.a = a, g.lda = d;
    g.b = w.data() + int64_t{e} * 2 * fe * d, g.ldb = d;
    g.c = c, g.ldc = 2 * fe;
    be->Gemm(g);
  };
  const double grouped = MedianSeconds(reps, [&] {
    (void)be->MoePermute(x.data(), perm.data(), T * k, k, d, xp.data());
    for (int e = 0; e < E; ++e) {
      const int64_t o = offsets[e], m = offsets[e + 1] - o;
      if (m > 0) gemm(xp.data() + o * d, m, e, y.data() + o * 2 * fe);
    }
  });
  const double per_token = MedianSeconds(reps, [&] {
    for (int64_t a = 0; a < T * k; ++a) gemm(x.data() + (a / k) * d, 1, expert[a], y.data() + a * 2 * fe);
  });
  const double flops = 2.0 * T * k * d * 2 * fe;
  std::printf("  T %5lld, E %3d, top-%d, d %5lld, 2fe %5lld:  grouped %8.2f ms (%6.1f GFLOP/s)   per-token %8.2f ms "
              "(%6.1f GFLOP/s)   %.1fx\n",
              static_cast<long long>(T), E, k, static_cast<long long>(d), static_cast<long long>(2 * fe), 1e3 * grouped,
              flops / grouped / 1e9, 1e3 * per_token, flops / per_token / 1e9, per_token / grouped);
  return 0;
}

// Expert load of an exported MoE model over a JSONL file's rows.
int Balance(const std::string& dir, const std::string& jsonl) {
  auto c = shard::LlamaConfigFromHfDir(dir);
  if (!c.ok()) return std::fprintf(stderr, "%s\n", c.status().ToString().c_str()), 1;
  if (!c->is_moe()) return std::fprintf(stderr, "%s: not a mixture-of-experts model\n", dir.c_str()), 1;
  auto backend = shard::CreateBackend("cpu");
  if (!backend.ok()) return std::fprintf(stderr, "%s\n", backend.status().ToString().c_str()), 1;
  const int seq = 64;
  shard::ModelOptions mo;
  mo.max_batch = 1;
  mo.max_seq = seq;
  auto model = shard::LlamaModel::Create(*c, backend->get(), mo);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().ToString().c_str()), 1;
  std::vector<std::vector<float>> units;
  if (auto st = shard::LoadHfWeights(dir, (*model)->layout(), &units); !st.ok())
    return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  auto params = shard::LocalParams::Create(backend->get(), (*model)->layout(), false);
  if (!params.ok() || !(*params)->LoadUnits(units).ok()) return std::fprintf(stderr, "%s: cannot load\n", dir.c_str()), 1;
  std::ifstream in(jsonl);
  if (!in) return std::fprintf(stderr, "%s: cannot read\n", jsonl.c_str()), 1;
  const int E = c->moe.num_experts, k = c->moe.experts_per_tok;
  std::vector<std::vector<double>> load(c->num_layers, std::vector<double>(E, 0.0));
  double aux = 0;
  int rows = 0;
  shard::ByteTokenizer tok;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return std::fprintf(stderr, "%s: a row is not a JSON object\n", jsonl.c_str()), 1;
    std::vector<int32_t> ids;
    tok.Encode(j.value("prompt", std::string()) + j.value("response", std::string()), &ids);
    if (ids.size() < 2) continue;
    if (static_cast<int>(ids.size()) > seq) ids.resize(seq);
    const int64_t T = static_cast<int64_t>(ids.size()) - 1;
    std::vector<int32_t> targets(ids.begin() + 1, ids.end()), positions(T);
    for (int64_t t = 0; t < T; ++t) positions[t] = static_cast<int32_t>(t);
    ids.resize(T);
    shard::DeviceBatch b{1, T, ids.data(), targets.data(), positions.data(), nullptr};
    auto loss = (*model)->ForwardLoss(b, **params);
    if (!loss.ok()) return std::fprintf(stderr, "%s\n", loss.status().ToString().c_str()), 1;
    const auto counts = (*model)->moe_expert_counts();
    for (int l = 0; l < c->num_layers; ++l)
      for (int e = 0; e < E; ++e) load[l][e] += counts[l][e];
    aux += (*model)->moe_aux_loss();
    ++rows;
  }
  if (rows == 0) return std::fprintf(stderr, "%s: no rows\n", jsonl.c_str()), 1;
  std::printf("expert load of %s over %d rows of %s (share of each layer's k*T assignments; balanced %.3f):\n",
              dir.c_str(), rows, jsonl.c_str(), 1.0 / E);
  for (int l = 0; l < c->num_layers; ++l) {
    if (!c->sparse_layer(l)) continue;
    double total = 0, hi = 0, lo = 1e300;
    for (double v : load[l]) total += v, hi = std::max(hi, v), lo = std::min(lo, v);
    std::printf("  layer %d:", l);
    for (double v : load[l]) std::printf(" %.3f", v / total);
    int unused = 0;
    for (double v : load[l]) unused += v == 0;
    if (unused > 0) std::printf("   %d expert(s) unused\n", unused);
    else std::printf("   max/min %.2f\n", hi / lo);
  }
  std::printf("aux load-balancing loss %.4f (mean over rows; %d = perfectly balanced)\n", aux / rows, k);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  std::vector<int> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--balance") {
      if (i + 2 >= argc) return std::fprintf(stderr, "usage: moe_bench --balance HF_DIR JSONL\n"), 2;
      shard::InitLogging("warn");
      return Balance(argv[i + 1], argv[i + 2]);
    }
    if (a == "--smoke") {
      smoke = true;
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: moe_bench [steps=5] [micro_batch=8] | --smoke\n");
      return 0;
    } else {
      pos.push_back(std::atoi(a.c_str()));
    }
  }
  const int steps = smoke ? 1 : pos.size() > 0 ? pos[0] : 5;
  const int batch = smoke ? 1 : pos.size() > 1 ? pos[1] : 8;
  if (steps < 1 || batch < 1) return std::fprintf(stderr, "moe_bench: steps and micro_batch must be positive\n"), 2;
  const int seq = smoke ? 64 : 256;
  shard::InitLogging("warn");
  auto moe = shard::LlamaPreset("tiny-qwen3-moe");
  if (!moe.ok()) return std::fprintf(stderr, "%s\n", moe.status().ToString().c_str()), 1;
  // The same model with one dense SwiGLU of width k·fe in place of the experts.
  shard::LlamaConfig dense = *moe;
  dense.family = shard::ModelFamily::kQwen3;
  dense.moe = {};
  dense.intermediate_size = int64_t{moe->moe.experts_per_tok} * moe->moe.expert_intermediate_size;
  if (auto st = dense.Validate(); !st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  std::printf("forward+backward, CPU backend, micro-batch %d x %d tokens, median of %d:\n", batch, seq, steps);
  if (TrainFigures("tiny-qwen3-moe (8 experts, top-2)", *moe, batch, seq, steps)) return 1;
  if (TrainFigures("dense qwen3, ffn 192 (same active)", dense, batch, seq, steps)) return 1;
  auto be = shard::CreateBackend("cpu");
  if (!be.ok()) return std::fprintf(stderr, "%s\n", be.status().ToString().c_str()), 1;
  std::printf("experts' gate/up GEMM of one layer, grouped per expert vs one GEMM per token and slot:\n");
  if (GemmFigures(be->get(), smoke ? 128 : 2048, 8, 2, 128, 96, smoke ? 1 : 5)) return 1;
  if (!smoke && GemmFigures(be->get(), 1024, 64, 8, 1024, 384, 3)) return 1;
  return 0;
}
