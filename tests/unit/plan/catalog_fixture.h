// The source tree's hardware catalog for planner tests (SHARDD_SOURCE_DIR,
// or the working directory), loaded once per test binary.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "shard/plan/hardware.h"

namespace shard::plan::testing_catalog {

inline std::string Root() {
  const char* src = std::getenv("SHARDD_SOURCE_DIR");
  return src ? src : ".";
}

inline const HardwareCatalog& Catalog() {
  static const HardwareCatalog cat = [] {
    auto c = LoadHardwareCatalog(Root() + "/configs/hardware");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : HardwareCatalog{};
  }();
  return cat;
}

}  // namespace shard::plan::testing_catalog
