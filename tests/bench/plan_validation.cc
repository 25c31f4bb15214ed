// Prints the planner's predictions beside published figures for the same
// setups (docs/planner-validation.md has the sources and the discussion).
// tests/unit/plan/validation_test.cc asserts the same rows.
#include <cmath>
#include <cstdio>

#include "tests/unit/plan/published_points.h"

int main() {
  auto cat = shard::plan::LoadDefaultHardwareCatalog();
  if (!cat.ok()) {
    std::fprintf(stderr, "plan_validation: %s\n", cat.status().ToString().c_str());
    return 1;
  }
  std::printf("%-5s %-62s %11s %11s %-9s %7s %s\n", "src", "what", "published", "predicted", "unit", "error",
              "tolerance");
  int worst_row = -1, row = 0;
  double worst = 0;
  for (const auto& p : shard::plan::validation::PublishedPoints(*cat)) {
    const double err = p.predicted / p.published - 1;
    std::printf("%-5s %-62s %11.2f %11.2f %-9s %+6.1f%% %s\n", p.source.c_str(), p.what.c_str(), p.published,
                p.predicted, p.unit.c_str(), 100 * err,
                p.tolerance > 0 ? ("+/-" + std::to_string(static_cast<int>(p.tolerance * 100)) + "%").c_str()
                                : "shown only");
    if (!p.note.empty()) std::printf("%-5s   %s\n", "", p.note.c_str());
    if (p.tolerance > 0 && std::abs(err) > worst) worst = std::abs(err), worst_row = row;
    ++row;
  }
  std::printf("\nworst asserted row: %+.1f%% (row %d)\n", 100 * worst, worst_row);
  return 0;
}
