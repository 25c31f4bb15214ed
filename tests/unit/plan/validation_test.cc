// The planner against published figures (docs/planner-validation.md): each
// asserted row within its stated tolerance. tests/bench/plan_validation prints
// the same table.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/unit/plan/published_points.h"

namespace shard::plan {
namespace {

TEST(ValidationTest, PublishedFiguresWithinTolerance) {
  auto cat = LoadDefaultHardwareCatalog();
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  int asserted = 0;
  for (const auto& p : validation::PublishedPoints(*cat)) {
    const double err = p.predicted / p.published - 1;
    std::printf("[%-4s] %-62s published %9.2f  predicted %9.2f %-8s %+6.1f%%\n", p.source.c_str(), p.what.c_str(),
                p.published, p.predicted, p.unit.c_str(), 100 * err);
    if (p.tolerance <= 0) continue;
    ++asserted;
    EXPECT_LE(std::abs(err), p.tolerance) << p.source << ": " << p.what << " (" << p.note << ")";
  }
  EXPECT_GE(asserted, 15);
}

}  // namespace
}  // namespace shard::plan
