// train.loss_scale parsing (shard/spec/loss_scale.h): auto follows the
// precision, modes and numbers keep their spelling, bad values are refused
// when the job file is read.
#include "shard/spec/loss_scale.h"

#include <gtest/gtest.h>

namespace shard {
namespace {

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
