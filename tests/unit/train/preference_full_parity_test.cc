// Preference training as a full fine-tune (issue 31): every weight trained.
//
// Parity: DPO (with and without label smoothing), IPO and ORPO through the
// Trainer — model.from_hf, pairs from JSONL, fp32, ranks as threads at world 1
// and 2 — three AdamW steps against the independent double-precision
// reference of preference_tape.h with every weight a leaf of its tape (the
// reference model's sums from the starting weights; PyTorch's AdamW with the
// engine's groups: matrices decay, norms and the embedding do not), each
// exported tensor within 1e-5 of its largest weight.
//
// The reference's key: the starting weights' values, not their path (new
// weights at the same path score again; the same weights at another path
// reuse the stored file).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "shard/train/trainer.h"
#include "tests/unit/train/preference_tape.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {

namespace fs = std::filesystem;
using namespace pref_tape;  // NOLINT: the reference's vocabulary

// The learning rate here (the LoRA test's is 1e-2). DPO's chosen and
// rejected replies get equal and opposite factors (dL/dS_r = −dL/dS_c) and
// both replies' first target position sees the same prompt, so those terms
// of the gradient cancel exactly; what is left on some elements (lm_head rows
// of tokens no reply predicts) is small beside the cancelled terms' fp32
// rounding, and AdamW normalises it to a step of about lr whatever its
// accuracy. At lr 1e-2 that put DPO's lm_head 2.1e-5 of its largest weight
// from the reference after three steps (7e-4 of their movement; ipo 1.6e-6,
// orpo 5e-7); the difference scales with lr.
constexpr double kFullLr = 1e-3;

std::string JobYaml(const std::string& model, const std::string& pairs, const std::string& ckpt,
                    const std::string& preference) {
  return "name: pref_full\nmodel: {from_hf: " + model + "}\n"
         "data: {jsonl: " + pairs + ", tokenizer: byte, template: plain, seq_len: " + std::to_string(T) +
         ", shuffle: false}\n"
         "train: {steps: " + std::to_string(kSteps) + ", global_batch: " + std::to_string(kPairs) +
         ", micro_batch: 1, lr: 1.0e-3, warmup_steps: 0, schedule: constant, weight_decay: 0.01, precision: fp32, "
         "adam_betas: [0.9, 0.999], grad_clip: 0, log_every: 1000}\n"
         "checkpoint: {dir: " + ckpt + ", resume: none}\nresources: {device: cpu}\n" + preference;
}

struct EngineRun {
  Status status;
  std::vector<double> losses;
  Tensors weights;  // the fp32 export after the run
};

EngineRun TrainEngine(const std::string& yaml, int world, const std::string& export_dir,
                      const std::vector<std::string>& sets = {}) {
  EngineRun out;
  std::vector<Status> st(world);
  std::vector<std::string> all = sets;
  all.push_back("parallel.world_size=" + std::to_string(world));
  out.status = testing_ranks::OnTrainerRanks(yaml, world, all, [&](Trainer& tr, int r) {
    st[r] = tr.Run([&](const StepMetrics& m) {
      if (r == 0) out.losses.push_back(m.loss);
    });
    if (st[r].ok()) st[r] = tr.ExportHf(export_dir, DType::kF32);
  });
  for (const Status& s : st)
    if (out.status.ok() && !s.ok()) out.status = s;
  if (out.status.ok()) out.weights = ReadSafetensors(export_dir + "/model.safetensors");
  return out;
}

// The reference's three steps of `me` from `base`: losses and weights.
struct RefRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> weights;
};

RefRun TrainReference(const Tensors& base, const std::vector<std::pair<Reply, Reply>>& replies, const Method& me) {
  // The reference model's sums: the starting weights, once.
  std::vector<double> ref_c, ref_r;
  for (const auto& [c, r] : replies) {
    Tape tp;
    const NodeWeights w = Leaves(tp, base);
    ref_c.push_back(tp.v(ReplyLogProb(tp, w, nullptr, c)));
    ref_r.push_back(tp.v(ReplyLogProb(tp, w, nullptr, r)));
  }
  RefRun out;
  std::map<std::string, std::vector<AdamW>> adam;
  for (const auto& [name, t] : base) {
    out.weights[name].assign(t.second.begin(), t.second.end());
    adam[name].resize(t.second.size());
    for (AdamW& a : adam[name]) a.lr = kFullLr;
  }
  for (int step = 1; step <= kSteps; ++step) {
    Tape tp;
    NodeWeights w;  // every weight a leaf
    for (const auto& [name, v] : out.weights)
      for (double x : v) w[name].push_back(tp.Leaf(x));
    std::vector<std::pair<int, double>> pair_losses;
    for (size_t k = 0; k < replies.size(); ++k) {
      const Reply& c = replies[k].first;
      const Reply& r = replies[k].second;
      const int sc = ReplyLogProb(tp, w, nullptr, c), sr = ReplyLogProb(tp, w, nullptr, r);
      pair_losses.push_back({pref_tape::PairLoss(tp, me, sc, sr, c.count(), r.count(), ref_c[k], ref_r[k]), 1.0 / kPairs});
    }
    const int loss = tp.Lin(pair_losses);
    tp.Backward(loss);
    out.losses.push_back(tp.v(loss));
    // The engine's parameter groups (and HF Trainer's, embeddings aside):
    // matrices decay; norms and the embedding do not.
    for (auto& [name, v] : out.weights) {
      const bool decay = base.at(name).first.size() == 2 && name != "model.embed_tokens.weight";
      for (size_t i = 0; i < v.size(); ++i) adam[name][i].Step(&v[i], tp.n[w[name][i]].g, step, decay);
    }
  }
  return out;
}

TEST(PreferenceFullParity, AdamWStepsOnEveryWeightMatchAnIndependentReference) {
  const std::string dir = testing::TempDir() + "/preference_full_parity." + std::to_string(::getpid());
  std::mt19937 rng(13);
  const Tensors base = RandomBase(rng);
  WriteHfModel(dir + "/base", base);
  const auto replies = WritePairs(dir + "/pairs.jsonl");
  const std::vector<Method> methods = Methods();
  for (size_t mi = 0; mi < methods.size(); ++mi) {
    const Method& me = methods[mi];
    SCOPED_TRACE(me.yaml);
    const RefRun ref = TrainReference(base, replies, me);
    for (int world : {1, 2}) {
      SCOPED_TRACE("world " + std::to_string(world));
      const std::string tag = std::to_string(mi) + "-" + std::to_string(world);
      const EngineRun e = TrainEngine(JobYaml(dir + "/base", dir + "/pairs.jsonl", dir + "/ckpt-" + tag, me.yaml),
                                      world, dir + "/export-" + tag);
      ASSERT_TRUE(e.status.ok()) << e.status.ToString();
      ASSERT_EQ(e.losses.size(), static_cast<size_t>(kSteps));
      for (int s = 0; s < kSteps; ++s)
        EXPECT_NEAR(e.losses[s], ref.losses[s], 1e-5 * std::abs(ref.losses[s])) << "step " << s + 1;
      ASSERT_EQ(e.weights.size(), base.size()) << "the export's tensors";
      double worst = 0, max_moved = 0;
      std::string worst_name;
      for (const auto& [name, want] : ref.weights) {
        const auto it = e.weights.find(name);
        ASSERT_NE(it, e.weights.end()) << name;
        const std::vector<float>& got = it->second.second;
        ASSERT_EQ(got.size(), want.size()) << name;
        double diff = 0, largest = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          diff = std::max(diff, std::fabs(got[i] - want[i]));
          largest = std::max(largest, std::fabs(want[i]));
          max_moved = std::max(max_moved, std::fabs(want[i] - base.at(name).second[i]));
        }
        EXPECT_LT(diff, 1e-5 * largest) << name << " after " << kSteps << " steps";
        if (diff / largest > worst) worst = diff / largest, worst_name = name;
      }
      std::printf("%s world %d: losses %.6f %.6f %.6f (reference %.6f %.6f %.6f); weights moved up to %.4f, "
                  "engine vs reference worst %.2e of a tensor's largest weight (%s)\n",
                  me.yaml.substr(12, me.yaml.size() - 13).c_str(), world, e.losses[0], e.losses[1], e.losses[2],
                  ref.losses[0], ref.losses[1], ref.losses[2], max_moved, worst, worst_name.c_str());
      EXPECT_GT(max_moved, 2 * kFullLr) << "three AdamW steps move the weights by about lr each";
    }
  }
  fs::remove_all(dir);
}

std::vector<fs::path> ReferenceFiles(const std::string& prepared) {
  std::vector<fs::path> out;
  const fs::path p(prepared);
  for (const auto& e : fs::directory_iterator(p.parent_path()))
    if (e.path().filename().string().rfind(p.filename().string() + ".ref-", 0) == 0) out.push_back(e.path());
  return out;
}

// One DPO step of a from_hf full fine-tune on pairs prepared at one place
// (data.prepared), so every run sees the reference files the others stored.
Status OneStep(const std::string& dir, const std::string& model, const std::string& tag) {
  const std::string yaml = JobYaml(model, dir + "/pairs.jsonl", dir + "/ckpt-" + tag,
                                   "preference: {method: dpo, beta: 0.5}\n");
  return TrainEngine(yaml, 1, dir + "/export-" + tag, {"train.steps=1", "data.prepared=" + dir + "/prepared/pairs"})
      .status;
}

TEST(PreferenceReferenceKey, IsTheStartingWeightsNotTheirPath) {
  const std::string dir = testing::TempDir() + "/preference_ref_key." + std::to_string(::getpid());
  std::mt19937 rng(5);
  Tensors base = RandomBase(rng);
  WriteHfModel(dir + "/a", base);
  WritePairs(dir + "/pairs.jsonl");
  const std::string prepared = dir + "/prepared/pairs";
  ASSERT_TRUE(OneStep(dir, dir + "/a", "1").ok());
  auto refs = ReferenceFiles(prepared);
  ASSERT_EQ(refs.size(), 1u);
  const auto written = fs::last_write_time(refs[0]);

  // The same weights at another path: the stored values are read back.
  fs::copy(dir + "/a", dir + "/b");
  ASSERT_TRUE(OneStep(dir, dir + "/b", "2").ok());
  EXPECT_EQ(ReferenceFiles(prepared).size(), 1u) << "a copy of the model scored again";
  EXPECT_EQ(fs::last_write_time(refs[0]), written) << "a copy of the model rewrote the reference";

  // Other weights at the first path: scored again, under another key.
  base["model.norm.weight"].second[0] += 0.25f;
  WriteHfModel(dir + "/a", base);
  ASSERT_TRUE(OneStep(dir, dir + "/a", "3").ok());
  EXPECT_EQ(ReferenceFiles(prepared).size(), 2u) << "new weights at the same path reused the old reference";
  fs::remove_all(dir);
}

// A resumed full fine-tune never loads its starting weights again (Init), so
// it cannot hash them: the key comes from the checkpoint it resumes, and the
// stored values are read back, not scored again from whatever the weights
// hold before the checkpoint is loaded.
TEST(PreferenceReferenceKey, AResumedFromHfRunReadsItsFirstAttemptsFile) {
  const std::string dir = testing::TempDir() + "/preference_ref_resume." + std::to_string(::getpid());
  std::mt19937 rng(9);
  WriteHfModel(dir + "/m", RandomBase(rng));
  WritePairs(dir + "/pairs.jsonl");
  const std::string yaml = JobYaml(dir + "/m", dir + "/pairs.jsonl", dir + "/ckpt", "preference: {method: dpo}\n");
  const std::vector<std::string> sets = {"train.steps=2", "checkpoint.every_steps=1", "checkpoint.async=false",
                                         "checkpoint.resume=auto", "data.prepared=" + dir + "/prepared/pairs"};
  std::vector<double> losses;
  auto run = [&](int64_t stop) {
    return testing_ranks::OnTrainerRanks(yaml, 1, sets, [&](Trainer& tr, int) {
      while (tr.step() < stop) {
        auto m = tr.Step();
        ASSERT_TRUE(m.ok()) << m.status().ToString();
        losses.push_back(m->loss);
      }
      ASSERT_TRUE(tr.checkpointer()->Wait().ok());
    });
  };
  ASSERT_TRUE(run(1).ok());
  auto refs = ReferenceFiles(dir + "/prepared/pairs");
  ASSERT_EQ(refs.size(), 1u);
  const auto written = fs::last_write_time(refs[0]);
  ASSERT_TRUE(run(2).ok());
  ASSERT_EQ(losses.size(), 2u) << "the second attempt did not resume at step 1";
  EXPECT_EQ(ReferenceFiles(dir + "/prepared/pairs").size(), 1u) << "the resumed attempt scored under another key";
  EXPECT_EQ(fs::last_write_time(refs[0]), written) << "the resumed attempt rewrote the reference";
  EXPECT_LT(losses[1], losses[0]) << "step 2 trained against a wrong reference";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shard
