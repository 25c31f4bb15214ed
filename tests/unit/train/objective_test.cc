// The training objective is one interface the trainer's step calls
// (shard/train/objective.h): a fake objective whose loss and gradient are
// known reaches the step's metrics and the optimizer through the trainer,
// with the calls in the order the interface promises.
#include "shard/train/objective.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "shard/train/trainer.h"
#include "tests/unit/train/phrase_tokens.h"

namespace shard {
namespace {

constexpr double kLossPerItem = 2.5;  // each micro-batch's loss sum: this per item
constexpr float kGrad = 0.5f;         // every parameter's gradient, in units of grad_scale

struct Calls {
  int prepares = 0, begins = 0, micro_steps = 0, finishes = 0;
  int64_t items = 0, global_items = 0;
  double loss_at_finish = -1;
};

class FakeObjective : public Objective {
 public:
  explicit FakeObjective(Calls* calls) : calls_(calls) {}
  Status Prepare(const ObjectiveParts& parts) override {
    p_ = parts;
    ++calls_->prepares;
    return OkStatus();
  }
  void BeginStep(int64_t global_items, double) override {
    ++calls_->begins;
    calls_->global_items = global_items;
  }
  StatusOr<double> MicroStep(const DeviceBatch&, int64_t, int64_t items, const int32_t*, float grad_scale) override {
    ++calls_->micro_steps;
    calls_->items += items;
    // The gradient buffers accumulate over micro-batches, as a backward adds into them.
    const ParamLayout& layout = p_.model->layout();
    for (int u = 0; u < layout.num_units(); ++u) {
      const int64_t n = layout.units[u].numel;
      ASSIGN_OR_RETURN(DeviceBuffer mine, DeviceBuffer::Create(p_.backend, n));
      p_.backend->Fill(mine.data(), n, kGrad * grad_scale);
      ASSIGN_OR_RETURN(float* g, p_.runtime->GradBuffer(u));
      p_.backend->Add(g, mine.data(), g, n);
      RETURN_IF_ERROR(p_.runtime->GradsDone(u));
    }
    return kLossPerItem * static_cast<double>(items);
  }
  Status FinishStep(StepMetrics* m) override {
    ++calls_->finishes;
    calls_->loss_at_finish = m->loss;
    m->nll = 42;  // the objective's own figure lands in the step's metrics
    return OkStatus();
  }
  Status Evaluate(StepMetrics*) override { return Unimplemented("no eval in this test"); }

 private:
  Calls* calls_;
  ObjectiveParts p_;
};

TEST(ObjectiveTest, FakeObjectivesLossAndGradientReachTheOptimizer) {
  const std::string tokens = testing_tokens::MakePhraseTokens("objective", 4000, 512);
  auto job = ParseJobConfig("name: t\nmodel: {preset: tiny}\ndata: {tokens: " + tokens +
                                ", seq_len: 32}\ntrain: {steps: 1, global_batch: 8, micro_batch: 2, lr: 1.0e-3, "
                                "schedule: constant, log_every: 1000}\n",
                            "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  Calls calls;
  DistContext dist;
  dist.make_objective = [&](const JobConfig&) { return std::make_unique<FakeObjective>(&calls); };
  auto t = Trainer::Create(*job, dist);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(calls.prepares, 1);
  const ParamLayout& layout = (*t)->layout();
  std::vector<std::vector<float>> before(layout.num_units());
  double numel = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    ASSERT_TRUE((*t)->UnitParams(u, &before[u]).ok());
    numel += static_cast<double>(layout.units[u].numel);
  }

  auto m = (*t)->Step();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // The calls: one step of 8 items in 4 micro-batches of 2, finished once.
  EXPECT_EQ(calls.begins, 1);
  EXPECT_EQ(calls.global_items, 8);
  EXPECT_EQ(calls.micro_steps, 4);
  EXPECT_EQ(calls.items, 8);
  EXPECT_EQ(calls.finishes, 1);
  // The loss: the micro-batches' sums over the step's target tokens (8 windows of 32).
  const double targets = 8 * 32;
  EXPECT_DOUBLE_EQ(m->loss, kLossPerItem * 8 / targets);
  EXPECT_DOUBLE_EQ(calls.loss_at_finish, m->loss);
  EXPECT_EQ(m->nll, 42);
  // The gradient: four micro-batches of kGrad/targets per parameter, unscaled.
  const double g = 4 * kGrad / targets;
  EXPECT_NEAR(m->grad_norm, g * std::sqrt(numel), 1e-4 * g * std::sqrt(numel));
  // AdamW's first update moves every parameter by lr against the gradient's
  // sign (m̂/√v̂ = 1; no weight decay by default), whatever clipping did.
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> after;
    ASSERT_TRUE((*t)->UnitParams(u, &after).ok());
    ASSERT_EQ(after.size(), before[u].size());
    for (size_t i = 0; i < after.size(); i += 97)
      ASSERT_NEAR(after[i] - before[u][i], -m->lr, 1e-6) << "unit " << u << " element " << i;
  }
  EXPECT_DOUBLE_EQ(m->lr, 1.0e-3);
}

}  // namespace
}  // namespace shard
