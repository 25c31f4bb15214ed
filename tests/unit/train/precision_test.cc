// The job file's precision keys (train.precision, parallel.reduce_dtype) and
// their mapping onto the FSDP runtime's options. Pure.
#include "shard/backend/backend.h"
#include "shard/train/precision.h"

#include <gtest/gtest.h>

namespace shard {
namespace {

const char* kJob =
    "name: p\nmodel: {preset: tiny}\ndata: {tokens: t.u32, seq_len: 16}\n"
    "train: {steps: 1, global_batch: 2, micro_batch: 2}\n";

StatusOr<PrecisionPlan> Plan(const std::vector<std::string>& sets) {
  ASSIGN_OR_RETURN(JobConfig job, ParseJobConfig(kJob, "job.yaml", sets));
  return PlanPrecision(ResolveAutoPrecision(job.train.precision, /*gpu=*/false, false), job.train, job.parallel);
}

TEST(PrecisionTest, AutoAndFp32StayFp32) {
  for (const char* p : {"auto", "fp32"}) {
    auto plan = Plan({std::string("train.precision=") + p});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->param_dtype, DType::kF32) << p;
    EXPECT_EQ(plan->reduce_dtype, DType::kF32) << p;
    EXPECT_TRUE(plan->warning.empty());
  }
}

TEST(PrecisionTest, Bf16ParamsAndReduceDtypeAreIndependent) {
  auto plan = Plan({"train.precision=bf16"});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->param_dtype, DType::kBF16);
  EXPECT_EQ(plan->reduce_dtype, DType::kF32) << "reduce_dtype defaults to fp32";
  plan = Plan({"train.precision=bf16", "parallel.reduce_dtype=bf16"});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->reduce_dtype, DType::kBF16);
  plan = Plan({"parallel.reduce_dtype=bf16"});  // fp32 weights, bf16 gradient wire
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->param_dtype, DType::kF32);
  EXPECT_EQ(plan->reduce_dtype, DType::kBF16);
  FsdpOptions fo;
  ApplyPrecision(*plan, &fo);
  EXPECT_EQ(fo.param_dtype, DType::kF32);
  EXPECT_EQ(fo.reduce_dtype, DType::kBF16);
}

TEST(PrecisionTest, Fp16WithoutALossScaleWarns) {
  // precision fp16: loss_scale auto means dynamic, so no warning.
  auto plan = Plan({"train.precision=fp16"});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->param_dtype, DType::kF16);
  EXPECT_TRUE(plan->warning.empty()) << plan->warning;
  // ...unless the scaler is turned off.
  plan = Plan({"train.precision=fp16", "train.loss_scale=none"});
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(plan->warning.find("train.loss_scale"), std::string::npos) << plan->warning;
  // An fp16 reduce alone does not turn the scaler on: warn.
  plan = Plan({"parallel.reduce_dtype=fp16"});
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(plan->warning.find("train.loss_scale"), std::string::npos) << plan->warning;
  plan = Plan({"parallel.reduce_dtype=fp16", "train.loss_scale=dynamic"});
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->warning.empty()) << plan->warning;
}

TEST(PrecisionTest, AutoResolvesPerDevice) {
  EXPECT_EQ(ResolveAutoPrecision(Precision::kAuto, /*gpu=*/false, /*native_bf16=*/false), Precision::kFp32);
  EXPECT_EQ(ResolveAutoPrecision(Precision::kAuto, /*gpu=*/true, /*native_bf16=*/true), Precision::kBf16);
  EXPECT_EQ(ResolveAutoPrecision(Precision::kAuto, /*gpu=*/true, /*native_bf16=*/false), Precision::kFp16);
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    EXPECT_EQ(ResolveAutoPrecision(p, true, true), p);
    EXPECT_EQ(ResolveAutoPrecision(p, false, false), p);
  }
  // The CPU backend stores bf16 but computes in fp32: auto stays fp32 there.
  auto cpu = CreateBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE((*cpu)->native_bf16());
}

TEST(PrecisionTest, BadValuesNameTheKey) {
  auto job = ParseJobConfig(kJob, "job.yaml", {"parallel.reduce_dtype=int8"});
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("parallel.reduce_dtype"), std::string::npos) << job.status().ToString();
  job = ParseJobConfig(kJob, "job.yaml", {"train.precision=fp8"});
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("train.precision"), std::string::npos) << job.status().ToString();
}

}  // namespace
}  // namespace shard
