// One-GPU figures for the CUDA backend:
//   1. GEMM TFLOP/s (square and the 1B model's shapes) in fp32, TF32 and bf16
//      (fp32 operands cast to bf16, tensor cores, fp32 accumulation: what the
//      model's GEMMs do under precision bf16) vs the device's dense peak from
//      configs/hardware/gpus.yaml,
//   2. attention forward + backward TFLOP/s (flash kernels, causal) of the fp32
//      SIMT kernels,
//   3. training tokens/s and MFU of a ~1B Llama (llama3.2-1b by default) with
//      the Trainer on one GPU, at train.precision auto (bf16 on sm_80+) or the
//      one given; MFU against the bf16 peak for bf16/fp16, TF32's for fp32,
//   4. attention again with the tensor-core kernels in bf16 (fp16 before
//      sm_80) against that type's dense peak (experimental: a backend created
//      with SHARDD_TC_ATTENTION=1; last, so a fault cannot cost the rest).
//
// usage: gpu_bench [--preset P] [--micro B] [--seq T] [--steps N] [--precision auto|bf16|fp16|fp32]
//                  [--skip-train] [--train-only]
//        gpu_bench --smoke   (preset tiny, micro-batch 1, seq 128, 2 steps: that it starts and prints
//                             its figures; exits 77, which ctest reports as skipped, without a GPU)
// --train-only: just the training figure (e.g. a second run under
// SHARDD_TC_ATTENTION=1, where the trainer's backend uses tensor-core attention).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "shard/backend/backend.h"
#include "shard/backend/hardware_probe.h"
#include "shard/common/logging.h"
#include "shard/spec/llama_config.h"
#include "shard/plan/hardware.h"
#include "shard/train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The catalog entry for this device: the key's model (before the first '-')
// appears in the device name; among several (A100 40/80 GB) the closest memory.
const shard::plan::GpuSpec* FindSpec(const shard::plan::HardwareCatalog& cat, const shard::GpuInfo& g) {
  const shard::plan::GpuSpec* best = nullptr;
  double best_diff = 1e30;
  for (const auto& [key, spec] : cat.gpus) {
    const std::string model = key.substr(0, key.find('-'));
    if (g.name.find(model) == std::string::npos) continue;
    const double diff = std::fabs(spec.memory_gib - g.total_bytes / 1073741824.0);
    if (diff < best_diff) best = &spec, best_diff = diff;
  }
  return best;
}

struct Buf {
  shard::DeviceBuffer b;
  float* p() { return b.data(); }
};

Buf Alloc(shard::Backend* be, int64_t n, float v = 0.01f) {
  auto d = shard::DeviceBuffer::Create(be, n);
  if (!d.ok()) {
    std::fprintf(stderr, "allocation of %lld floats failed: %s\n", static_cast<long long>(n),
                 d.status().ToString().c_str());
    std::exit(1);
  }
  be->Fill(d->data(), n, v);
  return {std::move(d.value())};
}

// Best-of-5 timing of `iters` back-to-back calls.
template <typename F>
double TimeBest(shard::Backend* be, int iters, F f) {
  f();
  be->Synchronize();
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) f();
    be->Synchronize();
    best = std::min(best, Seconds(t0) / iters);
  }
  return best;
}

void GemmBench(shard::Backend* be, const char* mode, double peak, shard::DType compute) {
  struct Shape {
    const char* what;
    int64_t m, n, k;
    bool tb;
  } shapes[] = {
      {"square 8192", 8192, 8192, 8192, false},
      {"1B qkv   x W^T (8192x3072x2048)", 8192, 3072, 2048, true},
      {"1B up    x W^T (8192x16384x2048)", 8192, 16384, 2048, true},
      {"1B down  x W^T (8192x2048x8192)", 8192, 2048, 8192, true},
      {"1B head  x E^T (8192x128256x2048)", 8192, 128256, 2048, true},
  };
  for (const Shape& s : shapes) {
    Buf a = Alloc(be, s.m * s.k), b = Alloc(be, s.k * s.n), c = Alloc(be, s.m * s.n);
    shard::GemmArgs g;
    g.m = s.m, g.n = s.n, g.k = s.k, g.trans_b = s.tb;
    g.a = a.p(), g.lda = s.k, g.b = b.p(), g.ldb = s.tb ? s.k : s.n, g.c = c.p(), g.ldc = s.n;
    g.compute = compute;  // bf16: the operand casts are in the timing, as in training
    const double t = TimeBest(be, 3, [&] { be->Gemm(g); });
    const double tf = 2.0 * s.m * s.n * s.k / t / 1e12;
    std::printf("gemm %-5s %-36s %8.1f TFLOP/s  (%5.1f%% of the %s peak %.1f)\n", mode, s.what, tf,
                peak > 0 ? 100 * tf / peak : 0.0, mode, peak);
  }
}

// compute fp32: the SIMT kernels; bf16/fp16: the tensor-core kernels when `be`
// was created with SHARDD_TC_ATTENTION=1. `peak`: that type's dense peak.
void AttentionBench(shard::Backend* be, const shard::LlamaConfig& c, int64_t batch, int64_t seq,
                    shard::DType compute, double peak) {
  shard::AttentionShape s{batch, seq, c.num_heads, c.num_kv_heads, static_cast<int>(c.head_dim())};
  s.compute = compute;
  const int64_t rows = batch * seq;
  Buf qkv = Alloc(be, rows * s.qkv_stride()), out = Alloc(be, rows * s.out_stride()),
      lse = Alloc(be, rows * s.n_heads), dout = Alloc(be, rows * s.out_stride()),
      dqkv = Alloc(be, rows * s.qkv_stride());
  // Random-ish inputs so the softmax is not degenerate.
  {
    std::vector<float> h(rows * s.qkv_stride());
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-1, 1);
    for (auto& x : h) x = d(rng);
    be->CopyToDevice(qkv.p(), h.data(), h.size() * 4);
  }
  const double tf = TimeBest(be, 2, [&] { be->AttentionForward(s, qkv.p(), nullptr, out.p(), lse.p()); });
  const double tb = TimeBest(be, 2, [&] {
    be->AttentionBackward(s, qkv.p(), nullptr, out.p(), lse.p(), dout.p(), dqkv.p());
  });
  // Causal FLOPs, the usual count: forward 2 matmuls of 2*T*T*hd each per head,
  // halved by the mask; backward 2.5x the forward (recomputation not counted).
  const double fwd = 2.0 * batch * c.num_heads * seq * seq * c.head_dim();
  const double bwd = 2.5 * fwd;
  const double pct = peak > 0 ? 100 * (fwd + bwd) / (tf + tb) / 1e12 / peak : 0.0;
  if (compute == shard::DType::kF32) {
    std::printf("attention fwd  B=%lld T=%lld H=%d/%d hd=%lld  %7.2f ms  %6.1f TFLOP/s\n",
                static_cast<long long>(batch), static_cast<long long>(seq), c.num_heads, c.num_kv_heads,
                static_cast<long long>(c.head_dim()), tf * 1e3, fwd / tf / 1e12);
    std::printf("attention bwd  (dQ, dK/dV kernels, deterministic)      %7.2f ms  %6.1f TFLOP/s\n", tb * 1e3,
                bwd / tb / 1e12);
    std::printf("attention fwd+bwd                                      %7.2f ms  %6.1f TFLOP/s  (%.1f%% of the "
                "fp32 CUDA-core peak %.1f; SIMT fp32 kernels, no tensor cores)\n",
                (tf + tb) * 1e3, (fwd + bwd) / (tf + tb) / 1e12, pct, peak);
    return;
  }
  const char* t = shard::DTypeName(compute);
  std::printf("attention %s fwd  B=%lld T=%lld H=%d/%d hd=%lld  %7.2f ms  %6.1f TFLOP/s\n", t,
              static_cast<long long>(batch), static_cast<long long>(seq), c.num_heads, c.num_kv_heads,
              static_cast<long long>(c.head_dim()), tf * 1e3, fwd / tf / 1e12);
  std::printf("attention %s bwd  (dQ, dK/dV kernels, deterministic) %7.2f ms  %6.1f TFLOP/s\n", t, tb * 1e3,
              bwd / tb / 1e12);
  std::printf("attention %s fwd+bwd                                 %7.2f ms  %6.1f TFLOP/s  (%.1f%% of the %s "
              "dense peak %.1f; wmma tensor-core kernels, SHARDD_TC_ATTENTION=1)\n",
              t, (tf + tb) * 1e3, (fwd + bwd) / (tf + tb) / 1e12, pct, t, peak);
}

// The tensor-core attention: bf16 where the device has it, else fp16 (sm_70+),
// on a backend created with SHARDD_TC_ATTENTION=1 (restored afterwards, so the
// training run below is unaffected).
void TensorCoreAttentionBench(const shard::GpuInfo& g, const shard::LlamaConfig& c, int64_t batch, int64_t seq,
                              double peak_bf16, double peak_fp16) {
  if (g.cc_major < 7) return;
  const char* old = std::getenv("SHARDD_TC_ATTENTION");
  const std::string saved = old ? old : "";
  setenv("SHARDD_TC_ATTENTION", "1", 1);
  auto be = shard::CreateBackend("cuda");
  if (old) setenv("SHARDD_TC_ATTENTION", saved.c_str(), 1);
  else unsetenv("SHARDD_TC_ATTENTION");
  if (!be.ok()) {
    std::printf("gpu_bench: %s\n", be.status().ToString().c_str());
    return;
  }
  if (g.bf16) AttentionBench(be->get(), c, batch, seq, shard::DType::kBF16, peak_bf16);
  else AttentionBench(be->get(), c, batch, seq, shard::DType::kF16, peak_fp16);
}

int TrainBench(const std::string& preset, int64_t micro, int64_t seq, int steps, const std::string& precision,
               double peak_tf32, double peak_bf16, bool native_bf16) {
  auto cfg = shard::LlamaPreset(preset);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().ToString().c_str());
    return 1;
  }
  const std::string tokens = "/tmp/shardd_gpu_bench.u32";
  {
    std::mt19937 rng(1);
    std::vector<uint32_t> t(static_cast<size_t>(micro * seq * (steps + 4) + 1));
    for (auto& x : t) x = rng() % cfg->vocab_size;
    std::ofstream(tokens, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 4);
  }
  const std::string yaml = "name: gpu-bench\nmodel: {preset: " + preset + "}\ndata: {tokens: " + tokens +
                           ", seq_len: " + std::to_string(seq) + ", shuffle: false}\ntrain: {steps: " +
                           std::to_string(steps + 2) + ", global_batch: " + std::to_string(micro) +
                           ", micro_batch: " + std::to_string(micro) +
                           ", lr: 1.0e-4, log_every: 1000, precision: " + precision + "}\n"
                           "checkpoint: {dir: /tmp/shardd_gpu_bench_ckpt, resume: none}\n"
                           "resources: {device: cuda}\n";
  auto job = shard::ParseJobConfig(yaml, "gpu-bench.yaml");
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
    return 1;
  }
  auto t0 = Clock::now();
  auto trainer = shard::Trainer::Create(*job);
  if (!trainer.ok()) {
    std::fprintf(stderr, "%s\n", trainer.status().ToString().c_str());
    return 1;
  }
  std::printf("train: %s (%.3fB parameters, %d layers, d=%lld, vocab %lld), micro-batch %lld x %lld tokens, "
              "setup %.1f s\n",
              preset.c_str(), cfg->NumParams() / 1e9, cfg->num_layers, static_cast<long long>(cfg->hidden_size),
              static_cast<long long>(cfg->vocab_size), static_cast<long long>(micro), static_cast<long long>(seq),
              Seconds(t0));
  for (int i = 0; i < 2; ++i) {
    auto m = (*trainer)->Step();
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      return 1;
    }
  }
  double total = 0, best = 1e30, loss = 0;
  for (int i = 0; i < steps; ++i) {
    auto m = (*trainer)->Step();
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      return 1;
    }
    total += m->seconds;
    best = std::min(best, m->seconds);
    loss = m->loss;
  }
  const double tokens_per_step = static_cast<double>(micro * seq);
  const double tps = tokens_per_step * steps / total;
  // 6N + 12*L*d*T FLOPs per token (N: the parameters in matmuls, i.e. without
  // the input embedding unless it is tied to the head; the attention term
  // counts the full T x T as PaLM's MFU does).
  const double n_matmul = cfg->NumParams() - (cfg->tie_word_embeddings ? 0.0 : 1.0 * cfg->vocab_size * cfg->hidden_size);
  const double flops_tok = 6.0 * n_matmul + 12.0 * cfg->num_layers * cfg->hidden_size * seq;
  const double achieved = tps * flops_tok / 1e12;
  // What precision auto became (the Trainer's rule): bf16 with native bf16, else fp16.
  const std::string ran = precision == "auto" ? (native_bf16 ? "bf16" : "fp16") : precision;
  const bool two_byte = ran != "fp32";
  const double peak = two_byte ? peak_bf16 : peak_tf32;
  std::printf("train: precision %s, %d steps, mean %.3f s/step (best %.3f), loss %.3f, %.0f tokens/s, %.1f model "
              "TFLOP/s, MFU %.1f%% of the %s dense peak %.1f\n",
              ran.c_str(), steps, total / steps, best, loss, tps, achieved, peak > 0 ? 100 * achieved / peak : 0.0,
              two_byte ? "bf16" : "TF32", peak);
  std::printf("train: (%s; attention %s)\n",
              two_byte ? "two-byte weights gathered, GEMM inputs (tensor cores) and kept activations in that "
                         "type, fp32 working set and accumulation"
                       : "fp32 storage, TF32 GEMMs",
              std::getenv("SHARDD_TC_ATTENTION") ? "on tensor cores (SHARDD_TC_ATTENTION)" : "fp32 flash kernels");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "llama3.2-1b";
  int64_t micro = 4, seq = 2048;
  int steps = 5;
  std::string precision = "auto";
  bool skip_train = false, train_only = false, smoke = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--smoke") {
      smoke = true;
      preset = "tiny", micro = 1, seq = 128, steps = 2;
    } else if (a == "--preset") preset = next();
    else if (a == "--micro") micro = std::stoll(next());
    else if (a == "--seq") seq = std::stoll(next());
    else if (a == "--steps") steps = std::stoi(next());
    else if (a == "--precision") precision = next();
    else if (a == "--skip-train") skip_train = true;
    else if (a == "--train-only") train_only = true;
    else {
      std::fprintf(stderr,
                   "usage: gpu_bench [--preset P] [--micro B] [--seq T] [--steps N] "
                   "[--precision auto|bf16|fp16|fp32] [--skip-train] [--train-only]\n");
      return 2;
    }
  }
  shard::InitLogging("warn");
  auto hw = shard::ProbeHardware();
  if (!hw.ok()) {
    std::printf("gpu_bench: %s\n", hw.status().ToString().c_str());
    return smoke ? 77 : 3;  // a build or host without CUDA: nothing to measure
  }
  std::fputs(hw->ToString().c_str(), stdout);
  if (hw->gpus.empty()) {
    std::printf("gpu_bench: no CUDA device on this host; nothing to measure\n");
    return smoke ? 77 : 3;
  }
  const shard::GpuInfo& g = hw->gpus[0];
  double peak_fp32 = 0, peak_tf32 = 0, peak_bf16 = 0, peak_fp16 = 0;
  auto cat = shard::plan::LoadDefaultHardwareCatalog();
  const shard::plan::GpuSpec* spec = cat.ok() ? FindSpec(*cat, g) : nullptr;
  if (spec) {
    peak_fp32 = spec->tflops_fp32;
    peak_tf32 = spec->tflops_tf32;
    peak_bf16 = spec->tflops_bf16;
    peak_fp16 = spec->tflops_fp16;
    std::printf("catalog: %s (%s): dense peak fp32 %.1f, tf32 %.1f, bf16 %.1f TFLOP/s\n", spec->name.c_str(),
                spec->product.c_str(), spec->tflops_fp32, spec->tflops_tf32, spec->tflops_bf16);
  } else {
    std::printf("catalog: no entry for %s; percentages of peak are omitted\n", g.name.c_str());
  }
  std::printf("precision: GEMM figures in strict fp32, TF32 and bf16 inputs (fp32 accumulation); the training run "
              "uses precision %s\n", precision.c_str());

  if (train_only) return TrainBench(preset, micro, seq, steps, precision, peak_tf32, peak_bf16, g.bf16);
  for (const char* mode : {"fp32", "tf32", "bf16"}) {
    const bool tf32 = std::strcmp(mode, "tf32") == 0, bf16 = std::strcmp(mode, "bf16") == 0;
    if ((tf32 && !g.tf32) || (bf16 && !g.bf16)) continue;
    shard::BackendOptions o;
    o.allow_tf32 = tf32;
    auto be = shard::CreateBackend("cuda", o);
    if (!be.ok()) {
      std::printf("gpu_bench: %s\n", be.status().ToString().c_str());
      return 3;
    }
    GemmBench(be->get(), mode, tf32 ? peak_tf32 : bf16 ? peak_bf16 : peak_fp32,
              bf16 ? shard::DType::kBF16 : shard::DType::kF32);
    if (!tf32 && !bf16) {
      auto cfg = shard::LlamaPreset(preset);
      if (cfg.ok()) AttentionBench(be->get(), *cfg, micro, seq, shard::DType::kF32, peak_fp32);
    }
  }
  // The experimental tensor-core attention runs last: should it fault, the
  // device context is lost, and the figures above (and training) are already out.
  const int rc = skip_train ? 0 : TrainBench(preset, micro, seq, steps, precision, peak_tf32, peak_bf16, g.bf16);
  if (auto cfg = shard::LlamaPreset(preset); cfg.ok())
    TensorCoreAttentionBench(g, *cfg, micro, seq, peak_bf16, peak_fp16);
  return rc;
}
