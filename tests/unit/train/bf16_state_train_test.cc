// optim.state_dtype: bf16 through whole trainers (ranks as threads, local
// communicator): the job file key and its refusals, the host bytes it holds,
// that it learns like fp32 state, checkpoints holding the state as held
// (bf16 units, format version 2), resumes that continue bitwise like the
// uninterrupted run (also resharded), and resumes across a state_dtype change
// (converted: widened exactly, or rounded to nearest).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "shard/ckpt/catalog.h"
#include "shard/train/local_params.h"
#include "shard/train/trainer.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

std::string Tokens() {
  static std::string path = [] {
    std::string p = testing::TempDir() + "/bf16_state." + std::to_string(::getpid()) + ".u32";
    std::mt19937 rng(7);
    std::vector<uint32_t> t(16000);
    for (size_t i = 0; i < t.size(); ++i) t[i] = (i % 11 == 0) ? rng() % 512 : (t[i - 1] * 5 + 1) % 512;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 4);
    return p;
  }();
  return path;
}

std::string Yaml() {
  return "name: t\nmodel: {preset: tiny}\ndata: {tokens: " + Tokens() +
         ", seq_len: 32, shuffle: true}\ntrain: {steps: 6, global_batch: 8, micro_batch: 2, lr: 3.0e-3, "
         "warmup_steps: 2, schedule: cosine, weight_decay: 0.1, grad_clip: 0.5, log_every: 1000}\n"
         "resources: {device: cpu}\n";
}

std::string NewDir(const std::string& name) {
  std::string tmpl = testing::TempDir() + "/bf16_state_" + name + "_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

struct RunOut {
  std::map<int64_t, double> losses;
  int64_t start_step = 0;
  int64_t host_bytes = 0, numel = 0;  // rank 0's
  std::vector<int64_t> unit_numel;     // rank 0's shard sizes
  // Rank-ordered shards of every unit: master (widened), m, v, device shard widened.
  std::vector<std::vector<float>> params, m, v, device;
};

// Trains world ranks up to `stop_after` with the given --set overrides.
RunOut Train(int world, std::vector<std::string> sets, int stop_after = 6) {
  sets.push_back("parallel.world_size=" + std::to_string(world));
  std::vector<RunOut> per(world);
  const Status created = testing_ranks::OnTrainerRanks(Yaml(), world, sets, [&](Trainer& tr, int r) {
    RunOut& out = per[r];
    out.start_step = tr.step();
    out.host_bytes = tr.optimizer().host_bytes();
    while (tr.step() < stop_after) {
      auto m = tr.Step();
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      out.losses[m->step] = m->loss;
    }
    ASSERT_TRUE(tr.checkpointer()->Wait().ok());
    FsdpRuntime& rt = tr.runtime();
    for (int u = 0; u < rt.num_units(); ++u) {
      const int64_t n = rt.layout(u).shard_numel;
      out.numel += n;
      out.unit_numel.push_back(n);
      for (auto* x : {&out.params, &out.m, &out.v, &out.device}) x->emplace_back(n);
      tr.optimizer().ReadShard(u, n, out.params[u].data(), out.m[u].data(), out.v[u].data());
      const DType dt = rt.param_shard_dtype();
      std::vector<uint8_t> raw(n * DTypeSize(dt));
      tr.backend()->CopyToHost(raw.data(), rt.param_shard(u), raw.size());
      ConvertToF32(dt, raw.data(), out.device[u].data(), n);
    }
  });
  EXPECT_TRUE(created.ok()) << created.ToString();
  RunOut out = per[0];
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(per[r].losses, per[0].losses) << "ranks disagree on the loss";
    for (auto [dst, src] : {std::pair{&out.params, &per[r].params}, {&out.m, &per[r].m}, {&out.v, &per[r].v},
                            {&out.device, &per[r].device}})
      dst->insert(dst->end(), src->begin(), src->end());
  }
  return out;
}

const std::vector<std::string> kBf16 = {"optim.state_dtype=bf16", "parallel.offload_optimizer=true",
                                        "checkpoint.resume=none"};

bool AllBf16(const std::vector<std::vector<float>>& xs) {
  for (const auto& x : xs)
    for (float f : x)
      if (BF16ToF32(F32ToBF16(f)) != f) return false;
  return true;
}

void ExpectSameState(const RunOut& a, const RunOut& b, const std::string& what) {
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t u = 0; u < a.params.size(); ++u) {
    EXPECT_TRUE(a.params[u] == b.params[u]) << what << ": master of shard " << u << " differs";
    EXPECT_TRUE(a.m[u] == b.m[u]) << what << ": m of shard " << u << " differs";
    EXPECT_TRUE(a.v[u] == b.v[u]) << what << ": v of shard " << u << " differs";
    EXPECT_TRUE(a.device[u] == b.device[u]) << what << ": device shard " << u << " differs";
  }
}

// ---- the job file ------------------------------------------------------------

TEST(StateDtypeJobTest, ParsedRefusedAndExplained) {
  auto job = ParseJobConfig(Yaml() + "optim: {state_dtype: bf16}\nparallel: {offload_optimizer: true}\n", "j.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->train.optim.state_dtype, DType::kBF16);
  auto deflt = ParseJobConfig(Yaml(), "j.yaml");
  ASSERT_TRUE(deflt.ok());
  EXPECT_EQ(deflt->train.optim.state_dtype, DType::kF32);
  auto expect_error = [](const std::string& yaml, const std::vector<std::string>& sets, const std::string& what) {
    auto j = ParseJobConfig(yaml, "j.yaml", sets);
    ASSERT_FALSE(j.ok()) << what;
    EXPECT_NE(j.status().message().find(what), std::string::npos) << j.status().ToString();
  };
  expect_error(Yaml() + "optim: {state_dtype: fp16}\n", {}, "optim.state_dtype: 'fp16' is not one of: fp32, bf16");
  expect_error(Yaml() + "optim: {state_dtyp: bf16}\n", {}, "state_dtyp");
  expect_error(Yaml(), {"optim.state_dtype=bf16"}, "needs parallel.offload_optimizer: true");
  expect_error(Yaml() + "parallel: {offload_optimizer: true}\npeft: {method: lora}\n", {"optim.state_dtype=bf16"},
               "only applies to full fine-tuning");
}

// ---- training ------------------------------------------------------------------

// 6 B/param of master, m, v (plus the fp32 gradient shard) instead of 12, the
// master every bf16 value it should be, the device shard its widening, and a
// loss that follows the fp32-state run's.
TEST(Bf16StateTrainTest, HoldsTwoBytesPerValueAndTracksFp32State) {
  const RunOut fp = Train(2, {"parallel.offload_optimizer=true", "checkpoint.resume=none"});
  const RunOut bf = Train(2, kBf16);
  ASSERT_EQ(bf.losses.size(), 6u);
  // fp32 state: 3 x 4 B per element; bf16: 3 x 2 B (odd shards round up to
  // whole floats), plus two fp32 staging shards of the largest unit to widen
  // the master for an fp32 device shard (none under bf16 precision).
  int64_t saved = 0, largest = 0;
  for (int64_t n : fp.unit_numel) {
    saved += 12 * n - 12 * ((n + 1) / 2);
    largest = std::max(largest, n);
  }
  EXPECT_EQ(fp.host_bytes - bf.host_bytes, saved - 8 * largest);
  EXPECT_GE(saved, 6 * fp.numel - 12 * static_cast<int64_t>(fp.unit_numel.size()));
  EXPECT_TRUE(AllBf16(bf.params) && AllBf16(bf.m) && AllBf16(bf.v)) << "the state is held in bf16";
  for (size_t u = 0; u < bf.params.size(); ++u) EXPECT_TRUE(bf.params[u] == bf.device[u]) << "shard " << u;
  bool moments = false;
  for (const auto& m : bf.m)
    for (float x : m) moments |= x != 0.0f;
  EXPECT_TRUE(moments) << "the steps wrote the moments";
  for (const auto& [step, loss] : fp.losses) EXPECT_NEAR(bf.losses.at(step), loss, 0.02 * loss) << "step " << step;
  // Same seed, same draws: a second run is bitwise the first.
  const RunOut again = Train(2, kBf16);
  EXPECT_EQ(again.losses, bf.losses);
  ExpectSameState(bf, again, "a repeated bf16-state run");
}

// Under train.precision bf16 the device shard is the bf16 master itself.
TEST(Bf16StateTrainTest, Bf16PrecisionUploadsTheMasterAsIs) {
  auto sets = kBf16;
  sets.push_back("train.precision=bf16");
  const RunOut bf = Train(1, sets, 3);
  ASSERT_EQ(bf.losses.size(), 3u);
  for (size_t u = 0; u < bf.params.size(); ++u) EXPECT_TRUE(bf.params[u] == bf.device[u]) << "shard " << u;
}

// ---- checkpoints -------------------------------------------------------------------

// Saved at step 2 or 4 (sync: written in place; async: through a snapshot),
// resumed at W = 2 (bitwise the uninterrupted run) or resharded to W = 1
// (the same to the rounding of another summation order), and the shard files hold bf16 units (6 B/elem, version 2).
TEST(Bf16StateTrainTest, CheckpointsHoldBf16AndResumeBitwise) {
  for (const std::string& async : std::vector<std::string>{"false", "true"}) {
    SCOPED_TRACE("checkpoint.async=" + async);
    const std::string dir = NewDir("resume");
    auto with = kBf16;
    with.insert(with.end(), {"checkpoint.dir=" + dir, "checkpoint.every_steps=2", "checkpoint.async=" + async});
    const RunOut straight = Train(2, kBf16);
    const RunOut first = Train(2, with, 3);
    for (int s = 1; s <= 3; ++s) EXPECT_EQ(first.losses.at(s), straight.losses.at(s)) << "step " << s;
    // The step-2 checkpoint: bf16 units, version 2, ~6 B per element.
    const std::string step_dir = dir + "/t/step_00000002";
    auto reader = CheckpointReader::Open(step_dir, true);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ(reader->state_dtype(), DType::kBF16);
    int64_t elems = 0, bytes = 0;
    for (const auto& f : reader->manifest().files) {
      auto fr = ShardFileReader::Open(step_dir + "/" + f.name);
      ASSERT_TRUE(fr.ok());
      for (const auto& u : fr->header().units) {
        EXPECT_EQ(u.dtype, DType::kBF16) << u.name;
        elems += u.count;
      }
      bytes += static_cast<int64_t>(f.size);
      std::ifstream in(step_dir + "/" + f.name, std::ios::binary);
      char fixed[12];
      in.read(fixed, 12);
      uint32_t version;
      std::memcpy(&version, fixed + 8, 4);
      EXPECT_EQ(version, kShardFormatVersionBf16);
    }
    EXPECT_LT(bytes, 6 * elems + 4096 * static_cast<int64_t>(reader->manifest().files.size()));
    for (const std::string& resume : std::vector<std::string>{"auto", step_dir}) {
      for (int world : {2, 1}) {
        if (resume == "auto" && world == 1) continue;
        auto again = with;
        again.push_back("checkpoint.resume=" + resume);
        const RunOut resumed = Train(world, again);
        const std::string what = "resume " + resume + " at W=" + std::to_string(world);
        EXPECT_EQ(resumed.start_step, 2) << what;
        // W = 1 sums its micro-batches in another order than W = 2: equal to rounding.
        for (const auto& [s, loss] : resumed.losses) {
          if (world == 2) EXPECT_EQ(loss, straight.losses.at(s)) << what << " step " << s;
          else EXPECT_NEAR(loss, straight.losses.at(s), 1e-4 * loss) << what << " step " << s;
        }
        if (world == 2) ExpectSameState(straight, resumed, what);
      }
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}

// optim.state_dtype changed between the save and the resume: converted on
// load — fp32 -> bf16 rounds each value to nearest, bf16 -> fp32 widens
// exactly; and inference (shardctl eval/export) reads a bf16 checkpoint.
TEST(Bf16StateTrainTest, ResumeAcrossAStateDtypeChangeConverts) {
  const std::string dir = NewDir("convert");
  const std::vector<std::string> ck = {"checkpoint.dir=" + dir, "checkpoint.every_steps=2", "checkpoint.async=false",
                                       "parallel.offload_optimizer=true"};
  auto fp_sets = ck;
  fp_sets.push_back("checkpoint.resume=none");
  const RunOut fp = Train(1, fp_sets, 2);  // saves step 2 in fp32
  auto to_bf = ck;
  to_bf.insert(to_bf.end(), {"optim.state_dtype=bf16", "checkpoint.resume=auto"});
  const RunOut bf = Train(1, to_bf, 2);  // resumes step 2, trains nothing
  EXPECT_EQ(bf.start_step, 2);
  ASSERT_EQ(bf.params.size(), fp.params.size());
  for (size_t u = 0; u < fp.params.size(); ++u) {
    for (size_t i = 0; i < fp.params[u].size(); ++i) {
      ASSERT_EQ(bf.params[u][i], BF16ToF32(F32ToBF16(fp.params[u][i]))) << "unit " << u << " element " << i;
      ASSERT_EQ(bf.m[u][i], BF16ToF32(F32ToBF16(fp.m[u][i])));
      ASSERT_EQ(bf.v[u][i], BF16ToF32(F32ToBF16(fp.v[u][i])));
    }
  }
  // Now a bf16 checkpoint (step 4) resumed with fp32 state: widened exactly.
  auto bf_more = to_bf;
  const RunOut bf4 = Train(1, bf_more, 4);
  EXPECT_EQ(bf4.start_step, 2);
  // Inference and export read the bf16 checkpoint widened: the master as trained.
  auto loaded = LoadModelForInference(dir + "/t/step_00000004", "cpu");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  for (int u = 0; u < loaded->layout.num_units(); ++u) {
    std::vector<float> w;
    loaded->params->CopyUnitToHost(u, &w);
    ASSERT_LE(w.size(), bf4.params[u].size());
    EXPECT_TRUE(std::equal(w.begin(), w.end(), bf4.params[u].begin())) << "unit " << u;
  }
  auto to_fp = ck;
  to_fp.push_back("checkpoint.resume=auto");
  const RunOut fp4 = Train(1, to_fp, 4);
  EXPECT_EQ(fp4.start_step, 4);
  ExpectSameState(bf4, fp4, "bf16 checkpoint resumed with fp32 state");
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace shard
