#include "shard/model/lora_linear.h"

#include <cmath>
#include <algorithm>
#include <random>
#include <vector>

namespace shard {

namespace {

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The adapter's input: x itself, or its dropped-out copy in scratch.
const float* DroppedInput(Backend* be, const LoraCall& c, const float* x, int64_t n, LoraScratch& s) {
  if (c.dropout <= 0) return x;
  be->Dropout(x, s.x_drop.data(), n * c.tensor->in, c.dropout, c.seed);
  return s.x_drop.data();
}

// t[n, r] = xd[n, in]·Aᵀ
void Down(Backend* be, const LoraCall& c, const float* xd, int64_t n, float* t) {
  GemmArgs g;
  g.compute = c.compute;
  g.trans_b = true;
  g.m = n, g.n = c.r, g.k = c.tensor->in;
  g.a = xd, g.lda = c.tensor->in;
  g.b = c.adapter + c.tensor->a_offset, g.ldb = c.tensor->in;
  g.c = t, g.ldc = c.r;
  be->Gemm(g);
}

}  // namespace

StatusOr<LoraScratch> LoraScratch::Create(Backend* backend, const LoraLayout& layout, int64_t max_rows,
                                          bool dropout) {
  LoraScratch s;
  if (dropout) {  // without dropout the adapters read x and add into dx directly
    ASSIGN_OR_RETURN(s.x_drop, DeviceBuffer::Create(backend, max_rows * layout.max_in));
    ASSIGN_OR_RETURN(s.dx_drop, DeviceBuffer::Create(backend, max_rows * layout.max_in));
  }
  ASSIGN_OR_RETURN(s.t, DeviceBuffer::Create(backend, max_rows * layout.r));
  ASSIGN_OR_RETURN(s.g, DeviceBuffer::Create(backend, max_rows * layout.r));
  return s;
}

uint64_t LoraDropoutSeed(uint64_t seed, int layer, LoraTarget target, int expert) {
  const uint64_t key = Mix((static_cast<uint64_t>(layer) << 8) + static_cast<uint64_t>(target) + 1);
  return Mix(seed ^ (expert < 0 ? key : Mix(key ^ (0xd70full << 32) ^ static_cast<uint64_t>(expert))));
}

void LoraForward(Backend* be, const LoraCall& c, const float* x, int64_t n, float* y, LoraScratch& s) {
  const LoraTensor& t = *c.tensor;
  const float* xd = DroppedInput(be, c, x, n, s);
  float* t_buf = c.saved_t ? c.saved_t : s.t.data();
  Down(be, c, xd, n, t_buf);
  GemmArgs g;  // y[:, col..] += s · t·Bᵀ
  g.compute = c.compute;
  g.trans_b = true;
  g.m = n, g.n = t.out, g.k = c.r;
  g.alpha = c.scale;
  g.a = t_buf, g.lda = c.r;
  g.b = c.adapter + t.b_offset, g.ldb = c.r;
  g.beta = 1.0f;
  g.c = y + t.fused_col, g.ldc = t.fused_width;
  be->Gemm(g);
}

void LoraBackward(Backend* be, const LoraCall& c, const float* x, const float* dy, int64_t n, float* dx,
                  LoraScratch& s) {
  const LoraTensor& t = *c.tensor;
  const float* dyc = dy + t.fused_col;
  const float* xd = DroppedInput(be, c, x, n, s);
  if (c.adapter_grad) {
    const float* t_buf = c.saved_t;
    if (!t_buf) {
      Down(be, c, xd, n, s.t.data());  // not saved: recompute
      t_buf = s.t.data();
    }
    GemmArgs gb;                     // dB[out, r] += s · dyᵀ·t
    gb.compute = c.compute;
    gb.trans_a = true;
    gb.m = t.out, gb.n = c.r, gb.k = n;
    gb.alpha = c.scale;
    gb.a = dyc, gb.lda = t.fused_width;
    gb.b = t_buf, gb.ldb = c.r;
    gb.beta = 1.0f;
    gb.c = c.adapter_grad + t.b_offset, gb.ldc = c.r;
    be->Gemm(gb);
  }
  GemmArgs gg;  // g[n, r] = dy·B
  gg.compute = c.compute;
  gg.m = n, gg.n = c.r, gg.k = t.out;
  gg.a = dyc, gg.lda = t.fused_width;
  gg.b = c.adapter + t.b_offset, gg.ldb = c.r;
  gg.c = s.g.data(), gg.ldc = c.r;
  be->Gemm(gg);
  if (c.adapter_grad) {
    GemmArgs ga;  // dA[r, in] += s · gᵀ·xd
    ga.compute = c.compute;
    ga.trans_a = true;
    ga.m = c.r, ga.n = t.in, ga.k = n;
    ga.alpha = c.scale;
    ga.a = s.g.data(), ga.lda = c.r;
    ga.b = xd, ga.ldb = t.in;
    ga.beta = 1.0f;
    ga.c = c.adapter_grad + t.a_offset, ga.ldc = t.in;
    be->Gemm(ga);
  }
  GemmArgs gx;  // dx += s · g·A (through the dropout mask when there is one)
  gx.compute = c.compute;
  gx.m = n, gx.n = t.in, gx.k = c.r;
  gx.alpha = c.scale;
  gx.a = s.g.data(), gx.lda = c.r;
  gx.b = c.adapter + t.a_offset, gx.ldb = t.in;
  if (c.dropout <= 0) {
    gx.beta = 1.0f;
    gx.c = dx, gx.ldc = t.in;
    be->Gemm(gx);
    return;
  }
  gx.c = s.dx_drop.data(), gx.ldc = t.in;
  be->Gemm(gx);
  be->Dropout(s.dx_drop.data(), s.dx_drop.data(), n * t.in, c.dropout, c.seed);
  be->Add(dx, s.dx_drop.data(), dx, n * t.in);
}

void InitLoraLayer(const LoraLayout& layout, LoraInit init, uint64_t seed, int layer, float* out) {
  for (const LoraTensor& t : layout.LayerTensors(layer)) {
    // One generator per (seed, layer, target[, expert]): independent of the targets chosen alongside.
    uint64_t key = Mix(0x10a4ull + (static_cast<uint64_t>(layer) << 8) + static_cast<uint64_t>(t.target));
    if (t.expert >= 0) key = Mix(key ^ (0xe8e7ull << 32) ^ static_cast<uint64_t>(t.expert));
    std::mt19937_64 rng(Mix(seed ^ key));
    float* a = out + t.a_offset;
    const int64_t na = static_cast<int64_t>(layout.r) * t.in;
    if (init == LoraInit::kKaimingUniform) {
      const float bound = 1.0f / std::sqrt(static_cast<float>(t.in));
      std::uniform_real_distribution<float> u(-bound, bound);
      for (int64_t i = 0; i < na; ++i) a[i] = u(rng);
    } else {
      std::normal_distribution<float> g(0.0f, 1.0f / static_cast<float>(layout.r));
      for (int64_t i = 0; i < na; ++i) a[i] = g(rng);
    }
    float* b = out + t.b_offset;
    for (int64_t i = 0; i < t.out * layout.r; ++i) b[i] = 0.0f;
  }
}

void MergeLoraLayer(const LoraLayout& layout, const UnitSpec& block, float scale, const float* adapter, float* unit) {
  const int r = layout.r;
  for (const LoraTensor& t : layout.LayerTensors(block.layer)) {
    float* w = unit + block.tensors[LoraBaseIndex(t)].offset;
    const float* a = adapter + t.a_offset;
    const float* b = adapter + t.b_offset;
    std::vector<double> row(static_cast<size_t>(t.in));
    for (int64_t o = 0; o < t.out; ++o) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int k = 0; k < r; ++k) {
        const double bk = b[o * r + k];
        const float* ak = a + k * t.in;
        for (int64_t i = 0; i < t.in; ++i) row[i] += bk * ak[i];
      }
      for (int64_t i = 0; i < t.in; ++i) w[o * t.in + i] = static_cast<float>(w[o * t.in + i] + scale * row[i]);
    }
  }
}

}  // namespace shard
