// Optimizer-state offload (parallel.offload_optimizer), in layers:
//   * HostBuffer / Backend::AllocateHost: aligned, usable host memory;
//   * OptimizerState alone on an FSDP runtime: offloaded AdamW steps are
//     bitwise the on-device ones, the device holds no moments and no gradient
//     shard (asking for it aborts), and the master is copied back into the
//     device parameter shard;
//   * whole trainers (ranks as threads, local communicator, 2-4 micro-batches
//     per step): an offloaded run equals a non-offloaded run bitwise at W = 1
//     and W = 2 (full_shard and no_shard), in fp32, bf16 (two-byte device
//     shard, 2 B/param), bf16 with a bf16 reduce-scatter, and fp16;
//   * checkpoints: saved offloaded, resumed on the device, and the reverse,
//     continue bitwise like an uninterrupted run (fp32 and bf16).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include "shard/backend/backend.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "shard/spec/param_layout.h"
#include "shard/train/optimizer_state.h"
#include "shard/train/trainer.h"
#include "tests/unit/train/trainer_ranks.h"

// Runs are described with designated initializers that leave defaulted
// members out on purpose; GCC 12's -Wextra flags each omission.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace shard {
namespace {

namespace fs = std::filesystem;

TEST(HostBufferTest, AllocatesAlignedWritableMemoryAndMoves) {
  auto be = CreateBackend("cpu");
  ASSERT_TRUE(be.ok());
  auto b = HostBuffer::Create(be->get(), 1001);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_NE(b->data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u);
  for (int i = 0; i < 1001; ++i) b->data()[i] = static_cast<float>(i);
  HostBuffer moved = std::move(*b);
  EXPECT_EQ(b->data(), nullptr);
  EXPECT_EQ(moved.size(), 1001);
  EXPECT_EQ(moved.data()[1000], 1000.0f);
  auto empty = HostBuffer::Create(be->get(), 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
}

// ---- OptimizerState on a one-rank runtime ---------------------------------

// A unit layout of two units with a decayed matrix and a non-decayed norm each.
ParamLayout TwoUnits() {
  ParamLayout l;
  for (int u = 0; u < 2; ++u) {
    UnitSpec us;
    us.name = "u" + std::to_string(u);
    TensorSpec w;
    w.hf_name = us.name + ".w";
    w.offset = 0;
    w.numel = 3000 + 17 * u;
    w.decay = true;
    TensorSpec n;
    n.hf_name = us.name + ".norm";
    n.offset = w.numel;
    n.numel = 61;
    n.decay = false;
    us.tensors = {w, n};
    us.numel = w.numel + n.numel;
    l.units.push_back(us);
  }
  return l;
}

struct Optimizer {
  std::unique_ptr<Backend> be;
  std::unique_ptr<FsdpRuntime> rt;
  std::unique_ptr<OptimizerState> st;
};

Optimizer MakeOptimizer(const ParamLayout& layout, bool offload) {
  Optimizer o;
  auto be = CreateBackend("cpu");
  EXPECT_TRUE(be.ok());
  o.be = std::move(*be);
  std::vector<int64_t> numels;
  for (const auto& u : layout.units) numels.push_back(u.numel);
  FsdpOptions fo;
  fo.moments_on_device = !offload;
  fo.grads_on_device = !offload;
  auto rt = FsdpRuntime::Create(o.be.get(), numels, fo, nullptr, nullptr);
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  o.rt = std::move(*rt);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (int u = 0; u < o.rt->num_units(); ++u) {
    std::vector<float> p(o.rt->layout(u).shard_numel);
    for (auto& x : p) x = nd(rng);
    o.be->CopyToDevice(o.rt->param_shard(u), p.data(), p.size() * 4);
  }
  auto st = OptimizerState::Create(o.be.get(), o.rt.get(), offload);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  o.st = std::move(*st);
  return o;
}

void FillGrads(Optimizer& o, int step) {
  std::mt19937 rng(100 + step);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int u = 0; u < o.rt->num_units(); ++u) {
    std::vector<float> g(o.rt->layout(u).shard_numel);
    for (auto& x : g) x = nd(rng);
    if (o.rt->grads_on_host()) {
      std::copy(g.begin(), g.end(), o.rt->host_grad_shard(u));
    } else {
      o.be->CopyToDevice(o.rt->grad_shard(u), g.data(), g.size() * 4);
    }
  }
}

TEST(OptimizerStateTest, OffloadedStepsAreBitwiseTheDeviceStepsAndTheDeviceHoldsNoMoments) {
  const ParamLayout layout = TwoUnits();
  Optimizer dev = MakeOptimizer(layout, false), off = MakeOptimizer(layout, true);
  int64_t shard_numel = 0;  // one rank: the whole (padded) units
  for (int u = 0; u < 2; ++u) shard_numel += dev.rt->layout(u).shard_numel;
  EXPECT_EQ(dev.st->device_bytes(), 2 * 4 * shard_numel);
  EXPECT_EQ(dev.st->host_bytes(), 0);
  EXPECT_EQ(off.st->device_bytes(), 0);
  EXPECT_EQ(off.rt->adam_m(0), nullptr);
  // No device gradient shard when offloaded; the parameter shard stays (fp32 here).
  EXPECT_EQ(dev.st->grad_shard_device_bytes(), 4 * shard_numel);
  EXPECT_EQ(off.st->grad_shard_device_bytes(), 0);
  EXPECT_EQ(off.st->param_shard_device_bytes(), 4 * shard_numel);
  // master, m, v, gradient per unit plus the runtime's ring of staging buffers
  // of the largest shard.
  EXPECT_EQ(off.st->host_bytes(),
            4 * 4 * shard_numel + FsdpRuntime::kHostStages * 4 * off.rt->layout(1).shard_numel);
  EXPECT_EQ(off.rt->host_stage_bytes(), FsdpRuntime::kHostStages * 4 * off.rt->layout(1).shard_numel);
  OptimConfig c;
  c.weight_decay = 0.1;
  for (int s = 1; s <= 4; ++s) {
    FillGrads(dev, s);
    FillGrads(off, s);
    const float clip = s == 3 ? 0.37f : 1.0f;
    ASSERT_TRUE(dev.st->Step(layout, c, 1e-3f * s, s, clip).ok());
    ASSERT_TRUE(off.st->Step(layout, c, 1e-3f * s, s, clip).ok());
  }
  for (int u = 0; u < 2; ++u) {
    const int64_t n = layout.units[u].numel;
    std::vector<float> p0(n), m0(n), v0(n), p1(n), m1(n), v1(n), dp(n);
    dev.st->ReadShard(u, n, p0.data(), m0.data(), v0.data());
    off.st->ReadShard(u, n, p1.data(), m1.data(), v1.data());
    EXPECT_TRUE(p0 == p1) << "unit " << u << ": params differ";
    EXPECT_TRUE(m0 == m1) << "unit " << u << ": m differs";
    EXPECT_TRUE(v0 == v1) << "unit " << u << ": v differs";
    // The updated master reached the device parameter shard.
    off.be->CopyToHost(dp.data(), off.rt->param_shard(u), n * 4);
    EXPECT_TRUE(dp == p1) << "unit " << u << ": the device shard is not the master";
    // Guard: the steps moved the weights and the moments.
    EXPECT_NE(m1[0], 0.0f);
  }
}

TEST(OptimizerStateTest, WriteShardSetsMasterAndDeviceShard) {
  const ParamLayout layout = TwoUnits();
  Optimizer off = MakeOptimizer(layout, true);
  const int64_t n = layout.units[0].numel;
  std::vector<float> p(n, 0.5f), m(n, 0.25f), v(n, 0.125f), rp(n), rm(n), rv(n), dp(n);
  off.st->WriteShard(0, p.data(), m.data(), v.data());
  off.st->ReadShard(0, n, rp.data(), rm.data(), rv.data());
  off.be->CopyToHost(dp.data(), off.rt->param_shard(0), n * 4);
  EXPECT_TRUE(rp == p && rm == m && rv == v && dp == p);
}

TEST(OptimizerStateDeathTest, DeviceGradShardOfAnOffloadedRuntimeIsAnError) {
  const ParamLayout layout = TwoUnits();
  Optimizer off = MakeOptimizer(layout, true);
  EXPECT_DEATH(off.rt->grad_shard(0), "host memory under parallel.offload_optimizer");
  Optimizer dev = MakeOptimizer(layout, false);
  EXPECT_DEATH(dev.rt->host_grad_shard(0), "on the device");
}

// A runtime told to keep gradients on the host refuses to run a micro-batch
// until host shards are attached, instead of dropping the gradients.
TEST(OptimizerStateTest, HostGradientRuntimeWithoutAttachedShardsFails) {
  auto be = CreateBackend("cpu");
  ASSERT_TRUE(be.ok());
  FsdpOptions fo;
  fo.moments_on_device = false;
  fo.grads_on_device = false;
  auto rt = FsdpRuntime::Create(be->get(), {100}, fo, nullptr, nullptr);
  ASSERT_TRUE(rt.ok());
  EXPECT_EQ((*rt)->grad_shard_device_bytes(), 0);
  (*rt)->BeginMicroBatch();
  auto g = (*rt)->GradBuffer(0);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().ToString().find("no host gradient shards"), std::string::npos) << g.status().ToString();
  EXPECT_FALSE((*rt)->FinishGradients().ok());
}

TEST(OptimizerStateTest, RefusesARuntimeWithTheOtherMomentPlacement) {
  const ParamLayout layout = TwoUnits();
  Optimizer dev = MakeOptimizer(layout, false);
  auto st = OptimizerState::Create(dev.be.get(), dev.rt.get(), /*offload=*/true);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().ToString().find("offload_optimizer"), std::string::npos);
}

// ---- Whole trainers ---------------------------------------------------------

std::string Tokens() {
  static std::string path = [] {
    std::string p = testing::TempDir() + "/optimizer_offload." + std::to_string(::getpid()) + ".u32";
    std::mt19937 rng(7);
    std::vector<uint32_t> t(16000);
    for (size_t i = 0; i < t.size(); ++i) t[i] = (i % 11 == 0) ? rng() % 512 : (t[i - 1] * 5 + 1) % 512;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 4);
    return p;
  }();
  return path;
}

std::string NewCkptDir(const std::string& name) {
  std::string tmpl = testing::TempDir() + "/optimizer_offload_" + name + "_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

constexpr int kSteps = 5;

struct Opts {
  int world = 1;
  std::string strategy = "full_shard";
  bool offload = false;
  std::string ckpt_dir;  // "" = no checkpoints
  int every = 0;
  std::string resume = "none";
  int stop_after = kSteps;
  std::string precision = "fp32";  // train.precision
  std::string reduce = "fp32";     // parallel.reduce_dtype
};

// Rank-concatenated shards of every unit: params (master), m, v, and the
// device parameter shards as the model computes with them (fp32: the shard;
// bf16: the shard's bf16 rounding, or the two-byte shard widened).
struct State {
  std::vector<std::vector<float>> params, m, v, device_params;
  bool operator==(const State&) const = default;
};

struct RunResult {
  std::map<int64_t, double> losses;
  int64_t start_step = 0;
  int64_t device_bytes = -1;
  int64_t param_shard_bytes = -1, grad_shard_bytes = -1, host_bytes = -1, model_numel = 0;
  int64_t two_byte_shard_bytes = 0;  // what a two-byte shard of every unit takes (odd sizes round up)
  DType shard_dtype = DType::kF32;
  State final;
};

RunResult Train(const Opts& o) {
  std::vector<std::string> sets = {"parallel.world_size=" + std::to_string(o.world),
                                   "parallel.strategy=" + o.strategy, "train.steps=" + std::to_string(kSteps),
                                   std::string("parallel.offload_optimizer=") + (o.offload ? "true" : "false"),
                                   "checkpoint.resume=" + o.resume, "checkpoint.async=false",
                                   "checkpoint.every_steps=" + std::to_string(o.every),
                                   "train.precision=" + o.precision, "parallel.reduce_dtype=" + o.reduce};
  if (!o.ckpt_dir.empty()) sets.push_back("checkpoint.dir=" + o.ckpt_dir);
  const std::string yaml = "name: t\nmodel: {preset: tiny}\ndata: {tokens: " + Tokens() +
                           ", seq_len: 32, shuffle: true}\ntrain: {global_batch: 8, micro_batch: 2, lr: 3.0e-3, "
                           "warmup_steps: 2, schedule: cosine, weight_decay: 0.1, grad_clip: 0.5, log_every: 1000}\n"
                           "resources: {device: cpu}\n";
  RunResult out;
  std::vector<std::map<int64_t, double>> losses(o.world);
  std::vector<State> states(o.world);
  std::vector<int64_t> starts(o.world), dev_bytes(o.world), pbytes(o.world), gbytes(o.world), hbytes(o.world),
      numel(o.world), numel2(o.world);
  std::vector<DType> shard_dt(o.world, DType::kF32);
  auto parsed = ParseJobConfig(yaml, "job.yaml", sets);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  if (!parsed.ok()) return out;
  const DType pdt = PrecisionDType(parsed->train.precision);  // what the device shard rounds to
  const Status created = testing_ranks::OnTrainerRanks(yaml, o.world, sets, [&](Trainer& tr, int r) {
    EXPECT_EQ(tr.optimizer().offloaded(), o.offload);
    starts[r] = tr.step();
    dev_bytes[r] = tr.optimizer().device_bytes();
    pbytes[r] = tr.optimizer().param_shard_device_bytes();
    gbytes[r] = tr.optimizer().grad_shard_device_bytes();
    hbytes[r] = tr.optimizer().host_bytes();
    shard_dt[r] = tr.runtime().param_shard_dtype();
    for (int u = 0; u < tr.runtime().num_units(); ++u) {
      numel[r] += tr.runtime().layout(u).shard_numel;
      numel2[r] += (tr.runtime().layout(u).shard_numel + 1) / 2 * 4;
    }
    while (tr.step() < o.stop_after) {
      auto m = tr.Step();
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      losses[r][m->step] = m->loss;
    }
    ASSERT_TRUE(tr.checkpointer()->Wait().ok());
    FsdpRuntime& rt = tr.runtime();
    State& s = states[r];
    for (int u = 0; u < rt.num_units(); ++u) {
      const int64_t n = rt.layout(u).shard_numel;
      for (auto* x : {&s.params, &s.m, &s.v, &s.device_params}) x->emplace_back(n);
      tr.optimizer().ReadShard(u, n, s.params[u].data(), s.m[u].data(), s.v[u].data());
      // The CPU backend: "device" buffers are host memory, casts run in place here.
      Backend* be = tr.backend();
      std::vector<uint16_t> lp(n);
      if (rt.param_shard_dtype() != DType::kF32) {
        be->CopyToHost(lp.data(), rt.param_shard(u), n * DTypeSize(rt.param_shard_dtype()));
        be->CastToF32(lp.data(), s.device_params[u].data(), n, rt.param_shard_dtype());
      } else {
        be->CopyToHost(s.device_params[u].data(), rt.param_shard(u), n * sizeof(float));
        if (pdt != DType::kF32) {
          be->CastFromF32(s.device_params[u].data(), lp.data(), n, pdt);
          be->CastToF32(lp.data(), s.device_params[u].data(), n, pdt);
        }
      }
    }
  });
  EXPECT_TRUE(created.ok()) << created.ToString();
  for (int r = 1; r < o.world; ++r) EXPECT_EQ(losses[r], losses[0]) << "ranks disagree on the loss";
  out.losses = losses[0];
  out.start_step = starts[0];
  out.device_bytes = dev_bytes[0];
  out.param_shard_bytes = pbytes[0];
  out.grad_shard_bytes = gbytes[0];
  out.host_bytes = hbytes[0];
  out.model_numel = numel[0];
  out.two_byte_shard_bytes = numel2[0];
  out.shard_dtype = shard_dt[0];
  for (const State& s : states) {
    auto append = [](std::vector<std::vector<float>>& dst, const std::vector<std::vector<float>>& src) {
      dst.insert(dst.end(), src.begin(), src.end());
    };
    append(out.final.params, s.params);
    append(out.final.m, s.m);
    append(out.final.v, s.v);
    append(out.final.device_params, s.device_params);
  }
  return out;
}

void ExpectBitwise(const RunResult& a, const RunResult& b, const std::string& what) {
  EXPECT_EQ(a.losses, b.losses) << what << ": losses differ";
  ASSERT_EQ(a.final.params.size(), b.final.params.size()) << what;
  for (size_t u = 0; u < a.final.params.size(); ++u) {
    EXPECT_TRUE(a.final.params[u] == b.final.params[u]) << what << ": params (master) of shard " << u << " differ";
    EXPECT_TRUE(a.final.m[u] == b.final.m[u]) << what << ": Adam m of shard " << u << " differs";
    EXPECT_TRUE(a.final.v[u] == b.final.v[u]) << what << ": Adam v of shard " << u << " differs";
    EXPECT_TRUE(a.final.device_params[u] == b.final.device_params[u])
        << what << ": device parameter shard " << u << " differs";
  }
}

void OffloadEqualsDevice(int world, const std::string& strategy = "full_shard", const std::string& precision = "fp32",
                         const std::string& reduce = "fp32") {
  SCOPED_TRACE(strategy + " W=" + std::to_string(world) + " " + precision + " reduce " + reduce);
  const RunResult dev =
      Train({.world = world, .strategy = strategy, .offload = false, .precision = precision, .reduce = reduce});
  const RunResult off =
      Train({.world = world, .strategy = strategy, .offload = true, .precision = precision, .reduce = reduce});
  ASSERT_EQ(dev.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_GT(dev.device_bytes, 0);
  EXPECT_EQ(off.device_bytes, 0) << "offloaded moments still on the device";
  EXPECT_EQ(dev.grad_shard_bytes, 4 * dev.model_numel);
  EXPECT_EQ(off.grad_shard_bytes, 0) << "offloaded gradients still have a device shard";
  EXPECT_EQ(dev.param_shard_bytes, 4 * dev.model_numel);
  EXPECT_GE(off.host_bytes, 4 * 4 * off.model_numel);  // master, m, v, gradients
  if (precision == "fp32") {
    EXPECT_EQ(off.shard_dtype, DType::kF32);
    EXPECT_EQ(off.param_shard_bytes, 4 * off.model_numel);
  } else {
    // The planner's assumption: a compute-dtype shard, 2 B/param, and no gradient shard.
    EXPECT_NE(off.shard_dtype, DType::kF32);
    EXPECT_EQ(off.param_shard_bytes, off.two_byte_shard_bytes);
    EXPECT_LE(off.param_shard_bytes, 2 * off.model_numel + 2 * 64);
  }
  // Losses, master, m, v, and the weights the model computes with.
  ExpectBitwise(dev, off, strategy + " W=" + std::to_string(world) + " " + precision);
  // The master and the device shard agree after the last step (fp32), or the
  // device shard is the master's rounding (two-byte).
  if (precision == "fp32") {
    EXPECT_TRUE(off.final.params == off.final.device_params);
  }
  // Guard: training moved the loss.
  EXPECT_NE(dev.losses.begin()->second, dev.losses.rbegin()->second);
}

TEST(OptimizerOffloadTrainerTest, OneRankOffloadedRunIsBitwiseTheDeviceRun) { OffloadEqualsDevice(1); }
TEST(OptimizerOffloadTrainerTest, TwoRanksFullShardOffloadedRunIsBitwiseTheDeviceRun) { OffloadEqualsDevice(2); }
// Replicas (no_shard: each rank holds the whole model, gradients all-reduced)
// each step their own host copy of the same state.
TEST(OptimizerOffloadTrainerTest, TwoRanksNoShardOffloadedRunIsBitwiseTheDeviceRun) {
  OffloadEqualsDevice(2, "no_shard");
}
// bf16: the device path computes on the bf16 rounding of its fp32 shard; the
// offloaded one on the bf16 cast of the host master, stored as its device
// shard — the same values, so bitwise the same run.
TEST(OptimizerOffloadTrainerTest, Bf16OneRankOffloadedRunIsBitwiseTheDeviceRun) { OffloadEqualsDevice(1, "full_shard", "bf16"); }
TEST(OptimizerOffloadTrainerTest, Bf16TwoRanksFullShardOffloadedRunIsBitwiseTheDeviceRun) {
  OffloadEqualsDevice(2, "full_shard", "bf16");
}
TEST(OptimizerOffloadTrainerTest, Bf16TwoRanksNoShardOffloadedRunIsBitwiseTheDeviceRun) {
  OffloadEqualsDevice(2, "no_shard", "bf16");
}
// A bf16 reduce-scatter wire: the widened landing shard goes to the host.
TEST(OptimizerOffloadTrainerTest, Bf16ReduceTwoRanksFullShardOffloadedRunIsBitwiseTheDeviceRun) {
  OffloadEqualsDevice(2, "full_shard", "bf16", "bf16");
}
// fp16 turns the dynamic loss scaler on: its inf/NaN vote reads the host gradients.
TEST(OptimizerOffloadTrainerTest, Fp16TwoRanksFullShardOffloadedRunIsBitwiseTheDeviceRun) {
  OffloadEqualsDevice(2, "full_shard", "fp16", "fp16");
}

// Saved with one placement, resumed with the other: the continuation is
// bitwise the uninterrupted run (the checkpoint bytes do not depend on where
// the state lived).
void CrossResume(int world, bool save_offloaded, const std::string& precision = "fp32") {
  const std::string what = std::string(save_offloaded ? "offloaded -> device" : "device -> offloaded") +
                           " W=" + std::to_string(world) + " " + precision;
  SCOPED_TRACE(what);
  const RunResult straight = Train({.world = world, .offload = !save_offloaded, .precision = precision});
  const std::string dir = NewCkptDir(save_offloaded ? "off2dev" : "dev2off");
  const RunResult first = Train(
      {.world = world, .offload = save_offloaded, .ckpt_dir = dir, .every = 2, .stop_after = 3, .precision = precision});
  for (int s = 1; s <= 3; ++s) EXPECT_EQ(first.losses.at(s), straight.losses.at(s)) << what << " step " << s;
  const RunResult resumed = Train(
      {.world = world, .offload = !save_offloaded, .ckpt_dir = dir, .every = 2, .resume = "auto", .precision = precision});
  EXPECT_EQ(resumed.start_step, 2) << what;
  ASSERT_EQ(resumed.losses.begin()->first, 3) << what;
  RunResult tail = straight;
  tail.losses.erase(tail.losses.begin(), tail.losses.find(3));
  ExpectBitwise(tail, resumed, what);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(OptimizerOffloadTrainerTest, OffloadedCheckpointResumesOnTheDeviceBitwise) { CrossResume(1, true); }
TEST(OptimizerOffloadTrainerTest, DeviceCheckpointResumesOffloadedBitwise) { CrossResume(1, false); }
TEST(OptimizerOffloadTrainerTest, TwoRanksOffloadedCheckpointResumesOnTheDeviceBitwise) { CrossResume(2, true); }
// bf16: the checkpoint holds the fp32 master either way; resuming offloaded
// casts it into the two-byte device shard (OptimizerState::WriteShard).
TEST(OptimizerOffloadTrainerTest, Bf16TwoRanksCheckpointsResumeAcrossPlacementsBitwise) {
  CrossResume(2, true, "bf16");
  CrossResume(2, false, "bf16");
}

}  // namespace
}  // namespace shard
