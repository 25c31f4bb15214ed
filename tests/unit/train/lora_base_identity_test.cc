// A LoRA checkpoint's base identity is the base's weights and its parsed
// config.json: a model.from_hf folder whose weights changed (same layout,
// same file offsets) is refused on resume; the same base with config.json
// re-indented is accepted, and so is a resume at another world size (every
// rank hashes only the shard it streams; the sums combine). The hash itself:
// slices sum to the whole, limbs fold back exactly.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "shard/model/hf_io.h"
#include "shard/model/init.h"
#include "shard/train/base_weights_hash.h"
#include "shard/train/trainer.h"
#include "tests/unit/train/phrase_tokens.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

TEST(BaseWeightsHash, SlicesSumToTheWholeAndLimbsFoldBack) {
  std::mt19937 rng(7);
  std::vector<float> v(10007);
  for (float& x : v) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  const uint64_t whole = WeightsSliceHash(3, 0, v.data(), static_cast<int64_t>(v.size()));
  for (int64_t cut : {int64_t{1}, int64_t{4096}, int64_t{5003}, int64_t{10006}}) {
    const uint64_t a = WeightsSliceHash(3, 0, v.data(), cut);
    const uint64_t b = WeightsSliceHash(3, cut, v.data() + cut, static_cast<int64_t>(v.size()) - cut);
    EXPECT_EQ(a + b, whole) << "cut at " << cut;
    // The same sum through the limbs, as the all-reduce carries it.
    std::array<double, 4> la = HashToLimbs(a), lb = HashToLimbs(b), sum;
    for (int k = 0; k < 4; ++k) sum[k] = la[k] + lb[k];
    EXPECT_EQ(FoldHashLimbs(sum), whole);
  }
  // Position and unit are part of each term: one changed, moved or swapped value moves the hash.
  std::vector<float> w = v;
  w[5000] = std::nextafter(w[5000], 2.0f);
  EXPECT_NE(WeightsSliceHash(3, 0, w.data(), static_cast<int64_t>(w.size())), whole);
  w = v;
  std::swap(w[10], w[20]);
  EXPECT_NE(WeightsSliceHash(3, 0, w.data(), static_cast<int64_t>(w.size())), whole);
  EXPECT_NE(WeightsSliceHash(4, 0, v.data(), static_cast<int64_t>(v.size())), whole);
}

LlamaConfig SmallBase() {
  LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.max_position_embeddings = 64;
  return c;
}

// An HF folder of SmallBase with weights drawn from `seed`.
void WriteBase(const std::string& dir, uint64_t seed) {
  const LlamaConfig c = SmallBase();
  const ParamLayout l = ParamLayout::ForLlama(c);
  Status st = ExportHf(dir, c, l, [&](int u, std::vector<float>* buf) {
    buf->assign(l.units[u].numel, 0.0f);
    InitUnitParams(l.units[u], u, seed, 0.02f, 0, l.units[u].numel, buf->data());
    return OkStatus();
  }, DType::kF32);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

std::string Job(const std::string& base, const std::string& tokens, const std::string& ckpt, int world) {
  return "name: ident\nmodel: {from_hf: " + base + "}\ndata: {tokens: " + tokens +
         ", seq_len: 16}\ntrain: {steps: 8, global_batch: 4, micro_batch: 2, lr: 1.0e-2, log_every: 1000}\n"
         "parallel: {world_size: " + std::to_string(world) + "}\ncheckpoint: {dir: " + ckpt +
         ", every_steps: 4, resume: auto}\nresources: {device: cpu}\n"
         "peft: {method: lora, r: 2, alpha: 4, target_modules: [q_proj, v_proj]}\n";
}

TEST(LoraBaseIdentity, TheBasesWeightsNotItsFilesDecideAResume) {
  const std::string root = ::testing::TempDir() + "/lora_base_identity";
  fs::remove_all(root);
  const std::string base = root + "/base", ckpt = root + "/ckpt";
  const std::string tokens = testing_tokens::MakePhraseTokens("lora_base_identity", 4000, 64);
  WriteBase(base, 5);
  {
    auto job = ParseJobConfig(Job(base, tokens, ckpt, 1), "job.yaml", {});
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    auto t = Trainer::Create(*job);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*t)->Step().ok());
  }
  ASSERT_TRUE(fs::exists(ckpt + "/ident/lora_step_4/state.json"));
  auto resume = [&](int world) -> StatusOr<int64_t> {
    int64_t step = -1;
    Status st = testing_ranks::OnTrainerRanks(Job(base, tokens, ckpt, world), world, {},
                                              [&](Trainer& t, int r) { if (r == 0) step = t.step(); });
    if (!st.ok()) return st;
    return step;
  };

  // Other weights in the same layout: config.json and every tensor's name,
  // dtype, shape and byte range are as before.
  const std::string saved = root + "/saved_weights";
  fs::copy_file(base + "/model.safetensors", saved);
  WriteBase(base, 6);
  auto other = resume(1);
  ASSERT_FALSE(other.ok()) << "resumed at step " << *other << " on another base's weights";
  EXPECT_NE(other.status().message().find("another base model"), std::string::npos) << other.status().ToString();
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument) << "no retry helps: the worker's can-never-run exit";

  // The trained-on weights again, config.json re-indented and its keys reordered: the same base.
  fs::copy_file(saved, base + "/model.safetensors", fs::copy_options::overwrite_existing);
  std::ifstream in(base + "/config.json");
  const nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(in);
  nlohmann::ordered_json reordered;
  for (auto it = cfg.rbegin(); it != cfg.rend(); ++it) reordered[it.key()] = it.value();
  in.close();
  std::ofstream(base + "/config.json") << reordered.dump(4) << "\n";
  auto same = resume(1);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(*same, 4);
  // ...at any world size and strategy: each rank hashed its own shard.
  auto two = resume(2);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(*two, 4);
}

}  // namespace
}  // namespace shard
