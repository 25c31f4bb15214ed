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

TEST(ParseLossScaleTest, AutoFollowsThePrecision) {
  auto a = ParseLossScale("auto", /*fp16=*/true, 2000);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->mode, LossScaleMode::kDynamic);
  EXPECT_EQ(a->init_scale, 65536.0);
  EXPECT_EQ(a->growth_interval, 2000);
  auto o = ParseLossScale("auto", /*fp16=*/false, 2000);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->mode, LossScaleMode::kOff) << "auto is off for every precision but fp16";
}

TEST(ParseLossScaleTest, ModesAndNumbers) {
  EXPECT_EQ(ParseLossScale("dynamic", /*fp16=*/false, 7)->mode, LossScaleMode::kDynamic);
  EXPECT_EQ(ParseLossScale("dynamic", /*fp16=*/false, 7)->growth_interval, 7);
  EXPECT_EQ(ParseLossScale("none", /*fp16=*/true, 7)->mode, LossScaleMode::kOff);
  auto s = ParseLossScale("1024", /*fp16=*/false, 7);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->mode, LossScaleMode::kStatic);
  EXPECT_EQ(s->init_scale, 1024.0);
  EXPECT_EQ(ParseLossScale("0.5", /*fp16=*/false, 7)->init_scale, 0.5);
  EXPECT_EQ(ParseLossScale("1e3", /*fp16=*/false, 7)->init_scale, 1000.0);
}

TEST(ParseLossScaleTest, SettingsKeepTheirSpelling) {
  for (const char* text : {"auto", "dynamic", "none", "1024", "0.5"}) {
    auto s = ParseLossScaleSetting(text);
    ASSERT_TRUE(s.ok()) << text;
    EXPECT_EQ(s->ToString(), text);
  }
  EXPECT_EQ(ParseLossScaleSetting("1e3")->value, 1000.0);
}

TEST(ParseLossScaleTest, BadValuesAreRefused) {
  for (const char* bad : {"", "0", "-8", "inf", "nan", "1e400", "1e-320", "12x", "Dynamic", "true", "off"}) {
    auto o = ParseLossScale(bad, /*fp16=*/false, 2000);
    EXPECT_FALSE(o.ok()) << "'" << bad << "'";
    EXPECT_FALSE(ParseLossScaleSetting(bad).ok()) << "refused when the job file is read: '" << bad << "'";
    if (!o.ok()) {
      EXPECT_NE(o.status().message().find("positive number"), std::string::npos) << bad;
    }
  }
  EXPECT_NE(ParseLossScale("dynamic", /*fp16=*/false, 0).status().message().find("loss_scale_window"), std::string::npos);
  EXPECT_FALSE(ParseLossScale("none", /*fp16=*/false, -3).ok()) << "the window is checked in every mode";
}

}  // namespace
}  // namespace shard
