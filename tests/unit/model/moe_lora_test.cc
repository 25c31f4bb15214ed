// LoRA on mixture-of-experts models (qwen3_moe, mixtral, qwen2_moe): adapters
// on the attention, on every expert's gate/up/down (mixtral: w1/w3/w2), on
// the router when `gate` is named (all-linear names it, as PEFT's does), and
// on qwen2_moe's shared expert (its gate_proj/up_proj/down_proj by the same
// names as the experts') and shared_expert_gate. The float model's loss and
// adapter gradients (aux loss included) against the independent double-precision reference
// (reference_llama.h) run on merged weights W + s·B·A, where the test finds
// each base weight from the adapter's PEFT name (so the names are checked
// too), by central finite differences; PEFT export names and round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "shard/ckpt/peft_adapter.h"
#include "shard/ckpt/safetensors.h"
#include "shard/model/init.h"
#include "shard/model/llama_model.h"
#include "shard/model/lora_linear.h"
#include "shard/train/local_params.h"
#include "tests/unit/model/reference_llama.h"

namespace shard {
namespace {

struct Case {
  const char* name;
  ModelFamily family;
  std::vector<int> mlp_only;  // qwen3_moe: dense layers (their mlp.gate_proj gets a dense adapter)
  std::vector<std::string> names;  // peft.target_modules as the job file names them
  float aux_scale;
  float z_scale = 0;  // the router z-loss's gradient scale (0: off)
};

std::vector<LoraTarget> Targets(const std::vector<std::string>& names) {
  auto t = ParseLoraTargets(names);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : std::vector<LoraTarget>{};
}

void PrintTo(const Case& k, std::ostream* os) { *os << k.name; }

LlamaConfig TinyMoe(const Case& k) {
  LlamaConfig c;
  c.family = k.family;
  c.vocab_size = 23, c.hidden_size = 16, c.intermediate_size = 20, c.num_layers = 3;
  c.num_heads = 4, c.num_kv_heads = 2, c.rope_theta = 10000.0, c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 64;
  c.moe.num_experts = 4, c.moe.experts_per_tok = 2, c.moe.expert_intermediate_size = 12;
  c.moe.norm_topk_prob = true;
  c.moe.mlp_only_layers = k.mlp_only;
  if (k.family == ModelFamily::kMixtral) c.moe.expert_intermediate_size = c.intermediate_size;
  if (k.family == ModelFamily::kQwen2Moe) c.moe.shared_expert_intermediate_size = 10, c.moe.norm_topk_prob = false;
  return c;
}

// PEFT's adapter name -> the base weight's HF name:
// base_model.model.model.layers.0.mlp.experts.3.up_proj.lora_A.weight -> model.layers.0.mlp.experts.3.up_proj.weight
std::string BaseName(const std::string& peft_name) {
  const std::string pre = "base_model.model.";
  EXPECT_EQ(peft_name.rfind(pre, 0), 0u) << peft_name;
  std::string s = peft_name.substr(pre.size());
  const size_t at = s.find(".lora_");
  EXPECT_NE(at, std::string::npos) << peft_name;
  return s.substr(0, at) + ".weight";
}

// The reference's weights: W + s·B·A for every adapter, found by its PEFT name.
testing_ref::Units Merged(const ParamLayout& pl, const testing_ref::Units& base, const LoraLayout& ll,
                          const std::vector<std::vector<double>>& lora, double s) {
  testing_ref::Units u = base;
  for (int l = 0; l < ll.num_layers; ++l)
    for (const LoraTensor& t : ll.LayerTensors(l)) {
      int unit = -1, ti = -1;
      const std::string name = BaseName(PeftTensorName(ll, l, t, false));
      EXPECT_TRUE(pl.Find(name, &unit, &ti)) << name;
      if (unit < 0) continue;
      EXPECT_EQ(pl.units[unit].tensors[ti].shape, (std::vector<int64_t>{t.out, t.in})) << name;
      double* w = &u[unit][pl.units[unit].tensors[ti].offset];
      const double* A = &lora[l][t.a_offset];
      const double* B = &lora[l][t.b_offset];
      for (int64_t o = 0; o < t.out; ++o)
        for (int64_t i = 0; i < t.in; ++i) {
          double v = 0;
          for (int k = 0; k < ll.r; ++k) v += B[o * ll.r + k] * A[k * t.in + i];
          w[o * t.in + i] += s * v;
        }
    }
  return u;
}

class CountingAccess : public UnitAccess {
 public:
  explicit CountingAccess(UnitAccess* inner) : inner_(inner) {}
  StatusOr<const float*> AcquireParams(int u) override { return inner_->AcquireParams(u); }
  Status ReleaseParams(int u) override { return inner_->ReleaseParams(u); }
  StatusOr<float*> GradBuffer(int u) override {
    ++grad_requests;
    return inner_->GradBuffer(u);
  }
  Status GradsDone(int u) override {
    ++grad_requests;
    return inner_->GradsDone(u);
  }
  int grad_requests = 0;

 private:
  UnitAccess* inner_;
};

struct LoraRun {
  double loss = 0, aux = 0;
  std::vector<std::vector<float>> grads;  // adapter gradients per layer
  int grad_requests = 0;
};

LoraRun RunModel(const LlamaConfig& c, const testing_ref::RefBatch& rb, const std::vector<std::vector<float>>& units,
             const LoraLayout& ll, const std::vector<std::vector<float>>& adapters, float scale, bool checkpointing,
             float aux_scale, float grad_scale, float z_scale) {
  auto be = CreateBackend("cpu");
  ModelOptions mo;
  mo.max_batch = rb.B, mo.max_seq = rb.T, mo.activation_checkpointing = checkpointing;
  auto model = LlamaModel::Create(c, be->get(), mo);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  auto params = LocalParams::Create(be->get(), (*model)->layout(), true);
  EXPECT_TRUE((*params)->LoadUnits(units).ok());
  LoraRun out;
  out.grads.assign(ll.num_layers, std::vector<float>(ll.layer_numel, 0.0f));
  LoraBinding bnd;
  bnd.layout = ll;
  bnd.scale = scale;
  for (int l = 0; l < ll.num_layers; ++l) {
    bnd.params.push_back(adapters[l].data());
    bnd.grads.push_back(out.grads[l].data());
  }
  Status st = (*model)->SetLora(&bnd);
  EXPECT_TRUE(st.ok()) << st.ToString();
  (*model)->SetMoeAuxGradScale(aux_scale);
  (*model)->SetMoeZLossGradScale(z_scale);
  CountingAccess access(params->get());
  DeviceBatch b{rb.B, rb.T, rb.tokens.data(), rb.targets.data(), rb.positions.data(), nullptr};
  auto loss = (*model)->ForwardBackward(b, access, grad_scale);
  EXPECT_TRUE(loss.ok()) << loss.status().ToString();
  out.loss = loss.ok() ? *loss : 0;
  out.aux = (*model)->moe_aux_loss();
  out.grad_requests = access.grad_requests;
  return out;
}

class MoeLoraParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoeLoraParityTest, AdapterGradientsMatchTheMergedReference) {
  const Case k = GetParam();
  const LlamaConfig c = TinyMoe(k);
  ASSERT_TRUE(c.Validate().ok());
  const ParamLayout pl = ParamLayout::ForLlama(c);
  std::vector<std::vector<float>> units(pl.num_units());
  testing_ref::Units base(pl.num_units());
  for (int u = 0; u < pl.num_units(); ++u) {
    units[u].resize(pl.units[u].numel);
    InitUnitParams(pl.units[u], u, 17, 0.3f, 0, pl.units[u].numel, units[u].data());
    for (const auto& t : pl.units[u].tensors)
      if (t.shape.size() == 1)
        for (int64_t i = 0; i < t.numel; ++i) units[u][t.offset + i] = 1.0f + 0.2f * std::sin(2.0f + i + u);
    base[u].assign(units[u].begin(), units[u].end());
  }
  PeftConfig pc;
  pc.method = PeftMethod::kLora;
  pc.r = 2;
  pc.alpha = 3;
  pc.target_modules = Targets(k.names);
  pc.all_linear = k.names == std::vector<std::string>{"all-linear"};
  ASSERT_FALSE(pc.target_modules.empty());
  ASSERT_TRUE(CheckLoraTargets(c, pc).ok());
  const LoraLayout ll = LoraLayout::For(c, pc);
  ASSERT_FALSE(ll.experts.empty());
  const bool router = pc.targets(LoraTarget::kRouter);
  const bool shared = c.moe.has_shared_expert() && (pc.targets(LoraTarget::kGate) || pc.targets(LoraTarget::kUp) ||
                                                    pc.targets(LoraTarget::kDown));
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 0.3f);
  std::vector<std::vector<float>> adapters(ll.num_layers, std::vector<float>(ll.layer_numel));
  for (auto& layer : adapters)
    for (float& v : layer) v = g(rng);  // B nonzero too, so A has a gradient
  std::vector<std::vector<double>> lora(ll.num_layers);
  for (int l = 0; l < ll.num_layers; ++l) lora[l].assign(adapters[l].begin(), adapters[l].end());

  testing_ref::RefBatch rb;
  rb.B = 2, rb.T = 7;
  for (int i = 0; i < rb.B * rb.T; ++i) {
    rb.tokens.push_back(static_cast<int>(rng() % c.vocab_size));
    rb.targets.push_back(i % 5 == 4 ? -1 : static_cast<int>(rng() % c.vocab_size));
    rb.positions.push_back(i % rb.T);
  }
  const float s = static_cast<float>(pc.scale()), grad_scale = 0.5f;
  auto total = [&](double* ce_out, double* aux_out) {
    testing_ref::RefMoeAux aux;
    const double ce = testing_ref::LossSum(c, pl, Merged(pl, base, ll, lora, s), rb, {}, &aux);
    const double a = aux.Loss(c.moe.num_experts);
    if (ce_out) *ce_out = ce;
    if (aux_out) *aux_out = a;
    return grad_scale * ce + k.aux_scale * a + k.z_scale * aux.ZLoss();
  };
  const LoraRun r = RunModel(c, rb, units, ll, adapters, s, false, k.aux_scale, grad_scale, k.z_scale);
  EXPECT_EQ(r.grad_requests, 0) << "the base (router and experts included) is frozen";
  double ref_ce = 0, ref_aux = 0;
  total(&ref_ce, &ref_aux);
  EXPECT_LT(std::abs(r.loss - ref_ce) / ref_ce, 1e-5) << r.loss << " vs " << ref_ce;
  EXPECT_NEAR(r.aux, ref_aux, 1e-5 * ref_aux);

  // Two entries of A and of B of every adapter (each expert's, each layer's).
  double max_err = 0;
  int checked = 0, expert_checked = 0, router_checked = 0, shared_checked = 0;
  for (int l = 0; l < ll.num_layers; ++l)
    for (const LoraTensor& t : ll.LayerTensors(l))
      for (bool is_b : {false, true})
        for (int rep = 0; rep < 2; ++rep) {
          const int64_t n = is_b ? t.out * ll.r : ll.r * t.in;
          const int64_t i = (is_b ? t.b_offset : t.a_offset) + static_cast<int64_t>(rng() % n);
          const double eps = 1e-5, orig = lora[l][i];
          lora[l][i] = orig + eps;
          const double lp = total(nullptr, nullptr);
          lora[l][i] = orig - eps;
          const double lm = total(nullptr, nullptr);
          lora[l][i] = orig;
          const double fd = (lp - lm) / (2 * eps);
          const double err = std::abs(r.grads[l][i] - fd) / std::max(1e-3, std::abs(fd));
          max_err = std::max(max_err, err);
          EXPECT_LT(err, 2e-3) << k.name << " " << PeftTensorName(ll, l, t, is_b) << ": analytic " << r.grads[l][i]
                               << " vs " << fd;
          ++checked;
          if (t.expert >= 0) ++expert_checked;
          if (t.target == LoraTarget::kRouter) ++router_checked;
          if (t.shared || t.target == LoraTarget::kSharedExpertGate) ++shared_checked;
        }
  EXPECT_GT(expert_checked, 0);
  EXPECT_EQ(router_checked > 0, router) << "the router's adapter, when named";
  EXPECT_EQ(shared_checked > 0, shared) << "the shared expert's adapters (qwen2_moe, MLP names)";
  // The merged export (MergeLoraLayer: W += s·B·A, experts included) is the reference's merge.
  const testing_ref::Units merged = Merged(pl, base, ll, lora, s);
  double merge_err = 0;
  for (int l = 0; l < ll.num_layers; ++l) {
    const int u = pl.block_unit(l);
    std::vector<float> unit = units[u];
    MergeLoraLayer(ll, pl.units[u], s, adapters[l].data(), unit.data());
    for (size_t i = 0; i < unit.size(); ++i) merge_err = std::max(merge_err, std::abs(unit[i] - merged[u][i]));
  }
  EXPECT_LT(merge_err, 1e-6) << k.name;
  // Activation checkpointing recomputes the same forward: identical gradients.
  const LoraRun ck = RunModel(c, rb, units, ll, adapters, s, true, k.aux_scale, grad_scale, k.z_scale);
  EXPECT_EQ(ck.loss, r.loss);
  for (int l = 0; l < ll.num_layers; ++l) EXPECT_EQ(ck.grads[l], r.grads[l]) << k.name << " layer " << l;
  std::printf("| %-30s | adapters %6lld | loss %.6f vs %.6f (rel %.1e) | %4d checked (%d experts, %d router, %d "
              "shared) | max rel err %.1e |\n",
              k.name, static_cast<long long>(ll.total_numel()), r.loss, ref_ce, std::abs(r.loss - ref_ce) / ref_ce,
              checked, expert_checked, router_checked, shared_checked, max_err);
}

const std::vector<LoraTarget> kAll = {LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,   LoraTarget::kO,
                                      LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown};

INSTANTIATE_TEST_SUITE_P(
    MoeLora, MoeLoraParityTest,
    ::testing::Values(Case{"qwen3_moe_all_linear_dense_mid", ModelFamily::kQwen3Moe, {1}, {"all-linear"}, 0.7f},
                      Case{"qwen3_moe_experts_only", ModelFamily::kQwen3Moe, {}, {"up_proj", "down_proj"}, 0.0f},
                      Case{"mixtral_q_v_w1_w2_w3", ModelFamily::kMixtral, {}, {"q_proj", "v_proj", "w1", "w2", "w3"},
                           0.7f},
                      Case{"qwen3_moe_router_q_up_aux_z", ModelFamily::kQwen3Moe, {1}, {"q_proj", "gate", "up_proj"},
                           0.7f, 0.3f},
                      Case{"mixtral_router_w2_aux", ModelFamily::kMixtral, {}, {"gate", "w2"}, 0.7f},
                      Case{"qwen2_moe_all_linear_dense_mid", ModelFamily::kQwen2Moe, {1}, {"all-linear"}, 0.7f},
                      Case{"qwen2_moe_mlp_names", ModelFamily::kQwen2Moe, {}, {"gate_proj", "up_proj", "down_proj"},
                           0.0f}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(MoeLoraLayoutTest, SparseLayersHoldEveryExpertsAdapters) {
  Case k{"", ModelFamily::kQwen3Moe, {1}, {}, 0};
  const LlamaConfig c = TinyMoe(k);  // layers 0 and 2 sparse, 1 dense
  PeftConfig pc;
  pc.method = PeftMethod::kLora;
  pc.r = 2;
  pc.target_modules = kAll;
  const LoraLayout ll = LoraLayout::For(c, pc);
  const int64_t d = 16, fe = 12, f = 20, attn = 2 * (d + 16) + 2 * (d + 8) * 2 + 2 * (16 + d);
  EXPECT_EQ(ll.experts.size(), 4u * 3u);
  EXPECT_EQ(ll.LayerTensors(0).size(), 4u + 12u);
  EXPECT_EQ(ll.LayerTensors(1).size(), 7u);
  const int64_t sparse = attn + 4 * 2 * (2 * (d + fe) + (fe + d)), dense = attn + 2 * (2 * (d + f) + (f + d));
  EXPECT_EQ(ll.layer_numel, std::max(sparse, dense));
  EXPECT_EQ(PeftTensorName(ll, 2, *ll.Expert(3, LoraTarget::kDown), true),
            "base_model.model.model.layers.2.mlp.experts.3.down_proj.lora_B.weight");
  EXPECT_EQ(PeftTensorName(ll, 1, ll.tensors[ll.Find(LoraTarget::kDown)], false),
            "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight");
}

// PEFT export: every layer's attention, experts', router's and (qwen2_moe)
// shared expert's adapters under PEFT's names (mixtral:
// block_sparse_moe.experts.{j}.w1/w3/w2 and block_sparse_moe.gate,
// target_modules w1 w3 w2 gate; qwen2_moe: mlp.shared_expert.{gate,up,down}_proj
// beside the experts'), and ReadPeftAdapter reads the folder back exactly.
TEST(MoeLoraLayoutTest, PeftExportNamesAndRoundTrip) {
  for (ModelFamily fam : {ModelFamily::kQwen3Moe, ModelFamily::kMixtral, ModelFamily::kQwen2Moe}) {
    Case k{"", fam, {}, {}, 0};
    const LlamaConfig c = TinyMoe(k);
    PeftConfig pc;
    pc.method = PeftMethod::kLora;
    pc.r = 2;
    pc.target_modules = Targets({"q_proj", "gate_proj", "up_proj", "down_proj", "gate"});
    const LoraLayout ll = LoraLayout::For(c, pc);
    std::vector<std::vector<float>> layers(ll.num_layers, std::vector<float>(ll.layer_numel));
    for (int l = 0; l < ll.num_layers; ++l)
      for (int64_t i = 0; i < ll.layer_numel; ++i) layers[l][i] = 0.01f * static_cast<float>((i * 7 + l) % 13);
    const std::string dir = ::testing::TempDir() + "/moe_peft_" + c.family_name();
    ASSERT_TRUE(WritePeftAdapter(dir, pc, ll, "tiny", layers, DType::kF32).ok());
    auto f = SafetensorsFile::Open(dir + "/adapter_model.safetensors");
    ASSERT_TRUE(f.ok());
    std::set<std::string> names;
    for (const TensorInfo& t : f->tensors()) names.insert(t.name);
    const bool mx = fam == ModelFamily::kMixtral, q2 = fam == ModelFamily::kQwen2Moe;
    EXPECT_EQ(names.size(), static_cast<size_t>(3 * 2 * (1 + 4 * 3 + 1 + (q2 ? 3 : 0)))) << c.family_name();
    const std::string e = mx ? "base_model.model.model.layers.2.block_sparse_moe.experts.3."
                             : "base_model.model.model.layers.2.mlp.experts.3.";
    for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string proj = !mx ? p : p[0] == 'g' ? "w1" : p[0] == 'u' ? "w3" : "w2";
      EXPECT_TRUE(names.count(e + proj + ".lora_A.weight")) << e + proj;
      EXPECT_TRUE(names.count(e + proj + ".lora_B.weight")) << e + proj;
      const std::string sh = "base_model.model.model.layers.1.mlp.shared_expert." + std::string(p);
      EXPECT_EQ(names.count(sh + ".lora_B.weight"), q2 ? 1u : 0u) << sh;
    }
    EXPECT_TRUE(names.count("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
    const std::string router = std::string("base_model.model.model.layers.2.") +
                               (mx ? "block_sparse_moe.gate" : "mlp.gate");
    EXPECT_TRUE(names.count(router + ".lora_A.weight")) << router;
    EXPECT_TRUE(names.count(router + ".lora_B.weight")) << router;
    EXPECT_EQ(f->Find(router + ".lora_B.weight")->shape, (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(names.count("base_model.model.model.layers.2.mlp.shared_expert_gate.lora_A.weight"), 0u);
    auto cfg = ReadPeftAdapterConfig(dir);
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    EXPECT_EQ(cfg->target_modules, pc.target_modules);
    std::vector<std::vector<float>> back;
    Status st = ReadPeftAdapter(dir, pc, ll, &back);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(back, layers);
    std::filesystem::remove_all(dir);
  }
}

// all-linear as PEFT resolves it (every nn.Linear but the output layer): on
// a sparse model the router too, on qwen2_moe the shared expert and its gate;
// on a dense model neither (PEFT finds no such module). Named explicitly on a
// model without them, 'gate' / 'shared_expert_gate' are refused with one line.
TEST(MoeLoraLayoutTest, AllLinearTakesTheRouterAndTheSharedExpertAsPeftDoes) {
  PeftConfig pc;
  pc.method = PeftMethod::kLora;
  pc.r = 2;
  pc.target_modules = Targets({"all-linear"});
  pc.all_linear = true;
  const LlamaConfig q2 = TinyMoe(Case{"", ModelFamily::kQwen2Moe, {1}, {}, 0});
  const LoraLayout l2 = LoraLayout::For(q2, pc);
  EXPECT_EQ(l2.targets.size(), 9u);
  const std::vector<LoraTensor> sparse = l2.LayerTensors(0);
  EXPECT_EQ(sparse.size(), 4u + 4u * 3u + 3u + 2u);  // attention, experts, shared gate/up/down, router, shared gate
  ASSERT_NE(l2.Moe(LoraTarget::kRouter), nullptr);
  EXPECT_EQ(l2.Moe(LoraTarget::kRouter)->out, 4);
  ASSERT_NE(l2.Moe(LoraTarget::kUp, /*shared=*/true), nullptr);
  EXPECT_EQ(l2.Moe(LoraTarget::kUp, true)->fused_col, 10);
  EXPECT_EQ(PeftTensorName(l2, 0, *l2.Moe(LoraTarget::kSharedExpertGate), true),
            "base_model.model.model.layers.0.mlp.shared_expert_gate.lora_B.weight");
  EXPECT_EQ(PeftTensorName(l2, 2, *l2.Moe(LoraTarget::kDown, true), false),
            "base_model.model.model.layers.2.mlp.shared_expert.down_proj.lora_A.weight");
  EXPECT_EQ(l2.LayerTensors(1).size(), 7u);  // the dense layer: attention and its MLP
  const LlamaConfig q3 = TinyMoe(Case{"", ModelFamily::kQwen3Moe, {}, {}, 0});
  const LoraLayout l3 = LoraLayout::For(q3, pc);
  EXPECT_EQ(l3.targets.size(), 8u);  // no shared_expert_gate
  EXPECT_EQ(l3.LayerTensors(0).size(), 4u + 4u * 3u + 1u);
  LlamaConfig dense = q3;
  dense.family = ModelFamily::kLlama;
  dense.moe = MoeShape{};
  ASSERT_TRUE(dense.Validate().ok());
  const LoraLayout ld = LoraLayout::For(dense, pc);
  EXPECT_EQ(ld.targets.size(), 7u);
  EXPECT_TRUE(ld.moe_tensors.empty());
  EXPECT_TRUE(CheckLoraTargets(dense, pc).ok());
  pc.all_linear = false;
  pc.target_modules = Targets({"q_proj", "gate"});
  const Status st = CheckLoraTargets(dense, pc);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'gate' is the mixture-of-experts router"), std::string::npos) << st.ToString();
  EXPECT_TRUE(CheckLoraTargets(q3, pc).ok());
  pc.target_modules = Targets({"shared_expert_gate"});
  EXPECT_FALSE(CheckLoraTargets(q3, pc).ok());
  EXPECT_TRUE(CheckLoraTargets(q2, pc).ok());
}

// An adapter folder whose adapter_config.json says target_modules
// "all-linear" (as PEFT saves it when given the shorthand): read back as the
// modules this model has. On qwen2_moe: 9 names, router and shared gate
// included; on a dense model the export lists the 7 a Llama block has (no
// 'gate', which PEFT would not find there).
TEST(MoeLoraLayoutTest, AllLinearAdapterConfigReadsBack) {
  PeftConfig pc;
  pc.method = PeftMethod::kLora;
  pc.r = 2;
  pc.target_modules = Targets({"all-linear"});
  pc.all_linear = true;
  LlamaConfig dense = TinyMoe(Case{"", ModelFamily::kQwen3Moe, {}, {}, 0});
  dense.family = ModelFamily::kLlama;
  dense.moe = MoeShape{};
  for (const LlamaConfig& c : {TinyMoe(Case{"", ModelFamily::kQwen2Moe, {1}, {}, 0}), dense}) {
    const LoraLayout ll = LoraLayout::For(c, pc);
    std::vector<std::vector<float>> layers(ll.num_layers, std::vector<float>(ll.layer_numel, 0.0f));
    for (int l = 0; l < ll.num_layers; ++l)  // every adapter's A and B (a dense layer's buffer has a tail)
      for (const LoraTensor& t : ll.LayerTensors(l))
        for (int64_t i = t.a_offset; i < t.b_offset + t.out * ll.r; ++i) layers[l][i] = 0.25f + 0.01f * (i % 7);
    const std::string dir = ::testing::TempDir() + "/moe_peft_all_linear_" + c.family_name();
    ASSERT_TRUE(WritePeftAdapter(dir, pc, ll, "tiny", layers, DType::kF32).ok());
    nlohmann::json cfg;
    {
      std::ifstream in(dir + "/adapter_config.json");
      in >> cfg;
    }
    const auto written = cfg["target_modules"].get<std::vector<std::string>>();
    EXPECT_EQ(written.size(), c.is_moe() ? 9u : 7u) << c.family_name();
    EXPECT_EQ(std::count(written.begin(), written.end(), "gate"), c.is_moe() ? 1 : 0) << c.family_name();
    cfg["target_modules"] = "all-linear";
    std::ofstream(dir + "/adapter_config.json") << cfg.dump(2);
    auto back_cfg = ReadPeftAdapterConfig(dir);
    ASSERT_TRUE(back_cfg.ok()) << back_cfg.status().ToString();
    EXPECT_TRUE(back_cfg->all_linear);
    std::vector<std::vector<float>> back;
    Status st = ReadPeftAdapter(dir, pc, ll, &back);
    ASSERT_TRUE(st.ok()) << c.family_name() << ": " << st.ToString();
    EXPECT_EQ(back, layers);
    PeftConfig named = pc;  // the job names the modules explicitly: the same set reads back
    named.all_linear = false;
    named.target_modules = ll.targets;
    EXPECT_TRUE(ReadPeftAdapter(dir, named, ll, &back).ok());
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace shard
