// The loss scaler's state machine alone: off / static / dynamic modes,
// back-off with a floor, growth after a window of clean steps with a ceiling,
// restore of a saved state, and train.loss_scale parsing.
#include <gtest/gtest.h>

#include <cmath>

#include "shard/optim/loss_scaler.h"

namespace shard {
namespace {

LossScalerOptions Dynamic(int64_t window) {
  LossScalerOptions o;
  o.mode = LossScaleMode::kDynamic;
  o.growth_interval = window;
  return o;
}

TEST(LossScalerTest, OffAppliesEveryStepAtScaleOne) {
  LossScaler s(LossScalerOptions{});
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_TRUE(s.Update(false));
  EXPECT_TRUE(s.Update(true)) << "off: the caller decides what a non-finite step means";
  EXPECT_EQ(s.scale(), 1.0);
}

TEST(LossScalerTest, StaticSkipsOverflowsButNeverMoves) {
  LossScalerOptions o;
  o.mode = LossScaleMode::kStatic;
  o.init_scale = 1024;
  LossScaler s(o);
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_FALSE(s.Update(true));
  EXPECT_EQ(s.scale(), 1024.0);
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_TRUE(s.Restore(8.0, 3).ok());
  EXPECT_EQ(s.scale(), 1024.0) << "a static scale comes from the job file, not the checkpoint";
}

TEST(LossScalerTest, DynamicHalvesOnOverflowAndDoublesAfterTheWindow) {
  LossScaler s(Dynamic(3));
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_FALSE(s.Update(true));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_TRUE(s.Update(false));
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.good_steps(), 2);
  EXPECT_EQ(s.scale(), 32768.0);
  // An overflow resets the count: growth needs a full window in a row.
  EXPECT_FALSE(s.Update(true));
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_TRUE(s.Update(false));
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_TRUE(s.Update(false));  // third clean step in a row
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.good_steps(), 0);
}

TEST(LossScalerTest, DynamicStopsAtTheFloorAndTheCeiling) {
  LossScaler s(Dynamic(1));
  for (int i = 0; i < 200; ++i) EXPECT_FALSE(s.Update(true));
  EXPECT_EQ(s.scale(), 1.0) << "never 0 nor denormal";
  EXPECT_TRUE(s.at_floor());
  EXPECT_TRUE(std::isnormal(s.scale()));
  for (int i = 0; i < 200; ++i) EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 16777216.0);
  EXPECT_TRUE(std::isfinite(s.scale()));
  EXPECT_FALSE(s.at_floor());
}

TEST(LossScalerTest, RestoreContinuesTheSameWalk) {
  LossScaler a(Dynamic(4));
  for (bool inf : {false, true, false, false}) a.Update(inf);
  LossScaler b(Dynamic(4));
  ASSERT_TRUE(b.Restore(a.scale(), a.good_steps()).ok());
  for (bool inf : {false, false, true, false, false, false, false, false}) {
    EXPECT_EQ(a.Update(inf), b.Update(inf));
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.good_steps(), b.good_steps());
  }
}

TEST(LossScalerTest, RestoreRefusesImpossibleStates) {
  LossScaler s(Dynamic(10));
  EXPECT_NE(s.Restore(0.0, 0).message().find("outside"), std::string::npos);
  EXPECT_FALSE(s.Restore(NAN, 0).ok());
  EXPECT_FALSE(s.Restore(INFINITY, 0).ok());
  EXPECT_FALSE(s.Restore(0.5, 0).ok()) << "below the floor";
  EXPECT_NE(s.Restore(8.0, -1).message().find("negative"), std::string::npos);
  EXPECT_EQ(s.scale(), 65536.0) << "a refused restore changes nothing";
  // Saved under a longer window: the count restarts.
  ASSERT_TRUE(s.Restore(8.0, 25).ok());
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_EQ(s.good_steps(), 0);
}

}  // namespace
}  // namespace shard
