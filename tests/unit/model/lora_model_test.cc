// LoRA (shard/model/lora_linear.h) in the model: the adapter op against naive
// double loops (fused output columns, dropout masks regenerated in the
// backward), and the tiny model with adapters against an independent
// reference — the plain double-precision Llama of reference_llama.h run on
// merged weights W + s·B·A, whose finite differences in A and B give the
// adapter gradients. A bound adapter freezes the base: no base gradient is
// computed or asked for; B = 0 reproduces the base model bit for bit;
// activation checkpointing gives identical adapter gradients; evaluation
// ignores dropout.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "shard/model/init.h"
#include "shard/model/llama_model.h"
#include "shard/model/lora_linear.h"
#include "shard/train/local_params.h"
#include "tests/unit/model/reference_llama.h"

namespace shard {
namespace {

// ---- The adapter op alone ---------------------------------------------------

TEST(LoraLinear, OpMatchesNaiveLoopsWithDropout) {
  auto be = CreateBackend("cpu");
  ASSERT_TRUE(be.ok());
  const int n = 5, in = 6, out = 4, r = 3, width = 11, col = 5;
  const float s = 1.7f, p = 0.3f;
  const uint64_t seed = 42;
  LoraTensor t{LoraTarget::kK, in, out, width, col, 0, r * in};
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n * in), y(n * width), dy(n * width), dx(n * in), adapter(r * in + out * r),
      grad(adapter.size(), 0.0f);
  for (auto* v : {&x, &y, &dy, &dx, &adapter})
    for (auto& e : *v) e = g(rng);
  const std::vector<float> y0 = y, dx0 = dx;
  auto scratch = LoraScratch::Create(be->get(), LoraLayout{r, {t}, 0, 1, in}, n);
  ASSERT_TRUE(scratch.ok());
  LoraCall c{&t, r, adapter.data(), grad.data(), s, p, seed, DType::kF32};
  LoraForward(be->get(), c, x.data(), n, y.data(), *scratch);
  LoraBackward(be->get(), c, x.data(), dy.data(), n, dx.data(), *scratch);

  // Naive: xd = mask ⊙ x / (1-p); y += s·xd·Aᵀ·Bᵀ in double.
  const float* A = adapter.data();
  const float* B = adapter.data() + r * in;
  std::vector<double> xd(n * in);
  int dropped = 0;
  for (int i = 0; i < n * in; ++i) {
    const bool keep = DropoutKeep(seed, i, p);
    dropped += !keep;
    xd[i] = keep ? x[i] / (1.0 - p) : 0.0;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, n * in);
  for (int row = 0; row < n; ++row) {
    std::vector<double> tt(r, 0.0), gg(r, 0.0);
    for (int k = 0; k < r; ++k)
      for (int i = 0; i < in; ++i) tt[k] += xd[row * in + i] * A[k * in + i];
    for (int o = 0; o < width; ++o) {
      double want = y0[row * width + o];
      if (o >= col && o < col + out)
        for (int k = 0; k < r; ++k) want += s * tt[k] * B[(o - col) * r + k];
      EXPECT_NEAR(y[row * width + o], want, 1e-5) << row << "," << o;
    }
    for (int k = 0; k < r; ++k)
      for (int o = 0; o < out; ++o) gg[k] += dy[row * width + col + o] * B[o * r + k];
    for (int i = 0; i < in; ++i) {
      double v = 0;
      for (int k = 0; k < r; ++k) v += s * gg[k] * A[k * in + i];
      const bool keep = DropoutKeep(seed, row * in + i, p);
      EXPECT_NEAR(dx[row * in + i], dx0[row * in + i] + (keep ? v / (1 - p) : 0.0), 1e-5);
    }
  }
  for (int k = 0; k < r; ++k)
    for (int i = 0; i < in; ++i) {
      double want = 0;
      for (int row = 0; row < n; ++row) {
        double gk = 0;
        for (int o = 0; o < out; ++o) gk += dy[row * width + col + o] * B[o * r + k];
        want += s * gk * xd[row * in + i];
      }
      EXPECT_NEAR(grad[k * in + i], want, 1e-4) << "dA " << k << "," << i;
    }
  for (int o = 0; o < out; ++o)
    for (int k = 0; k < r; ++k) {
      double want = 0;
      for (int row = 0; row < n; ++row) {
        double tk = 0;
        for (int i = 0; i < in; ++i) tk += xd[row * in + i] * A[k * in + i];
        want += s * dy[row * width + col + o] * tk;
      }
      EXPECT_NEAR(grad[r * in + o * r + k], want, 1e-4) << "dB " << o << "," << k;
    }
}

TEST(LoraLinear, KaimingUniformAAndZeroB) {
  LlamaConfig c;
  c.vocab_size = 8, c.hidden_size = 64, c.intermediate_size = 96, c.num_layers = 2, c.num_heads = 4,
  c.num_kv_heads = 4;
  PeftConfig p;
  p.method = PeftMethod::kLora;
  p.r = 16;
  p.target_modules = {LoraTarget::kQ, LoraTarget::kDown};
  LoraLayout l = LoraLayout::For(c, p);
  std::vector<float> a(l.layer_numel), b(l.layer_numel), other(l.layer_numel);
  InitLoraLayer(l, LoraInit::kKaimingUniform, 5, 0, a.data());
  InitLoraLayer(l, LoraInit::kKaimingUniform, 5, 0, b.data());
  InitLoraLayer(l, LoraInit::kKaimingUniform, 5, 1, other.data());
  EXPECT_EQ(a, b);      // deterministic
  EXPECT_NE(a, other);  // per layer
  for (const LoraTensor& t : l.tensors) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(t.in));
    float lo = 1, hi = -1;
    for (int64_t i = 0; i < l.r * t.in; ++i) {
      lo = std::min(lo, a[t.a_offset + i]);
      hi = std::max(hi, a[t.a_offset + i]);
    }
    EXPECT_GE(lo, -bound);
    EXPECT_LE(hi, bound);
    EXPECT_LT(lo, -0.8f * bound);  // spread over the whole interval
    EXPECT_GT(hi, 0.8f * bound);
    for (int64_t i = 0; i < t.out * l.r; ++i) ASSERT_EQ(a[t.b_offset + i], 0.0f);
  }
}

// ---- The model with adapters --------------------------------------------------

BlockTensor BaseTensorOf(LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return kQ;
    case LoraTarget::kK: return kK;
    case LoraTarget::kV: return kV;
    case LoraTarget::kO: return kO;
    case LoraTarget::kGate: return kGate;
    case LoraTarget::kUp: return kUp;
    case LoraTarget::kDown: return kDown;
  }
  return kQ;
}

// Reference units with every targeted W replaced by W + s·B·A (double).
testing_ref::Units Merged(const LlamaConfig& c, const ParamLayout& pl, const testing_ref::Units& base,
                          const LoraLayout& ll, const std::vector<std::vector<double>>& lora, double s) {
  testing_ref::Units u = base;
  for (int l = 0; l < c.num_layers; ++l)
    for (const LoraTensor& t : ll.tensors) {
      double* w = &u[pl.block_unit(l)][pl.units[pl.block_unit(l)].tensors[BaseTensorOf(t.target)].offset];
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

// Counts gradient requests: a frozen base must make none.
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

struct TinyModel {
  LlamaConfig config;
  ParamLayout layout;
  std::vector<std::vector<float>> units;
  testing_ref::RefBatch batch;
};

TinyModel MakeSetup(int heads, int kv_heads) {
  TinyModel su;
  LlamaConfig& c = su.config;
  c.vocab_size = 23, c.hidden_size = 16, c.intermediate_size = 20, c.num_layers = 2;
  c.num_heads = heads, c.num_kv_heads = kv_heads, c.rope_theta = 10000.0, c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 64;
  su.layout = ParamLayout::ForLlama(c);
  su.units.resize(su.layout.num_units());
  for (int u = 0; u < su.layout.num_units(); ++u) {
    su.units[u].resize(su.layout.units[u].numel);
    InitUnitParams(su.layout.units[u], u, 99, 0.3f, 0, su.layout.units[u].numel, su.units[u].data());
  }
  std::mt19937 rng(5);
  su.batch.B = 2, su.batch.T = 6;
  for (int i = 0; i < 12; ++i) {
    su.batch.tokens.push_back(static_cast<int>(rng() % 23));
    su.batch.targets.push_back(i % 5 == 4 ? -1 : static_cast<int>(rng() % 23));
    su.batch.positions.push_back(i % 6);
  }
  return su;
}

struct LoraRun {
  double loss = 0;
  std::vector<std::vector<float>> adapter_grads;
  int grad_requests = 0;
  double base_grad_abs = 0;  // sum of |base gradients| (must stay 0)
};

// bind = false: the plain model (no adapters).
LoraRun RunTiny(const TinyModel& su, const LoraLayout& ll, const std::vector<std::vector<float>>& adapters, float scale,
            float dropout, bool checkpointing, bool bind, float grad_scale, bool eval = false) {
  auto be = CreateBackend("cpu");
  ModelOptions mo;
  mo.max_batch = su.batch.B, mo.max_seq = su.batch.T, mo.activation_checkpointing = checkpointing;
  auto model = LlamaModel::Create(su.config, be->get(), mo);
  EXPECT_TRUE(model.ok());
  auto params = LocalParams::Create(be->get(), su.layout, true);
  EXPECT_TRUE((*params)->LoadUnits(su.units).ok());
  LoraRun out;
  out.adapter_grads.assign(ll.num_layers, std::vector<float>(ll.layer_numel, 0.0f));
  LoraBinding bnd;
  bnd.layout = ll;
  bnd.scale = scale;
  bnd.dropout = dropout;
  bnd.dropout_seed = 77;
  for (int l = 0; l < ll.num_layers; ++l) {
    bnd.params.push_back(adapters[l].data());
    bnd.grads.push_back(out.adapter_grads[l].data());
  }
  if (bind) {
    EXPECT_TRUE((*model)->SetLora(&bnd).ok());
  }
  CountingAccess access(params->get());
  DeviceBatch b{su.batch.B, su.batch.T, su.batch.tokens.data(), su.batch.targets.data(), su.batch.positions.data(),
                nullptr};
  auto loss = eval ? (*model)->ForwardLoss(b, access) : (*model)->ForwardBackward(b, access, grad_scale);
  EXPECT_TRUE(loss.ok()) << loss.status().ToString();
  out.loss = *loss;
  out.grad_requests = access.grad_requests;
  for (int u = 0; u < su.layout.num_units(); ++u)
    for (int64_t i = 0; i < su.layout.units[u].numel; ++i) out.base_grad_abs += std::fabs((*params)->grads(u)[i]);
  return out;
}

std::vector<std::vector<float>> RandomAdapters(const LoraLayout& ll, uint32_t seed, float std_dev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, std_dev);
  std::vector<std::vector<float>> a(ll.num_layers, std::vector<float>(ll.layer_numel));
  for (auto& layer : a)
    for (auto& v : layer) v = g(rng);
  return a;
}

struct ModelCase {
  const char* name;
  int heads, kv_heads;
  std::vector<LoraTarget> targets;
  bool rslora;
};

class LoraModelTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(LoraModelTest, ForwardBackwardMatchesMergedReference) {
  const ModelCase k = GetParam();
  TinyModel su = MakeSetup(k.heads, k.kv_heads);
  PeftConfig pc;
  pc.method = PeftMethod::kLora;
  pc.r = 3;
  pc.alpha = 5;
  pc.use_rslora = k.rslora;
  pc.target_modules = k.targets;
  LoraLayout ll = LoraLayout::For(su.config, pc);
  auto adapters = RandomAdapters(ll, 3, 0.3f);
  const float s = static_cast<float>(pc.scale()), grad_scale = 0.2f;
  LoraRun r = RunTiny(su, ll, adapters, s, 0.0f, false, true, grad_scale);
  EXPECT_EQ(r.grad_requests, 0);
  EXPECT_EQ(r.base_grad_abs, 0.0);

  testing_ref::Units base(su.units.size());
  for (size_t u = 0; u < su.units.size(); ++u) base[u].assign(su.units[u].begin(), su.units[u].end());
  std::vector<std::vector<double>> lora(ll.num_layers);
  for (int l = 0; l < ll.num_layers; ++l) lora[l].assign(adapters[l].begin(), adapters[l].end());
  const double ref = testing_ref::LossSum(su.config, su.layout, Merged(su.config, su.layout, base, ll, lora, s), su.batch);
  EXPECT_NEAR(r.loss, ref, 1e-4 * std::fabs(ref));

  std::mt19937 rng(17);
  int checked = 0;
  for (int l = 0; l < ll.num_layers; ++l)
    for (const LoraTensor& t : ll.tensors)
      for (bool is_b : {false, true})
        for (int rep = 0; rep < 3; ++rep) {
          const int64_t len = is_b ? t.out * ll.r : ll.r * t.in;
          const int64_t i = (is_b ? t.b_offset : t.a_offset) + static_cast<int64_t>(rng() % len);
          const double eps = 1e-5, orig = lora[l][i];
          lora[l][i] = orig + eps;
          const double lp = testing_ref::LossSum(su.config, su.layout, Merged(su.config, su.layout, base, ll, lora, s), su.batch);
          lora[l][i] = orig - eps;
          const double lm = testing_ref::LossSum(su.config, su.layout, Merged(su.config, su.layout, base, ll, lora, s), su.batch);
          lora[l][i] = orig;
          const double fd = grad_scale * (lp - lm) / (2 * eps);
          const double got = r.adapter_grads[l][i];
          EXPECT_LT(std::fabs(got - fd) / std::max(1e-3, std::fabs(fd)), 2e-3)
              << k.name << " layer " << l << " " << LoraTargetName(t.target) << (is_b ? " B" : " A") << ": analytic "
              << got << " vs finite difference " << fd;
          ++checked;
        }
  EXPECT_GE(checked, 12);

  // Activation checkpointing recomputes the same forward (and the same
  // dropout masks): identical adapter gradients.
  LoraRun d1 = RunTiny(su, ll, adapters, s, 0.25f, false, true, grad_scale);
  LoraRun d2 = RunTiny(su, ll, adapters, s, 0.25f, true, true, grad_scale);
  EXPECT_EQ(d1.loss, d2.loss);
  EXPECT_EQ(d1.adapter_grads, d2.adapter_grads);
  EXPECT_NE(d1.loss, r.loss);  // dropout did something in training
  LoraRun c1 = RunTiny(su, ll, adapters, s, 0.0f, true, true, grad_scale);
  EXPECT_EQ(c1.adapter_grads, r.adapter_grads);
  // Evaluation ignores dropout.
  EXPECT_EQ(RunTiny(su, ll, adapters, s, 0.25f, false, true, 1, true).loss,
            RunTiny(su, ll, adapters, s, 0.0f, false, true, 1, true).loss);
}

INSTANTIATE_TEST_SUITE_P(
    Targets, LoraModelTest,
    ::testing::Values(ModelCase{"all_linear", 4, 4,
                                {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kO, LoraTarget::kGate,
                                 LoraTarget::kUp, LoraTarget::kDown},
                                false},
                      ModelCase{"gqa_kv_up_rslora", 4, 2, {LoraTarget::kK, LoraTarget::kV, LoraTarget::kUp}, true}),
    [](const ::testing::TestParamInfo<ModelCase>& i) { return std::string(i.param.name); });

TEST(LoraModel, ZeroBIsTheBaseModelBitForBit) {
  TinyModel su = MakeSetup(4, 2);
  PeftConfig pc;
  pc.method = PeftMethod::kLora;
  pc.target_modules = {LoraTarget::kQ, LoraTarget::kV, LoraTarget::kDown};
  LoraLayout ll = LoraLayout::For(su.config, pc);
  std::vector<std::vector<float>> adapters(ll.num_layers, std::vector<float>(ll.layer_numel));
  for (int l = 0; l < ll.num_layers; ++l) InitLoraLayer(ll, LoraInit::kKaimingUniform, 1, l, adapters[l].data());
  LoraRun plain = RunTiny(su, ll, adapters, 2.0f, 0.0f, false, /*bind=*/false, 1.0f);
  LoraRun fresh = RunTiny(su, ll, adapters, 2.0f, 0.0f, false, /*bind=*/true, 1.0f);
  EXPECT_EQ(plain.loss, fresh.loss);
  EXPECT_GT(plain.grad_requests, 0);
  EXPECT_EQ(fresh.grad_requests, 0);
  // With B = 0 only B has a gradient (dA = s·(dy·B)ᵀ·x = 0).
  double ga = 0, gb = 0;
  for (const LoraTensor& t : ll.tensors)
    for (int l = 0; l < ll.num_layers; ++l) {
      for (int64_t i = 0; i < ll.r * t.in; ++i) ga += std::fabs(fresh.adapter_grads[l][t.a_offset + i]);
      for (int64_t i = 0; i < t.out * ll.r; ++i) gb += std::fabs(fresh.adapter_grads[l][t.b_offset + i]);
    }
  EXPECT_EQ(ga, 0.0);
  EXPECT_GT(gb, 0.0);
}

TEST(LoraModel, RefusesAMismatchedBinding) {
  TinyModel su = MakeSetup(4, 4);
  auto be = CreateBackend("cpu");
  auto model = LlamaModel::Create(su.config, be->get(), ModelOptions{});
  ASSERT_TRUE(model.ok());
  LlamaConfig other = su.config;
  other.hidden_size = 32;
  PeftConfig pc;
  pc.method = PeftMethod::kLora;
  LoraBinding bnd;
  bnd.layout = LoraLayout::For(other, pc);
  std::vector<float> buf(bnd.layout.layer_numel);
  bnd.params = {buf.data(), buf.data()};
  bnd.grads = {nullptr, nullptr};
  Status st = (*model)->SetLora(&bnd);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("q_proj"), std::string::npos) << st.ToString();
  bnd.layout = LoraLayout::For(su.config, pc);
  bnd.params = {buf.data()};
  EXPECT_FALSE((*model)->SetLora(&bnd).ok());
}

}  // namespace
}  // namespace shard
